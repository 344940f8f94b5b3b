"""Segmentation losses. logits [B, K, H, W] float, target [B, H, W] int64 class ids -> scalar float32 loss.

Pixels whose target is IGNORE_LABEL (-1: `data.ignore_index` in the mask files, and the padding of `resize_mode: pad`)
count in no term: cross-entropy averages over the valid pixels only, and Dice leaves them out of every sum. A batch
without any valid pixel gives 0 (not NaN).

- Cross-entropy with `class_weights` w: sum_i w[t_i] * nll_i / sum_i w[t_i] over valid pixels (PyTorch's weighted
  mean). The sigmoid form (`bce`, K = 1) weighs each pixel the same way by its class (0 or 1).
- Soft Dice: per class c, (2 sum p_c g_c + s) / (sum p_c + sum g_c + s) over all valid pixels of the batch, with
  smoothing s = 1, so a class absent from both target and prediction scores 1 (loss 0) instead of 0/0. The loss is
  1 - the mean over classes 0..K-1, or over 1..K-1 when `include_background` is false. The sigmoid form is over the
  single foreground channel (as MONAI's DiceLoss on one channel), whatever `include_background` says.
Losses are computed in float32 also under `train.amp` (the logits are cast first).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import assert_shape
from ..choices import LOSS_NAMES, SIGMOID_LOSSES
from ..labels import IGNORE_LABEL


def _valid_target(target: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """target [B, H, W] -> (valid [B, H, W] bool, target with ignored pixels set to class 0 [B, H, W])."""
    valid = target != IGNORE_LABEL
    return valid, torch.where(valid, target, torch.zeros_like(target))


def _weighted_mean(per_pixel: torch.Tensor, pixel_weights: torch.Tensor) -> torch.Tensor:
    """sum(per_pixel * w) / sum(w) with w = 0 at ignored pixels; 0 when every weight is 0."""
    return (per_pixel * pixel_weights).sum() / pixel_weights.sum().clamp_min(1e-12)


def _pixel_weights(
    valid: torch.Tensor, safe_target: torch.Tensor, class_weights: Optional[torch.Tensor]
) -> torch.Tensor:
    """[B, H, W] float32: class_weights[target] (or 1) at valid pixels, 0 at ignored ones."""
    weights = valid.float()
    return weights if class_weights is None else weights * class_weights.float()[safe_target]


def _dice_per_class(intersection: torch.Tensor, predicted: torch.Tensor, true: torch.Tensor,
                    smooth: float) -> torch.Tensor:
    """[K] sums over the valid pixels of a batch -> [K] soft Dice (2 I + s) / (|P| + |G| + s)."""
    return (2.0 * intersection + smooth) / (predicted + true + smooth)


def soft_dice_loss(
    logits: torch.Tensor, target: torch.Tensor, include_background: bool = True, smooth: float = 1.0
) -> torch.Tensor:
    """Multi-class soft Dice on softmax probabilities, averaged over classes (0..K-1, or 1..K-1).

    The per-class sums without a one-hot target: the intersection adds each valid pixel's probability of its true
    class into that class's bin, |G| counts the valid pixels of each class, |P| sums the probabilities over the
    valid pixels.
    """
    dims = assert_shape(logits, "B,K,H,W", name="dice logits")
    assert_shape(target, "B,H,W", name="dice target", dims=dims)
    num_classes = dims["K"]
    valid, safe_target = _valid_target(target)
    weight = valid.float()  # [B, H, W], 0 at ignored pixels
    probs = torch.softmax(logits.float(), dim=1)  # [B, K, H, W]
    true_class_probs = probs.gather(1, safe_target.unsqueeze(1)).squeeze(1) * weight  # [B, H, W]
    classes = safe_target.reshape(-1)
    intersection = torch.zeros(num_classes, device=logits.device).index_add(0, classes, true_class_probs.reshape(-1))
    true = torch.bincount(classes, weights=weight.reshape(-1), minlength=num_classes).float()  # [K]
    predicted = (probs * weight.unsqueeze(1)).sum(dim=(0, 2, 3))  # [K]
    dice = _dice_per_class(intersection, predicted, true, smooth)  # [K]
    return 1.0 - (dice if include_background else dice[1:]).mean()


def binary_dice_loss(logits: torch.Tensor, target: torch.Tensor, smooth: float = 1.0) -> torch.Tensor:
    """Binary soft Dice on sigmoid probabilities of the foreground; logits [B, 1, H, W], target in {0, 1, IGNORE}."""
    dims = assert_shape(logits, "B,1,H,W", name="binary dice logits")
    assert_shape(target, "B,H,W", name="binary dice target", dims=dims)
    valid, safe_target = _valid_target(target)
    weight = valid.float()  # [B, H, W]
    probs = torch.sigmoid(logits[:, 0].float()) * weight  # [B, H, W], foreground probability, 0 at ignored
    foreground = safe_target.float() * weight  # [B, H, W]
    dice = _dice_per_class((probs * foreground).sum(), probs.sum(), foreground.sum(), smooth)
    return 1.0 - dice


def cross_entropy_loss(
    logits: torch.Tensor, target: torch.Tensor, class_weights: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Mean (class-weighted when given) cross-entropy over the valid pixels."""
    dims = assert_shape(logits, "B,K,H,W", name="ce logits")
    assert_shape(target, "B,H,W", name="ce target", dims=dims)
    loss = F.cross_entropy(logits.float(), target, weight=class_weights, ignore_index=IGNORE_LABEL)
    # PyTorch gives 0/0 = NaN when every pixel is ignored; that case is a zero loss (a device-side choice, no sync)
    return torch.where((target != IGNORE_LABEL).any(), loss, torch.zeros_like(loss))


