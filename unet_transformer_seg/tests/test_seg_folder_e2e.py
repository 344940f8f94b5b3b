"""The real-data path end to end: folders of images and masks in the formats users bring, training, evaluation at
each image's own size, saved predictions and reports."""

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from unet_transformer_seg.data.image_io import read_mask, write_png

from seg_helpers import run_script, run_script_in_process, tiny_cli_args

MIXED_SIZES = "97x211,320x240,450x300"  # landscape and two portrait aspect ratios, each many windows at native size


def _varying_size_folder(root: Path) -> dict:
    sizes = {"wide": (12, 20), "tall": (24, 10), "square": (16, 16)}
    rng = np.random.default_rng(0)
    (root / "test" / "images").mkdir(parents=True)
    (root / "test" / "masks").mkdir(parents=True)
    for name, size in sizes.items():
        write_png(root / "test" / "images" / f"{name}.png", rng.integers(0, 256, (*size, 3)).astype(np.uint8))
        write_png(root / "test" / "masks" / f"{name}.png", rng.integers(0, 4, size).astype(np.uint8))
    return sizes


@pytest.mark.slow
def test_export_train_and_evaluate_through_the_folder_format(tmp_path):
    root = tmp_path / "toy_folder"
    # The suite's run of export_toy_dataset.py as a separate process; train.py and eval.py run as processes in
    # test_seg_training.py, so here (and in the other tests of this file) they run in this process.
    exported = run_script("export_toy_dataset.py", "--out", str(root), "--palette", "--set", "data.image_size=16",
                          "--train-size", "32", "--val-size", "8", "--test-size", "4")
    assert exported.returncode == 0, exported.stderr
    assert len(list((root / "train" / "images").glob("*.png"))) == 32
    palette = re.search(r"data.palette: (\[.*\])", exported.stdout).group(1)
    trained = run_script_in_process("train.py", "--config", "configs/quick.yaml",
                                    *tiny_cli_args(tmp_path, "data.kind=folder", f"data.root={root}",
                                                   f"data.palette={palette}", "train.epochs=2"))
    assert trained.returncode == 0, trained.stderr
    run_dir = Path(trained.stdout.strip().splitlines()[-1])
    assert "32 train / 8 val images" in (run_dir / "train.log").read_text()

    other = tmp_path / "other"
    sizes = _varying_size_folder(other)
    predictions = tmp_path / "preds"
    evaluated = run_script_in_process("eval.py", "--checkpoint", str(run_dir / "checkpoints" / "last.pt"),
                                      "--data-root", str(other), "--split", "test", "--save-predictions",
                                      str(predictions))
    assert evaluated.returncode == 0, evaluated.stderr
    scores = json.loads(evaluated.stdout)
    assert scores["num_images"] == 3
    for name, size in sizes.items():
        assert read_mask(predictions / f"{name}.png", 4).shape == size


def _count_metrics(truth_dir: Path, prediction_dir: Path, num_classes: int):
    """Pooled Dice / IoU / pixel accuracy counted with numpy from the PNG files alone."""
    true_pos = np.zeros(num_classes)
    false_pos = np.zeros(num_classes)
    false_neg = np.zeros(num_classes)
    correct = total = 0
    for truth_path in sorted(truth_dir.glob("*.png")):
        truth = np.asarray(Image.open(truth_path)).astype(np.int64)
        predicted = np.asarray(Image.open(prediction_dir / truth_path.name)).astype(np.int64)
        assert predicted.shape == truth.shape, truth_path.name
        correct += int((truth == predicted).sum())
        total += truth.size
        for class_id in range(num_classes):
            true_pos[class_id] += np.sum((truth == class_id) & (predicted == class_id))
            false_pos[class_id] += np.sum((truth != class_id) & (predicted == class_id))
            false_neg[class_id] += np.sum((truth == class_id) & (predicted != class_id))
    union = true_pos + false_pos + false_neg
    iou = np.where(union > 0, true_pos / np.maximum(union, 1), np.nan)
    dice = np.where(union > 0, 2 * true_pos / np.maximum(2 * true_pos + false_pos + false_neg, 1), np.nan)
    return {"mean_dice": np.nanmean(dice[1:]), "mean_iou": np.nanmean(iou[1:]), "pixel_accuracy": correct / total}


