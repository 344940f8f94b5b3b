"""Segmentation losses. logits [B, K, H, W] float, target [B, H, W] int64 class ids -> scalar loss.

Soft Dice uses a smoothing term `smooth` in numerator and denominator, so a class that is absent from both the
target and the prediction scores 1 (loss 0) instead of 0/0 = NaN.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ..checks import assert_shape

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _dice_from_probabilities(probs: torch.Tensor, target_1hot: torch.Tensor, smooth: float) -> torch.Tensor:
    """probs, target_1hot: [B, K, H, W] -> 1 - mean over K of (2|P*G| + s) / (|P| + |G| + s), sums over B, H, W."""
    dims = (0, 2, 3)
    intersection = (probs * target_1hot).sum(dims)  # [K]
    total = probs.sum(dims) + target_1hot.sum(dims)  # [K]
    dice = (2.0 * intersection + smooth) / (total + smooth)
    return 1.0 - dice.mean()


def soft_dice_loss(logits: torch.Tensor, target: torch.Tensor, smooth: float = 1.0) -> torch.Tensor:
    """Multi-class soft Dice on softmax probabilities, all K classes averaged."""
    dims = assert_shape(logits, "B,K,H,W", name="dice logits")
    assert_shape(target, "B,H,W", name="dice target", dims=dims)
    probs = torch.softmax(logits.float(), dim=1)
    target_1hot = F.one_hot(target, dims["K"]).permute(0, 3, 1, 2).float()  # [B, K, H, W]
    return _dice_from_probabilities(probs, target_1hot, smooth)


def binary_dice_loss(logits: torch.Tensor, target: torch.Tensor, smooth: float = 1.0) -> torch.Tensor:
    """Binary soft Dice on sigmoid probabilities of the foreground; logits [B, 1, H, W], target in {0, 1}."""
    dims = assert_shape(logits, "B,1,H,W", name="binary dice logits")
    assert_shape(target, "B,H,W", name="binary dice target", dims=dims)
    probs = torch.sigmoid(logits.float())
    return _dice_from_probabilities(probs, target.unsqueeze(1).float(), smooth)


def cross_entropy_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), target)


def binary_cross_entropy_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    assert_shape(logits, "B,1,H,W", name="bce logits")
    return F.binary_cross_entropy_with_logits(logits[:, 0].float(), target.float())


def ce_dice_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return cross_entropy_loss(logits, target) + soft_dice_loss(logits, target)


def bce_dice_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return binary_cross_entropy_loss(logits, target) + binary_dice_loss(logits, target)


LOSSES = {
    "ce": cross_entropy_loss,
    "dice": soft_dice_loss,
    "ce_dice": ce_dice_loss,
    "bce": binary_cross_entropy_loss,
    "bce_dice": bce_dice_loss,
}


def build_loss(name: str) -> LossFn:
    return LOSSES[name]


def logits_to_labels(logits: torch.Tensor) -> torch.Tensor:
    """[B, K, H, W] -> [B, H, W] int64: argmax over K, or logit > 0 when K == 1 (sigmoid models)."""
    if logits.shape[1] == 1:
        return (logits[:, 0] > 0).long()
    return logits.argmax(dim=1)
