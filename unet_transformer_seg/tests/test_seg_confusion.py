"""The pooled confusion matrix (`SegmentationScores`) against a plain double loop, its reduction over ranks, and the
reports that name classes: per_class, the per-image CSV and the confusion-matrix plot."""

import csv

import numpy as np
import torch
from PIL import Image

from unet_transformer_seg.labels import IGNORE_LABEL
from unet_transformer_seg.metrics import SegmentationScores
from unet_transformer_seg.training.evaluate import per_class_report, write_per_image_csv
from unet_transformer_seg.training.plots import plot_augmentation_preview, plot_confusion_matrix, plot_samples

NAMES = ["background", "road", "car"]


def _confusion_by_double_loop(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """matrix[t, p] = number of pixels with truth t and prediction p, one (truth, prediction) pair at a time."""
    matrix = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    for truth in range(num_classes):
        for predicted in range(num_classes):
            matrix[truth, predicted] = int(((target == truth) & (pred == predicted)).sum())
    return matrix


def _random_batches(seed: int = 0):
    """Batches of random predictions and truths of three sizes, a quarter of the truth ignored."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for count, height, width in ((3, 7, 11), (1, 16, 5), (4, 9, 9)):
        pred = torch.randint(0, 3, (count, height, width), generator=generator)
        target = torch.randint(0, 3, (count, height, width), generator=generator)
        ignored = torch.rand(count, height, width, generator=generator) < 0.25
        batches.append((pred, target.masked_fill(ignored, IGNORE_LABEL)))
    return batches


def test_the_confusion_matrix_equals_a_double_loop_and_leaves_ignored_pixels_out():
    scores = SegmentationScores(3)
    expected = torch.zeros(3, 3, dtype=torch.int64)
    counted = 0
    for pred, target in _random_batches():
        scores.update(pred, target)
        expected += _confusion_by_double_loop(pred, target, 3)
        counted += int((target != IGNORE_LABEL).sum())
    matrix = scores.compute()["confusion_matrix"]
    assert matrix == expected.tolist()
    assert sum(map(sum, matrix)) == counted  # every counted pixel once, no ignored one


def test_the_confusion_matrix_is_summed_over_ranks():
    whole, halves = SegmentationScores(3), [SegmentationScores(3), SegmentationScores(3)]
    for index, (pred, target) in enumerate(_random_batches(1)):
        whole.update(pred, target)
        halves[index % 2].update(pred, target)
    counters = []  # rank 1's counters, in the order reduce passes them
    halves[1].reduce(lambda counter: counters.append(counter) or counter)
    remaining = iter(counters)
    halves[0].reduce(lambda counter: counter + next(remaining))  # an all-reduce sum over the two "ranks"
    assert halves[0].compute()["confusion_matrix"] == whole.compute()["confusion_matrix"]


def test_reports_name_the_classes(tmp_path):
    scores = SegmentationScores(3, keep_rows=True)
    pred = torch.tensor([[[0, 1, 1, 2]], [[0, 0, 1, 1]]])
    target = torch.tensor([[[0, 1, 2, 2]], [[0, 0, 1, IGNORE_LABEL]]])
    scores.update(pred, target, ["a", "b"])
    summary = scores.compute()
    report = per_class_report(summary, NAMES)
    assert list(report) == NAMES
    assert report["car"] == {"dice": summary["per_class_dice"][2], "iou": summary["per_class_iou"][2],
                             "hd95": summary["per_class_hd95"][2]}
    assert report["road"]["dice"] == 0.8  # TP 2, FP 1, FN 0
    path = tmp_path / "per_image.csv"
    write_per_image_csv(path, scores.rows, NAMES)
    with open(path) as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["stem", "height", "width", "pixel_accuracy", "dice_background", "iou_background",
                             "hd95_background", "dice_road", "iou_road", "hd95_road", "dice_car", "iou_car",
                             "hd95_car"]
    assert rows[0]["stem"] == "a" and float(rows[0]["dice_car"]) == 2 / 3 and rows[1]["dice_car"] == ""


def test_the_confusion_plot_is_written(tmp_path):
    path = tmp_path / "confusion.png"
    plot_confusion_matrix([[90, 10, 0], [5, 15, 0], [0, 0, 0]], NAMES, path)  # an empty row: a class never seen
    with Image.open(path) as image:
        assert image.format == "PNG" and min(image.size) > 100
        assert np.asarray(image.convert("L")).std() > 0


def test_the_sample_grid_and_augmentation_preview_take_a_class_legend(tmp_path):
    images, masks = [torch.rand(3, 12, 20)], [torch.randint(0, 3, (12, 20))]
    plain, named = tmp_path / "plain.png", tmp_path / "named.png"
    plot_samples(images, masks, masks, plain, 3)
    plot_samples(images, masks, masks, named, 3, NAMES)
    with Image.open(plain) as without, Image.open(named) as with_legend:
        assert with_legend.size[1] > without.size[1] * 0.9 and with_legend.size != without.size  # room for names
    plot_augmentation_preview(torch.rand(2, 3, 16, 16), torch.randint(0, 3, (2, 16, 16)), tmp_path / "aug.png", 3,
                              NAMES)
    assert (tmp_path / "aug.png").is_file()
