"""`train.class_weights: auto`: class weights of the cross-entropy terms from the training masks' pixel counts."""

from __future__ import annotations

from typing import List

import torch


def auto_class_weights(pixel_counts: torch.Tensor) -> List[float]:
    """[N] pixel counts -> weights proportional to 1 / sqrt(class frequency), averaging 1.

    A class without any pixel gets the largest weight of the classes present (it never is a target in training, so
    its weight only matters for the average)."""
    frequency = pixel_counts.double() / pixel_counts.sum().clamp(min=1)
    weights = frequency.rsqrt()
    present = pixel_counts > 0
    weights = torch.where(present, weights, weights[present].max() if present.any() else torch.ones_like(weights))
    return (weights / weights.mean()).tolist()
