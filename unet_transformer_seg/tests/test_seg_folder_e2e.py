"""The real-data path end to end: export the toy set as folders (colour masks), train with data.kind: folder and a
palette, evaluate another folder whose images have other sizes, at their original sizes."""

import json
import re
from pathlib import Path

import numpy as np

from unet_transformer_seg.data.image_io import read_mask, write_png

from seg_helpers import run_script, tiny_cli_args


def _varying_size_folder(root: Path) -> dict:
    sizes = {"wide": (12, 20), "tall": (24, 10), "square": (16, 16)}
    rng = np.random.default_rng(0)
    for split in ("test",):
        (root / split / "images").mkdir(parents=True)
        (root / split / "masks").mkdir(parents=True)
        for name, size in sizes.items():
            write_png(root / split / "images" / f"{name}.png", rng.integers(0, 256, (*size, 3)).astype(np.uint8))
            write_png(root / split / "masks" / f"{name}.png", rng.integers(0, 4, size).astype(np.uint8))
    return sizes


def test_export_train_and_evaluate_through_the_folder_format(tmp_path):
    root = tmp_path / "toy_folder"
    exported = run_script("export_toy_dataset.py", "--out", str(root), "--palette", "--set", "data.image_size=16",
                          "--train-size", "32", "--val-size", "8", "--test-size", "4")
    assert exported.returncode == 0, exported.stderr
    assert len(list((root / "train" / "images").glob("*.png"))) == 32
    palette = re.search(r"data.palette: (\[.*\])", exported.stdout).group(1)
    trained = run_script("train.py", "--config", "configs/quick.yaml",
                         *tiny_cli_args(tmp_path, "data.kind=folder", f"data.root={root}",
                                        f"data.palette={palette}", "train.epochs=2"))
    assert trained.returncode == 0, trained.stderr
    run_dir = Path(trained.stdout.strip().splitlines()[-1])
    assert "32 train / 8 val images" in (run_dir / "train.log").read_text()

    other = tmp_path / "other"
    sizes = _varying_size_folder(other)
    predictions = tmp_path / "preds"
    evaluated = run_script("eval.py", "--checkpoint", str(run_dir / "checkpoints" / "last.pt"), "--data-root",
                           str(other), "--split", "test", "--save-predictions", str(predictions))
    assert evaluated.returncode == 0, evaluated.stderr
    scores = json.loads(evaluated.stdout)
    assert scores["num_images"] == 3
    for name, size in sizes.items():
        assert read_mask(predictions / f"{name}.png", 4).shape == size
