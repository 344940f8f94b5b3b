"""eval.py and predict.py for real use: ensembles of several checkpoints, inputs given as folders and glob patterns,
probability maps, class names and the confusion matrix in the reports. Tiny checkpoints saved in this process."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from unet_transformer_seg.checkpointing import save_checkpoint
from unet_transformer_seg.config import config_to_dict, load_config
from unet_transformer_seg.data.image_io import read_image, read_mask, write_png
from unet_transformer_seg.ensemble import load_ensemble
from unet_transformer_seg.inference import Segmenter
from unet_transformer_seg.models import build_model
from unet_transformer_seg.training.evaluate import evaluate, evaluation_split

from seg_helpers import TINY_OVERRIDES, finish_script, run_script_in_process, start_script

TOY_NAMES = ["background", "circle", "square", "triangle"]
SIZES = {"wide": (20, 28), "tall": (36, 18)}


def _checkpoint(path: Path, seed: int, *overrides: str) -> Path:
    """A randomly initialised tiny U-Net (sliding windows: pad mode) saved as a checkpoint."""
    cfg = load_config(None, TINY_OVERRIDES + ["model.type=unet", "data.resize_mode=pad", "data.test_size=4",
                                              *overrides])
    torch.manual_seed(seed)
    save_checkpoint({"model": build_model(cfg).state_dict(), "config": config_to_dict(cfg)}, path)
    return path


@pytest.fixture
def members(tmp_path):
    return [str(_checkpoint(tmp_path / f"member{seed}.pt", seed)) for seed in (0, 1)]


def _image_folder(folder: Path) -> None:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for stem, size in SIZES.items():
        write_png(folder / f"{stem}.png", rng.integers(0, 256, (*size, 3)).astype(np.uint8))
    (folder / "notes.txt").write_text("not an image")


def _check_predictions(out_dir: Path, inputs: Path, checkpoints) -> None:
    """Masks, overlays and probabilities written for every image: the probabilities sum to 1 over the 4 classes,
    their largest is the written class, and the mask is the ensemble's."""
    model, cfg = load_ensemble(checkpoints, device="cpu")
    segmenter = Segmenter(model, cfg)
    for stem, size in SIZES.items():
        mask = read_mask(out_dir / f"{stem}_mask.png", 4).numpy()  # [H, W]
        probabilities = np.load(out_dir / f"{stem}_probs.npy")  # [K, H, W]
        assert probabilities.dtype == np.float16 and probabilities.shape == (4, *size)
        assert np.allclose(probabilities.astype(np.float32).sum(0), 1.0, atol=4e-3)
        chosen = np.take_along_axis(probabilities, mask[None], axis=0)[0]
        assert np.array_equal(chosen, probabilities.max(0))  # the mask's class is a most probable one (ties kept)
        assert np.array_equal(mask, segmenter.segment(read_image(inputs / f"{stem}.png", 3)).numpy())
        assert (out_dir / f"{stem}_overlay.png").is_file()


def test_predict_an_ensemble_on_a_folder_and_on_a_glob(tmp_path, members):
    inputs = tmp_path / "images"
    _image_folder(inputs)
    for name, given in (("folder", [str(inputs)]), ("glob", [str(inputs / "*")])):
        out_dir = tmp_path / name
        result = run_script_in_process("predict.py", "--checkpoint", *members, *given, "--out-dir", str(out_dir),
                                       "--probabilities", "--device", "cpu")
        assert result.returncode == 0, result.stderr
        assert sorted(path.name for path in out_dir.iterdir()) == sorted(
            f"{stem}_{kind}" for stem in SIZES for kind in ("mask.png", "overlay.png", "probs.npy"))
        _check_predictions(out_dir, inputs, members)
    assert "tall.png: classes" in result.stdout and "tall_probs.npy" in result.stdout


def test_predict_takes_images_before_the_checkpoints_and_after_a_double_dash(tmp_path, members):
    inputs = tmp_path / "images"
    _image_folder(inputs)
    image = str(inputs / "wide.png")
    for index, arguments in enumerate(([image, "--checkpoint", *members], ["--checkpoint", *members, "--", image])):
        out_dir = tmp_path / f"out{index}"
        result = run_script_in_process("predict.py", "--out-dir", str(out_dir), *arguments)
        assert result.returncode == 0, result.stderr
        assert (out_dir / "wide_mask.png").is_file() and not (out_dir / "wide_probs.npy").exists()


