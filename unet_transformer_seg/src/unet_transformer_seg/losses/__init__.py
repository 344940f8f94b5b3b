"""Segmentation losses (`segmentation.py`) and the automatic class weights (`class_weights.py`)."""

from .class_weights import auto_class_weights
from .segmentation import (
    DeepSupervisionLoss, SegmentationLoss, binary_cross_entropy_loss, binary_dice_loss,
    build_loss, cross_entropy_loss, deep_supervision_weights, soft_dice_loss,
)

__all__ = [
    "DeepSupervisionLoss", "SegmentationLoss", "auto_class_weights",
    "binary_cross_entropy_loss", "binary_dice_loss", "build_loss", "cross_entropy_loss", "deep_supervision_weights",
    "soft_dice_loss",
]
