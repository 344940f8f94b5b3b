"""Segmentation metrics from a per-class confusion matrix accumulated over a whole evaluation set.

Because the matrix only sums pixel counts, the result is exact and does not depend on how images are batched.
A class absent from both prediction and truth has no IoU/Dice (NaN) and is left out of the means.
"""

from __future__ import annotations

import math
from typing import Dict, List

import torch


def confusion_matrix(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """pred, target: int64 of equal shape -> [K, K] int64, rows = true class, columns = predicted class."""
    if pred.shape != target.shape:
        raise ValueError(f"pred {list(pred.shape)} and target {list(target.shape)} differ in shape")
    codes = target.reshape(-1) * num_classes + pred.reshape(-1)
    return torch.bincount(codes, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def _nan_to_none(values: List[float]) -> List:
    return [None if math.isnan(v) else v for v in values]


def scores_from_confusion(matrix: torch.Tensor) -> Dict[str, object]:
    """[K, K] counts -> per-class IoU and Dice, means over foreground classes 1..K-1, pixel accuracy."""
    matrix = matrix.double()
    true_pos = matrix.diag()
    false_pos = matrix.sum(0) - true_pos
    false_neg = matrix.sum(1) - true_pos
    union = true_pos + false_pos + false_neg
    present = union > 0
    nan = torch.full_like(true_pos, float("nan"))
    iou = torch.where(present, true_pos / union.clamp(min=1), nan)
    dice = torch.where(present, 2 * true_pos / (2 * true_pos + false_pos + false_neg).clamp(min=1), nan)
    total = matrix.sum()
    return {
        "mean_dice": float(dice[1:].nanmean()),
        "mean_iou": float(iou[1:].nanmean()),
        "pixel_accuracy": float(true_pos.sum() / total) if total > 0 else float("nan"),
        "per_class_dice": _nan_to_none(dice.tolist()),
        "per_class_iou": _nan_to_none(iou.tolist()),
    }


class ConfusionMatrix:
    """Accumulates counts over batches: `update(pred, target)` then `compute()`."""

    def __init__(self, num_classes: int):
        self.num_classes = num_classes
        self.matrix = torch.zeros(num_classes, num_classes, dtype=torch.int64)

    def update(self, pred: torch.Tensor, target: torch.Tensor) -> None:
        self.matrix += confusion_matrix(pred.cpu(), target.cpu(), self.num_classes)

    def compute(self) -> Dict[str, object]:
        return scores_from_confusion(self.matrix)