def test_predict_inputs_that_name_no_image_fail_naming_them(tmp_path, members):
    inputs = tmp_path / "images"
    _image_folder(inputs)
    for given, message in ((str(inputs / "*.tif"), "no image (*.png, "),
                           (str(tmp_path / "missing.png"), "input not found: "),
                           (str(tmp_path), "no image (*.png, ")):  # a folder without images (only a subfolder)
        result = run_script_in_process("predict.py", "--checkpoint", members[0], given)
        assert result.returncode == 2 and message in result.stderr and given in result.stderr, result.stderr
    result = run_script_in_process("predict.py", "--checkpoint", *members)
    assert result.returncode == 2 and "no input images" in result.stderr, result.stderr
    (tmp_path / "again").mkdir()
    write_png(tmp_path / "again" / "wide.png", np.zeros((8, 8), np.uint8))
    result = run_script_in_process("predict.py", "--checkpoint", members[0], str(inputs), str(tmp_path / "again"))
    assert result.returncode == 2 and "share the stem 'wide'" in result.stderr, result.stderr


def test_eval_of_an_ensemble_reports_class_names_and_the_confusion_matrix(tmp_path, members):
    out, table, plot = tmp_path / "metrics.json", tmp_path / "per_image.csv", tmp_path / "plots" / "confusion.png"
    result = run_script_in_process("eval.py", "--checkpoint", *members, "--split", "test", "--out", str(out),
                                   "--per-image", str(table), "--confusion-plot", str(plot), "--device", "cpu")
    assert result.returncode == 0, result.stderr
    metrics = json.loads(out.read_text())
    assert metrics == json.loads(result.stdout)
    assert metrics["class_names"] == TOY_NAMES and list(metrics["per_class"]) == TOY_NAMES
    assert metrics["per_class"]["square"]["dice"] == metrics["per_class_dice"][2]
    assert metrics["inference"]["checkpoints"] == members
    matrix = np.array(metrics["confusion_matrix"])
    assert matrix.shape == (4, 4) and matrix.sum() == 4 * 16 * 16  # 4 toy test images of 16 x 16, none ignored
    model, cfg = load_ensemble(members, device="cpu")
    expected = evaluate(model, evaluation_split(cfg, "test"), cfg).scores
    assert metrics["confusion_matrix"] == expected["confusion_matrix"]
    assert metrics["mean_dice"] == pytest.approx(expected["mean_dice"]) and metrics["loss"] == pytest.approx(
        expected["loss"])
    with open(table) as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 and {"dice_circle", "iou_square", "hd95_triangle"} <= set(rows[0])
    assert plot.is_file() and plot.stat().st_size > 1000


def test_eval_refuses_the_validation_split_for_members_of_different_folds(tmp_path):
    root = tmp_path / "data"
    for split in ("train", "test"):
        for kind in ("images", "masks"):
            (root / split / kind).mkdir(parents=True)
        for index in range(2):
            write_png(root / split / "images" / f"{split}{index}.png", np.zeros((16, 16, 3), np.uint8))
            write_png(root / split / "masks" / f"{split}{index}.png", np.zeros((16, 16), np.uint8))
    folds = [str(_checkpoint(tmp_path / f"fold{fold}.pt", fold, "data.kind=folder", f"data.root={root}",
                             "data.folds=2", f"data.fold={fold}")) for fold in (0, 1)]
    result = run_script_in_process("eval.py", "--checkpoint", *folds)
    assert result.returncode == 2, result.stderr
    assert f"data.fold 0 in {folds[0]}, 1 in {folds[1]}" in result.stderr and "--split test" in result.stderr
    result = run_script_in_process("eval.py", "--checkpoint", *folds, "--split", "test")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["num_images"] == 2


@pytest.mark.slow
def test_eval_and_predict_of_an_ensemble_as_processes(tmp_path, members):
    inputs = tmp_path / "images"
    _image_folder(inputs)
    # as a shell runs them: the pattern quoted (expanded by predict.py), both scripts side by side
    predicting = start_script("predict.py", "--checkpoint", *members, str(inputs / "*.png"), "--out-dir",
                              str(tmp_path / "out"), "--probabilities", "--tta", "flip")
    evaluating = start_script("eval.py", "--checkpoint", *members, "--split", "test", "--tta", "flip")
    nothing = start_script("predict.py", "--checkpoint", *members, str(inputs / "*.jpg"))
    result = finish_script(predicting)
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "out").glob("*_probs.npy"))) == 2
    result = finish_script(evaluating)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["inference"]["tta"] == "flip"
    result = finish_script(nothing)
    assert result.returncode == 2 and result.stderr.startswith("error: ") and "*.jpg" in result.stderr
