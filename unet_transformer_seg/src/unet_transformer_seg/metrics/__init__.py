"""Segmentation metrics: pooled and per-image Dice / IoU / pixel accuracy (`scores.py`), HD95 (`hausdorff.py`)."""

from .hausdorff import hd95_per_class
from .scores import SegmentationScores, dice_iou_from_confusion, per_image_confusion, scores_from_confusion

__all__ = ["SegmentationScores", "dice_iou_from_confusion", "hd95_per_class", "per_image_confusion",
           "scores_from_confusion"]