def binary_cross_entropy_loss(
    logits: torch.Tensor, target: torch.Tensor, class_weights: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Mean (class-weighted when given) binary cross-entropy with logits over the valid pixels; logits [B, 1, H, W]."""
    dims = assert_shape(logits, "B,1,H,W", name="bce logits")
    assert_shape(target, "B,H,W", name="bce target", dims=dims)
    valid, safe_target = _valid_target(target)
    per_pixel = F.binary_cross_entropy_with_logits(logits[:, 0].float(), safe_target.float(), reduction="none")
    return _weighted_mean(per_pixel, _pixel_weights(valid, safe_target, class_weights))


class SegmentationLoss(nn.Module):
    """One of `ce | dice | ce_dice | bce | bce_dice`: forward(logits [B, K, H, W], target [B, H, W]) -> loss [].

    `class_weights` [N] (a buffer, so `.to(device)` moves it) weighs the cross-entropy terms; the `*_dice` losses
    add the unweighted Dice term to the cross-entropy.
    """

    def __init__(self, name: str, class_weights: Optional[Sequence[float]] = None,
                 dice_include_background: bool = True):
        super().__init__()
        if name not in LOSS_NAMES:
            raise ValueError(f"unknown loss {name!r}")
        self.name = name
        self.dice_include_background = dice_include_background
        weights = None if class_weights is None else torch.as_tensor(class_weights, dtype=torch.float32)
        self.register_buffer("class_weights", weights)

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        terms = []
        if self.name in ("ce", "ce_dice"):
            terms.append(cross_entropy_loss(logits, target, self.class_weights))
        if self.name in ("dice", "ce_dice"):
            terms.append(soft_dice_loss(logits, target, self.dice_include_background))
        if self.name in SIGMOID_LOSSES:
            terms.append(binary_cross_entropy_loss(logits, target, self.class_weights))
        if self.name == "bce_dice":
            terms.append(binary_dice_loss(logits, target))
        return sum(terms[1:], terms[0])


def build_loss(name: str, class_weights: Optional[Sequence[float]] = None,
               dice_include_background: bool = True, deep_supervision: bool = False) -> nn.Module:
    """The loss `train.loss` names, with `train.class_weights` (resolved to numbers) and
    `train.dice_include_background`; wrapped in DeepSupervisionLoss with `model.deep_supervision`."""
    loss = SegmentationLoss(name, class_weights, dice_include_background)
    return DeepSupervisionLoss(loss) if deep_supervision else loss


def deep_supervision_weights(levels: int) -> List[float]:
    """Loss weights of the main output and `levels - 1` auxiliary outputs: halving per level, summing to 1."""
    raw = [0.5**level for level in range(levels)]
    return [weight / sum(raw) for weight in raw]


class DeepSupervisionLoss(nn.Module):
    """Wraps a loss for `model.deep_supervision`: forward(outputs, target [B, H, W]) -> loss [].

    `outputs` is the logits [B, K, H, W] alone (eval mode: the wrapped loss) or (logits, [aux [B, K, h_j, w_j]]) from
    a training forward; each auxiliary output is scored against the target shrunk to its size by nearest neighbour
    (IGNORE_LABEL stays ignored), weights from `deep_supervision_weights` (1, 1/2, 1/4, ... normalised).
    """

    def __init__(self, loss: nn.Module):
        super().__init__()
        self.loss = loss

    def forward(self, outputs, target: torch.Tensor) -> torch.Tensor:
        if isinstance(outputs, torch.Tensor):
            return self.loss(outputs, target)
        logits, aux = outputs
        weights = deep_supervision_weights(1 + len(aux))
        total = weights[0] * self.loss(logits, target)
        for weight, aux_logits in zip(weights[1:], aux):
            small = F.interpolate(target[:, None].float(), size=aux_logits.shape[-2:], mode="nearest-exact")
            total = total + weight * self.loss(aux_logits, small[:, 0].long())
        return total
