"""Cross-validation folds (data/folds.py, scripts/cross_validate.py), class-first foreground windows, and sets
smaller than a batch drawn with replacement."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from unet_transformer_seg.config import load_config
from unet_transformer_seg.data.datasets import base_dataset, build_split
from unet_transformer_seg.data.folds import deal_folds, fold_stems, split_file
from unet_transformer_seg.data.image_io import write_png
from unet_transformer_seg.data.transforms import window_origin
from unet_transformer_seg.errors import DataError

from seg_helpers import run_script_in_process, tiny_cli_args


def test_folds_partition_the_stems_evenly_and_do_not_depend_on_their_order():
    stems = [f"image{i:02d}" for i in range(23)]
    folds = deal_folds(stems, 5)
    assert sorted(s for fold in folds for s in fold) == sorted(stems)
    assert sorted(len(fold) for fold in folds) == [4, 4, 5, 5, 5]
    assert deal_folds(list(reversed(stems)), 5) == folds
    with pytest.raises(DataError, match="5 folds need at least 5 images"):
        deal_folds(stems[:4], 5)


def test_the_split_file_is_written_once_and_a_changed_pool_is_refused(tmp_path):
    path = tmp_path / "splits" / "set_3folds.json"
    stems = [f"s{i}" for i in range(9)]
    first = fold_stems(path, stems, 3)
    assert json.loads(path.read_text())["validation"] == first
    assert fold_stems(path, list(reversed(stems)), 3) == first
    with pytest.raises(DataError, match="does not match the images"):
        fold_stems(path, stems + ["s9"], 3)


def _folder(root, splits=(("train", 7), ("val", 3))):
    rng = np.random.default_rng(0)
    for split, count in splits:
        for sub in ("images", "masks"):
            (root / split / sub).mkdir(parents=True)
        for index in range(count):
            write_png(root / split / "images" / f"{split}_{index}.png", rng.integers(0, 256, (16, 16, 3), np.uint8))
            write_png(root / split / "masks" / f"{split}_{index}.png", rng.integers(0, 2, (16, 16), np.uint8))
    return root


def test_a_fold_trains_on_the_pool_less_its_validation_part(tmp_path):
    root = _folder(tmp_path / "set")
    pool = {f"train_{i}" for i in range(7)} | {f"val_{i}" for i in range(3)}
    seen_in_validation = set()
    for fold in range(3):
        cfg = load_config(None, ["data.kind=folder", f"data.root={root}", "data.num_classes=2",
                                 f"run.output_dir={tmp_path / 'runs'}", "data.folds=3", f"data.fold={fold}"])
        train = {base_dataset(cfg, "train").name(i) for i in range(len(base_dataset(cfg, "train")))}
        val = {base_dataset(cfg, "val").name(i) for i in range(len(base_dataset(cfg, "val")))}
        assert train | val == pool and not train & val
        seen_in_validation |= val
    assert seen_in_validation == pool  # every image validates exactly once over the folds
    assert split_file(tmp_path / "runs", root, 3).is_file()


@pytest.mark.slow
def test_cross_validate_trains_every_fold_and_summarises_them(tmp_path):
    root = _folder(tmp_path / "set", (("train", 6), ("val", 2), ("test", 2)))
    out = tmp_path / "cv"
    args = tiny_cli_args(tmp_path, "data.kind=folder", f"data.root={root}", "data.num_classes=2", "train.epochs=1",
                         "train.batch_size=4", "train.num_plot_images=0")
    result = run_script_in_process("cross_validate.py", "--config", "configs/quick.yaml", "--folds", "2",
                                   "--out", str(out), *args)
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    scores = [row["best_val_mean_dice"] for row in summary["per_fold"]]
    assert [row["fold"] for row in summary["per_fold"]] == [0, 1]
    assert summary["mean_val_mean_dice"] == pytest.approx(np.mean(scores))
    assert summary["std_val_mean_dice"] == pytest.approx(np.std(scores, ddof=1))
    assert all(Path(path).name == "best.pt" and Path(path).is_file() for path in summary["checkpoints"])
    again = run_script_in_process("cross_validate.py", "--config", "configs/quick.yaml", "--folds", "2",
                                  "--out", str(out), *args)
    assert again.returncode == 0 and json.loads((out / "summary.json").read_text()) == summary  # folds kept


def _centred_class(mask, size, rng, draws):
    """Class id at the centre of each of `draws` foreground windows (windows kept away from the edges)."""
    counts = np.zeros(3, dtype=int)
    for _ in range(draws):
        top, left = window_origin(mask, size, rng, foreground_fraction=1.0)
        counts[int(mask[top + size // 2, left + size // 2])] += 1
    return counts / draws


def test_foreground_windows_draw_a_class_first_so_a_rare_class_is_centred_as_often():
    mask = torch.zeros(200, 200, dtype=torch.int64)
    mask[60:100, 60:100] = 1  # 1600 pixels
    mask[140:143, 140:143] = 2  # 9 pixels
    mask[0:5, 0:5] = -1  # ignored pixels are never a class to centre on
    rates = _centred_class(mask, 16, np.random.default_rng(0), 4000)
    assert rates[0] == 0
    assert rates[2] == pytest.approx(0.5, abs=0.03)  # drawn pixel-first it would be 9 / 1609 = 0.6 %


def test_a_set_smaller_than_a_batch_repeats_with_windows_of_its_own(tmp_path):
    root = _folder(tmp_path / "set", (("train", 3),))
    cfg = load_config(None, ["data.kind=folder", f"data.root={root}", "data.num_classes=2", "data.image_size=8",
                             "data.resize_mode=pad"])
    split = build_split(cfg, "train", train=True)
    split.repeats = 4  # as the trainer sets it for a set smaller than a step
    assert len(split) == 12 and [split.name(i) for i in (0, 3, 6)] == ["train_0"] * 3
    first, again = split[0][0], split[3][0]  # the same image, another window and flips
    assert first.shape == again.shape == (3, 8, 8) and not torch.equal(first, again)


def test_window_stats_reports_every_class_and_the_centres_add_up(tmp_path):
    root = _folder(tmp_path / "set", (("train", 3),))
    result = run_script_in_process("window_stats.py", "--config", "configs/folder.yaml", "--draws", "50",
                                   "--set", f"data.root={root}", "--set", "data.image_size=8",
                                   "--set", "data.resize_mode=pad", "--set", f"run.output_dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("150 windows of 8 x 8")
    rows = {line.split()[0]: [float(cell.rstrip("%")) for cell in line.split()[1:]] for line in lines[2:]}
    assert sorted(rows) == ["class_0", "class_1"]
    assert sum(row[2] for row in rows.values()) == pytest.approx(100.0, abs=0.02)
    assert all(row[1] == 100.0 for row in rows.values())  # random masks: both classes in every window
