"""Segmentation metrics, two conventions side by side.

- Pooled (`mean_dice`, `mean_iou`, `per_class_*`, `pixel_accuracy`): one confusion matrix summed over every pixel of
  the evaluation set, then Dice/IoU per class. Exact and independent of how images are batched. The matrix itself is
  reported as `confusion_matrix`: pixel counts [N, N], rows the true class, columns the predicted one.
- Per image (`mean_dice_per_image`, `mean_iou_per_image`, `hd95`): Dice, IoU and HD95 of each class in each image;
  an image's score is the mean over its foreground classes that are present (in truth or prediction), and the
  reported number is the mean over images (MONAI's DiceMetric reduction "mean": first over classes, then over
  images). Unlike MONAI's default (`ignore_empty=True`), a class predicted in an image whose truth lacks it counts,
  with Dice 0.

Pixels whose target is IGNORE_LABEL count nowhere. A class absent from both prediction and truth has no Dice, IoU or
HD95 (NaN, `None` in JSON, an empty cell in CSV) and is left out of the means. `mean_*` are over the foreground
classes 1..N-1; the background's scores are reported per class only.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence

import torch

from ..labels import IGNORE_LABEL
from .hausdorff import hd95_per_class


def per_image_confusion(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """pred, target [B, H, W] int64 -> [B, N, N] int64, one confusion matrix per image (ignored pixels left out)."""
    batch = target.shape[0]
    image = torch.arange(batch, device=target.device).view(batch, 1, 1).expand_as(target)
    valid = target != IGNORE_LABEL
    codes = (image[valid] * num_classes + target[valid]) * num_classes + pred[valid]
    counts = torch.bincount(codes, minlength=batch * num_classes * num_classes)
    return counts.reshape(batch, num_classes, num_classes)


def dice_iou_from_confusion(matrix: torch.Tensor):
    """[..., N, N] counts -> (dice [..., N], iou [..., N]) float64, NaN where a class is absent from both sides."""
    matrix = matrix.double()
    true_pos = matrix.diagonal(dim1=-2, dim2=-1)
    false_pos = matrix.sum(-2) - true_pos
    false_neg = matrix.sum(-1) - true_pos
    union = true_pos + false_pos + false_neg
    nan = torch.full_like(true_pos, float("nan"))
    iou = torch.where(union > 0, true_pos / union.clamp(min=1), nan)
    dice = torch.where(union > 0, 2 * true_pos / (2 * true_pos + false_pos + false_neg).clamp(min=1), nan)
    return dice, iou


def _nan_to_none(values: List[float]) -> List:
    return [None if math.isnan(v) else v for v in values]


def _nanmean(values: torch.Tensor) -> float:
    return float(values.nanmean()) if values.numel() else float("nan")


def scores_from_confusion(matrix: torch.Tensor) -> Dict[str, object]:
    """[N, N] counts -> pooled per-class IoU and Dice, means over foreground classes 1..N-1, pixel accuracy."""
    dice, iou = dice_iou_from_confusion(matrix)
    total = matrix.sum()
    return {
        "mean_dice": _nanmean(dice[1:]),
        "mean_iou": _nanmean(iou[1:]),
        "pixel_accuracy": float(matrix.diagonal().sum().double() / total) if total > 0 else float("nan"),
        "per_class_dice": _nan_to_none(dice.tolist()),
        "per_class_iou": _nan_to_none(iou.tolist()),
    }


def _mean_over_foreground(per_class: torch.Tensor):
    """[B, N] with NaN = undefined -> (per-image mean over defined classes 1..N-1 [B], defined [B] bool)."""
    foreground = per_class[:, 1:]
    defined = ~foreground.isnan()
    total = torch.where(defined, foreground, torch.zeros_like(foreground)).sum(1)
    count = defined.sum(1)
    return total / count.clamp(min=1), count > 0


class SegmentationScores:
    """Pooled confusion counts (`confusion` [N, N] int64: rows truth, columns prediction, ignored pixels left out)
    plus per-image Dice, IoU and HD95 over an evaluation set.

    `update(pred [B, H, W], target [B, H, W], names)` per batch of images of one size; `reduce(fn)` applies a
    sum-reduction (e.g. all-reduce over ranks) to every counter; `compute()` gives the summary; `rows` holds one dict
    per image when `keep_rows` (the per-image CSV).
    """

    def __init__(self, num_classes: int, keep_rows: bool = False):
        self.num_classes = num_classes
        self.keep_rows = keep_rows
        self.confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64)
        # per-image means and how many images defined them: dice, iou, hd95 -> [3, 2] (sum, count)
        self.image_means = torch.zeros(3, 2, dtype=torch.float64)
        # per class HD95 over images where defined: [2, N] (sum, count)
        self.class_hd95 = torch.zeros(2, num_classes, dtype=torch.float64)
        self.rows: List[Dict[str, object]] = []

    def update(self, pred: torch.Tensor, target: torch.Tensor, names: Optional[Sequence[str]] = None) -> None:
        pred, target = pred.cpu(), target.cpu()
        per_image = per_image_confusion(pred, target, self.num_classes)  # [B, N, N]
        self.confusion += per_image.sum(0)
        dice, iou = dice_iou_from_confusion(per_image)  # [B, N] each
        hd95 = hd95_per_class(pred, target, self.num_classes)  # [B, N]
        for row, per_class in enumerate((dice, iou, hd95)):
            image_mean, defined = _mean_over_foreground(per_class)
            self.image_means[row, 0] += image_mean[defined].sum()
            self.image_means[row, 1] += defined.sum()
        hd_defined = ~hd95.isnan()
        self.class_hd95[0] += torch.where(hd_defined, hd95, torch.zeros_like(hd95)).sum(0)
        self.class_hd95[1] += hd_defined.sum(0)
        if self.keep_rows:
            self._add_rows(per_image, dice, iou, hd95, target.shape[-2:], names)

    def _add_rows(self, per_image, dice, iou, hd95, size, names) -> None:
        correct = per_image.diagonal(dim1=-2, dim2=-1).sum(-1).double()  # [B]
        counted = per_image.sum(dim=(-2, -1)).double()  # [B]
        accuracy = torch.where(counted > 0, correct / counted.clamp(min=1), torch.full_like(correct, float("nan")))
        for image in range(per_image.shape[0]):
            row = {"stem": names[image] if names else str(len(self.rows)), "height": int(size[0]),
                   "width": int(size[1]), "pixel_accuracy": float(accuracy[image])}
            for class_id in range(self.num_classes):
                row[f"dice_{class_id}"] = float(dice[image, class_id])
                row[f"iou_{class_id}"] = float(iou[image, class_id])
                row[f"hd95_{class_id}"] = float(hd95[image, class_id])
            self.rows.append(row)

    def reduce(self, sum_reduce: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Replace every counter by `sum_reduce(counter)` (all-reduce over ranks)."""
        self.confusion = sum_reduce(self.confusion)
        self.image_means = sum_reduce(self.image_means)
        self.class_hd95 = sum_reduce(self.class_hd95)

    def compute(self) -> Dict[str, object]:
        sums, counts = self.image_means[:, 0], self.image_means[:, 1]
        image_means = torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, float("nan")))
        hd_sums, hd_counts = self.class_hd95
        class_hd95 = torch.where(hd_counts > 0, hd_sums / hd_counts.clamp(min=1), torch.full_like(hd_sums, math.nan))
        return {
            **scores_from_confusion(self.confusion),
            "mean_dice_per_image": float(image_means[0]),
            "mean_iou_per_image": float(image_means[1]),
            "hd95": float(image_means[2]),
            "per_class_hd95": _nan_to_none(class_hd95.tolist()),
            "confusion_matrix": self.confusion.tolist(),
        }