@pytest.mark.slow
def test_mixed_sizes_train_with_random_crops_and_evaluate_tiled_at_native_size(tmp_path):
    root = tmp_path / "mixed"
    exported = run_script_in_process("export_toy_dataset.py", "--out", str(root), "--sizes", MIXED_SIZES,
                                     "--train-size", "6", "--val-size", "3", "--test-size", "3")
    assert exported.returncode == 0, exported.stderr
    trained = run_script_in_process("train.py", "--config", "configs/quick.yaml",
                                    *tiny_cli_args(tmp_path, "data.kind=folder", f"data.root={root}",
                                                   "data.image_size=64", "data.resize_mode=random_crop",
                                                   "train.batch_size=3", "train.epochs=1", "train.class_weights=auto",
                                                   "train.num_plot_images=1"))
    assert trained.returncode == 0, trained.stderr
    run_dir = Path(trained.stdout.strip().splitlines()[-1])
    log = (run_dir / "train.log").read_text()
    assert "class weights [" in log and "auto: 1/sqrt(pixel frequency) over 6 training masks" in log
    predictions, report = tmp_path / "preds", tmp_path / "per_image.csv"
    evaluated = run_script_in_process("eval.py", "--checkpoint", str(run_dir), "--split", "test", "--out",
                                      str(tmp_path / "test.json"), "--save-predictions", str(predictions),
                                      "--per-image", str(report), "--tile-batch", "16")
    assert evaluated.returncode == 0, evaluated.stderr
    scores = json.loads((tmp_path / "test.json").read_text())
    assert scores["num_images"] == 3 and scores["inference"]["windows"] is True
    for mask_path in sorted((root / "test" / "masks").glob("*.png")):
        saved = Image.open(predictions / mask_path.name)
        assert saved.mode == "P" and saved.size == Image.open(mask_path).size  # each image's own size
        assert Image.open(predictions / f"{mask_path.stem}_overlay.png").size == saved.size
    counted = _count_metrics(root / "test" / "masks", predictions, 4)
    for key, value in counted.items():
        assert scores[key] == pytest.approx(value, abs=1e-9), key
    rows = list(csv.DictReader(open(report)))
    assert [(int(row["height"]), int(row["width"])) for row in rows] == [(97, 211), (320, 240), (450, 300)]
    assert list(rows[0])[:7] == ["stem", "height", "width", "pixel_accuracy", "dice_class_0", "iou_class_0",
                                  "hd95_class_0"]
    dice_per_image = [np.nanmean([float(row[f"dice_class_{k}"]) if row[f"dice_class_{k}"] else np.nan
                                  for k in (1, 2, 3)]) for row in rows]
    assert scores["mean_dice_per_image"] == pytest.approx(np.nanmean(dice_per_image))


@pytest.mark.slow
def test_void_labelled_indexed_masks_train_with_ignore_index(tmp_path):
    root = tmp_path / "voc"
    rng = np.random.default_rng(0)
    palette = [0, 0, 0, 128, 0, 0, 0, 128, 0] + [224, 224, 192] * 253
    for split in ("train", "val"):
        (root / split / "images").mkdir(parents=True)
        (root / split / "masks").mkdir(parents=True)
        for index in range(4):
            height, width = (int(v) for v in rng.integers(20, 40, 2))
            ids = np.zeros((height, width), np.uint8)
            ids[4:12, 5:15] = 1
            ids[14:, 2:9] = 2
            ids[3, :] = 255  # a void band, as VOC draws around objects
            shade = ids.astype(np.int64)
            image = np.stack([shade * 100 % 256, shade * 40 % 256, rng.integers(0, 50, ids.shape)], -1)
            Image.fromarray(image.astype(np.uint8)).save(root / split / "images" / f"{index}.jpg")
            mask = Image.fromarray(ids)
            mask.putpalette(palette)
            mask.save(root / split / "masks" / f"{index}.png")
    trained = run_script_in_process("train.py", "--config", "configs/quick.yaml",
                                    *tiny_cli_args(tmp_path, "data.kind=folder", f"data.root={root}",
                                                   "data.num_classes=3", "data.ignore_index=255",
                                                   "data.resize_mode=pad", "train.batch_size=2", "train.epochs=2"))
    assert trained.returncode == 0, trained.stderr
    history = json.loads((Path(trained.stdout.strip().splitlines()[-1]) / "metrics.json").read_text())
    assert len(history) == 2 and all(np.isfinite(row["train_loss"]) for row in history)
