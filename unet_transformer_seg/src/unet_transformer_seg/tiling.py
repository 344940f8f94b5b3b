"""Sliding-window inference: cover an image with windows of the training size, run the model on batches of windows,
and blend overlapping predictions with a Gaussian importance map (as MONAI's `sliding_window_inference` with
`mode="gaussian"`, `sigma_scale=0.125`: weight exp(-d^2 / (2 sigma^2)) per axis with sigma = 0.125 * window, the
distance d from the window centre, clamped below at 1e-3 so that every pixel gets some weight).

Differences from MONAI, both for exactness against whole-image prediction:
- the image is padded (bottom and right, with 0 = the normalised mean colour) to a multiple of 2**depth and to at
  least one window, and the step between windows is a multiple of 2**depth, so every window lies on the U-Net's
  pooling grid: away from window borders a window computes exactly what the whole image would;
- an image that fits in one window is predicted in one pass, without weighting.

Memory: the windows of one forward pass ([tile_batch, C, S, S] in, [tile_batch, K, S, S] out) plus one accumulator
[K, H, W] and one weight map [H, W] per image being predicted; callers pass several images only when each fits in
one window.
"""

from __future__ import annotations

import math
from typing import Callable, List, Tuple

import torch
import torch.nn.functional as F

SIGMA_SCALE = 0.125
MIN_WEIGHT = 1e-3

Predictor = Callable[[torch.Tensor], torch.Tensor]  # [n, C, S, S] -> [n, K, S, S]


def window_starts(length: int, window: int, step: int) -> List[int]:
    """Start offsets of windows covering 0..length-1: 0, step, 2*step, ..., the last one ending at `length`."""
    if length <= window:
        return [0]
    starts = list(range(0, length - window, step))
    return starts + [length - window]


def window_step(window: int, overlap: float, alignment: int) -> int:
    """window * (1 - overlap) rounded down to a multiple of `alignment` (at least one `alignment`)."""
    return max(alignment, int(window * (1.0 - overlap)) // alignment * alignment)


def padded_size(height: int, width: int, window: int, alignment: int) -> Tuple[int, int]:
    """The size an image is padded to: a multiple of `alignment`, and at least `window`, on each side."""
    return tuple(max(window, math.ceil(side / alignment) * alignment) for side in (height, width))


def gaussian_importance(window: int, device=None) -> torch.Tensor:
    """[S, S] float32 blending weights, 1 near the centre, MIN_WEIGHT at the far corners."""
    offsets = torch.arange(window, device=device, dtype=torch.float32) - (window - 1) / 2.0  # [S]
    profile = torch.exp(-offsets.square() / (2.0 * (SIGMA_SCALE * window) ** 2))  # [S]
    return (profile[:, None] * profile[None, :]).clamp(min=MIN_WEIGHT)


def window_grid(height: int, width: int, window: int, step: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """All windows of an image as (tops [n], lefts [n]) int64, row-major."""
    tops = torch.tensor(window_starts(height, window, step))
    lefts = torch.tensor(window_starts(width, window, step))
    return tops.repeat_interleave(len(lefts)), lefts.repeat(len(tops))


def window_pixel_index(tops: torch.Tensor, lefts: torch.Tensor, window: int, width: int) -> torch.Tensor:
    """Flat pixel index (row * width + col) of every pixel of every window: [n, S, S] int64."""
    offsets = torch.arange(window, device=tops.device)
    rows = tops.view(-1, 1, 1) + offsets.view(1, -1, 1)  # [n, S, 1]
    cols = lefts.view(-1, 1, 1) + offsets.view(1, 1, -1)  # [n, 1, S]
    return rows * width + cols


def extract_windows(image: torch.Tensor, tops: torch.Tensor, lefts: torch.Tensor, window: int) -> torch.Tensor:
    """image [C, H, W]; window i = image[:, tops[i]:tops[i]+S, lefts[i]:lefts[i]+S] -> [n, C, S, S], gathered in one
    indexing operation."""
    channels, _, width = image.shape
    pixels = window_pixel_index(tops, lefts, window, width)  # [n, S, S]
    return image.reshape(channels, -1)[:, pixels].permute(1, 0, 2, 3)  # [n, C, S, S]


def sliding_window_logits(predict: Predictor, images: torch.Tensor, window: int, overlap: float, tile_batch: int,
                          alignment: int) -> torch.Tensor:
    """images [B, C, H, W] (normalised) -> logits [B, K, H, W] float32, blended over overlapping windows.

    B > 1 only when every image fits in one window (the accumulator is [B, K, H, W]); `tile_batch` windows per
    forward pass; `alignment` = 2**depth.
    """
    batch, _, height, width = images.shape
    padded_h, padded_w = padded_size(height, width, window, alignment)
    images = F.pad(images, (0, padded_w - width, 0, padded_h - height))  # [B, C, Hp, Wp]
    if (padded_h, padded_w) == (window, window):  # one window per image: no blending
        logits = torch.cat([predict(images[start : start + tile_batch]).float()
                            for start in range(0, batch, tile_batch)])
        return logits[:, :, :height, :width]
    if batch != 1:
        raise ValueError(f"sliding_window_logits blends one image at a time, got a batch of {batch}")
    tops, lefts = window_grid(padded_h, padded_w, window, window_step(window, overlap, alignment))
    tops, lefts = tops.to(images.device), lefts.to(images.device)
    importance = gaussian_importance(window, images.device)  # [S, S]
    pixels = window_pixel_index(tops, lefts, window, padded_w)  # [n, S, S]
    weight = torch.zeros(padded_h * padded_w, device=images.device)
    weight.index_add_(0, pixels.reshape(-1), importance.expand(len(tops), -1, -1).reshape(-1))
    accumulator = None
    for start in range(0, len(tops), tile_batch):
        chosen = slice(start, start + tile_batch)
        window_logits = predict(extract_windows(images[0], tops[chosen], lefts[chosen], window))  # [n, K, S, S]
        weighted = (window_logits.float() * importance).permute(1, 0, 2, 3)  # [K, n, S, S]
        if accumulator is None:
            accumulator = torch.zeros(weighted.shape[0], padded_h * padded_w, device=images.device)  # [K, Hp*Wp]
        accumulator.index_add_(1, pixels[chosen].reshape(-1), weighted.reshape(weighted.shape[0], -1))
    blended = (accumulator / weight).view(1, -1, padded_h, padded_w)  # [1, K, Hp, Wp]
    return blended[:, :, :height, :width]
