"""Bad inputs through the scripts: each gives `error: <message>` on stderr, exit status 2 and no traceback.

The table runs each script's `__main__` in this process (runpy, real argv, real exit); a second test runs two cases
(a config error of train.py found during training, a checkpoint error of eval.py) as separate processes to check the
status and stderr the shell sees.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from unet_transformer_seg.data.image_io import write_png

from seg_helpers import run_script, run_script_in_process, tiny_cli_args


def _folder_with_mask_value(root: Path, value: int, mask_suffix: str = ".png") -> Path:
    for split in ("train", "val"):
        (root / split / "images").mkdir(parents=True)
        (root / split / "masks").mkdir(parents=True)
        write_png(root / split / "images" / "a.png", np.zeros((16, 16, 3), np.uint8))
        mask = np.zeros((16, 16), np.uint8)
        mask[3, 5] = value
        Image.fromarray(mask).save(root / split / "masks" / f"a{mask_suffix}")
    return root


def _empty_folder(root: Path) -> Path:
    for split in ("train", "val"):
        (root / split / "images").mkdir(parents=True)
        (root / split / "masks").mkdir(parents=True)
    return root


def _foreign_checkpoint(path: Path) -> Path:
    torch.save({"weights": torch.zeros(2)}, path)
    return path


CASES = [
    ("unknown key", lambda t: ["train.py", "--config", "configs/quick.yaml", "--set", "train.lrr=1"],
     "unknown config key 'train.lrr'"),
    ("wrong type", lambda t: ["train.py", "--config", "configs/quick.yaml", "--set", "train.batch_size=many"],
     "config key 'train.batch_size' must be an integer, got str 'many'"),
    ("negative size", lambda t: ["train.py", "--config", "configs/quick.yaml", "--set", "data.image_size=-32"],
     "config key 'data.image_size' must be >= 8, got -32"),
    ("missing config", lambda t: ["train.py", "--config", str(t / "none.yaml")], "config file not found"),
    ("missing data folder", lambda t: ["train.py", "--config", "configs/quick.yaml",
                                       *tiny_cli_args(t, "data.kind=folder", f"data.root={t / 'nowhere'}")],
     "folder not found"),
    ("empty dataset", lambda t: ["train.py", "--config", "configs/quick.yaml",
                                 *tiny_cli_args(t, "data.kind=folder", f"data.root={_empty_folder(t / 'empty')}")],
     "no images"),
    ("a fold without the number of folds", lambda t: ["train.py", "--config", "configs/quick.yaml",
                                                      "--set", "data.fold=1"], "'data.fold' and 'data.folds'"),
    ("auto on the toy set", lambda t: ["train.py", "--config", "configs/quick.yaml", "--set", "data.image_size=auto"],
     "config key 'data.image_size' is auto, which is planned from a folder data set"),
    ("an inert key", lambda t: ["train.py", "--config", "configs/quick.yaml", "--set", "data.foreground_fraction=0.3"],
     "config key 'data.foreground_fraction' is set to 0.3 but does nothing here"),
    ("NaN in config", lambda t: ["train.py", "--config", "configs/quick.yaml", "--set", "train.lr=.nan"],
     "config key 'train.lr' must be > 0.0, got nan"),
    ("NaN in data.mean", lambda t: ["train.py", "--config", "configs/quick.yaml",
                                    *tiny_cli_args(t, "data.mean=.nan")],
     "config key 'data.mean' must be a finite number, got nan"),
    ("class id beyond num_classes", lambda t: ["train.py", "--config", "configs/quick.yaml",
                                               *tiny_cli_args(t, "data.kind=folder", "train.batch_size=1",
                                                              f"data.root={_folder_with_mask_value(t / 'bad', 9)}")],
     "holds class id 9 at (row 3, col 5), but data.num_classes = 4 allows 0..3"),
    ("VOC void without ignore_index", lambda t: ["train.py", "--config", "configs/quick.yaml",
                                                 *tiny_cli_args(t, "data.kind=folder", "train.batch_size=1",
                                                                f"data.root={_folder_with_mask_value(t / 'v', 255)}")],
     "if 255 marks void pixels (as in PASCAL VOC), set data.ignore_index: 255"),
    ("JPEG mask", lambda t: ["train.py", "--config", "configs/quick.yaml",
                             *tiny_cli_args(t, "data.kind=folder",
                                            f"data.root={_folder_with_mask_value(t / 'j', 1, '.jpg')}")],
     "is a JPEG: lossy compression changes class ids"),
    ("ignore_index that is a class", lambda t: ["train.py", "--config", "configs/quick.yaml", "--set",
                                                "data.ignore_index=2"], "'data.ignore_index' must not be a class id"),
    ("class weights of the wrong length", lambda t: ["train.py", "--config", "configs/quick.yaml", "--set",
                                                     "train.class_weights=[1, 2]"], "one weight per class (4), got 2"),
    ("tile overlap of 1", lambda t: ["eval.py", "--checkpoint", str(t / "x.pt"), "--tile-overlap", "1"],
     "--tile-overlap must be in [0, 1), got 1.0"),
    ("tile batch of 0", lambda t: ["predict.py", "--checkpoint", str(t / "x.pt"), "a.png", "--tile-batch", "0"],
     "--tile-batch must be >= 1, got 0"),
    ("benchmark without rounds", lambda t: ["benchmark.py", "--rounds", "0"], "--rounds must be >= 1, got 0"),
    ("mixed sizes written wrong", lambda t: ["export_toy_dataset.py", "--out", str(t / "x"), "--sizes", "97by211"],
     "--sizes must look like 97x211,640x480"),
    ("missing checkpoint", lambda t: ["eval.py", "--checkpoint", str(t / "nothing.pt")], "checkpoint or run folder"),
    ("foreign checkpoint", lambda t: ["eval.py", "--checkpoint", str(_foreign_checkpoint(t / "other.pt"))],
     "is not a unet_transformer_seg checkpoint"),
    ("export directory without sidecar", lambda t: ["eval.py", "--backend", "onnx", "--checkpoint", str(t)],
     "has no export.json (write one with scripts/export.py)"),
    ("checkpoint file for the onnx backend", lambda t: ["predict.py", "--backend", "onnx", "--checkpoint",
                                                        str(_foreign_checkpoint(t / "x.pt")), "a.png"],
     "x.pt is a file; --backend onnx takes an export directory"),
    ("zero threads", lambda t: ["eval.py", "--checkpoint", str(t / "x.pt"), "--threads", "0"],
     "--threads must be >= 1, got 0"),
    ("export of a foreign checkpoint", lambda t: ["export.py", "--checkpoint", str(_foreign_checkpoint(t / "o.pt")),
                                                  "--out", str(t / "export")],
     "is not a unet_transformer_seg checkpoint"),
    ("deploy benchmark without checkpoints", lambda t: ["benchmark.py", "--mode", "deploy"],
     "--mode deploy needs --checkpoints"),
    ("missing image", lambda t: ["predict.py", "--checkpoint", str(_foreign_checkpoint(t / "x.pt")), "a.png"],
     "is not a unet_transformer_seg checkpoint"),
    ("resume and config together", lambda t: ["train.py", "--config", "configs/quick.yaml", "--resume", str(t)],
     "give either --config or --resume"),
]


FOUND_DURING_TRAINING = {"class id beyond num_classes", "VOC void without ignore_index"}


@pytest.mark.parametrize("name, make_args, message", CASES, ids=[case[0] for case in CASES])
def test_bad_input_gives_a_clear_error(tmp_path, name, make_args, message):
    script, *args = make_args(tmp_path)
    result = run_script_in_process(script, *args)  # any exception other than SystemExit is a crash: the test fails
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    if name not in FOUND_DURING_TRAINING:  # everything else is caught before a run folder is created
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["foreign checkpoint", "VOC void without ignore_index"])
def test_bad_input_in_a_real_process(tmp_path, name):
    _, make_args, message = next(case for case in CASES if case[0] == name)
    script, *args = make_args(tmp_path)
    result = run_script(script, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
