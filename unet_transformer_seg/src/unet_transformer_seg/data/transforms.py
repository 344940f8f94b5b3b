"""Transforms that keep image and mask aligned.

Images are [C, H, W] float32, masks [H, W] int64. Images are normalised first (`normalization.py`), so padding with
0 is padding with the mean colour. Geometry (resize, pad, crop, flips, 90-degree rotations) is applied to both with the same parameters;
masks are resized with nearest neighbour, so class ids and IGNORE_LABEL stay what they are, and padded mask pixels
hold IGNORE_LABEL, so no loss or metric sees them. Random choices come from a numpy Generator passed in, so a
sample's augmentation is a pure function of that generator.

`data.resize_mode` decides how a training window of S x S (S = data.image_size) is made:
- `resize`: the whole image is resized to S x S (aspect ratio not kept); evaluation resizes the same way.
- `pad`: native resolution; sides shorter than S are padded (the image at a random place in the window), then a
  random S x S window is cut. Evaluation runs sliding windows over the image at its own size.
- `random_crop`: native resolution; an image with a side shorter than S is first scaled up (aspect kept) until it
  covers a window (`cover_size`), then a random S x S window is cut. Evaluation scales the same way, runs sliding
  windows, and resizes the logits back.
With `foreground_fraction` f > 0 (pad and random_crop), a share f of training windows is centred on a foreground
pixel (the window shifted to stay inside the image), as nnU-Net's oversampling: a class is drawn uniformly among the
object classes present in the mask, then a pixel of that class, so a rare class is centred as often as a common one;
the rest, and windows of masks without foreground, are placed uniformly.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from ..choices import RESIZE_MODES, check_choice
from ..labels import IGNORE_LABEL


def resize_image(image: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """[C, H, W] -> [C, h, w] (or [B, C, H, W] -> [B, C, h, w]), bilinear, antialiased when shrinking."""
    if tuple(image.shape[-2:]) == tuple(size):
        return image
    shrinking = size[0] < image.shape[-2] or size[1] < image.shape[-1]
    batch = image if image.dim() == 4 else image[None]
    resized = F.interpolate(batch, size=size, mode="bilinear", align_corners=False, antialias=shrinking)
    return resized if image.dim() == 4 else resized[0]


def resize_mask(mask: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """[H, W] int64 -> [h, w] int64, nearest neighbour (IGNORE_LABEL is kept like any id)."""
    if tuple(mask.shape[-2:]) == tuple(size):
        return mask
    return F.interpolate(mask[None, None].float(), size=size, mode="nearest-exact")[0, 0].long()


def resize_logits(logits: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """[B, K, h, w] -> [B, K, H, W], bilinear; used to bring predictions back to an image's original size."""
    if tuple(logits.shape[-2:]) == tuple(size):
        return logits
    return F.interpolate(logits, size=size, mode="bilinear", align_corners=False)


def cover_size(height: int, width: int, size: int) -> Tuple[int, int]:
    """The size `random_crop` scales an image to: unchanged if both sides are >= size, else scaled up (aspect kept)
    until both are."""
    scale = max(size / height, size / width, 1.0)
    if scale == 1.0:
        return height, width
    return max(size, round(height * scale)), max(size, round(width * scale))


def pad_to_cover(
    image: torch.Tensor, mask: torch.Tensor, size: int, rng: Optional[np.random.Generator] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Pad sides shorter than `size`: the image with 0, the mask with IGNORE_LABEL. With `rng` the image lands at a
    random place in the padded area, else at the top left."""
    height, width = image.shape[-2:]
    pad_h, pad_w = max(0, size - height), max(0, size - width)
    if pad_h == 0 and pad_w == 0:
        return image, mask
    top = int(rng.integers(0, pad_h + 1)) if rng is not None else 0
    left = int(rng.integers(0, pad_w + 1)) if rng is not None else 0
    padding = (left, pad_w - left, top, pad_h - top)
    return F.pad(image, padding, value=0.0), F.pad(mask, padding, value=IGNORE_LABEL)


def random_crop(
    image: torch.Tensor, mask: torch.Tensor, size: int, rng: np.random.Generator, foreground_fraction: float = 0.0
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Crop a random size x size window; an image smaller than that is first scaled up (aspect kept) to fit."""
    covering = cover_size(*image.shape[-2:], size)
    image, mask = resize_image(image, covering), resize_mask(mask, covering)
    return _crop_at_random(image, mask, size, rng, foreground_fraction)


def random_padded_crop(
    image: torch.Tensor, mask: torch.Tensor, size: int, rng: np.random.Generator, foreground_fraction: float = 0.0
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Crop a random size x size window at native resolution, padding sides shorter than size (mask: ignored)."""
    image, mask = pad_to_cover(image, mask, size, rng)
    return _crop_at_random(image, mask, size, rng, foreground_fraction)


def window_origin(
    mask: torch.Tensor, size: int, rng: np.random.Generator, foreground_fraction: float = 0.0
) -> Tuple[int, int]:
    """(top, left) of a size x size window in mask [H, W] (H, W >= size): with probability `foreground_fraction`
    centred on a pixel of an object class drawn among those present (then a pixel of it) and shifted inside the
    mask, else uniform."""
    height, width = mask.shape
    if foreground_fraction > 0 and rng.random() < foreground_fraction:
        present = torch.unique(mask[mask > 0])  # [P] object classes in the mask; IGNORE_LABEL (-1) is not > 0
        if len(present):
            chosen = present[int(rng.integers(len(present)))]
            pixels = torch.nonzero(mask.reshape(-1) == chosen)[:, 0]  # [F] flat indices of that class
            row, col = divmod(int(pixels[int(rng.integers(len(pixels)))]), width)
            top = min(max(row - size // 2, 0), height - size)
            left = min(max(col - size // 2, 0), width - size)
            return top, left
    return int(rng.integers(0, height - size + 1)), int(rng.integers(0, width - size + 1))


def _crop_at_random(
    image: torch.Tensor, mask: torch.Tensor, size: int, rng: np.random.Generator, foreground_fraction: float
) -> Tuple[torch.Tensor, torch.Tensor]:
    top, left = window_origin(mask, size, rng, foreground_fraction)
    return image[:, top : top + size, left : left + size], mask[top : top + size, left : left + size]


def random_flip_rotate(
    image: torch.Tensor, mask: torch.Tensor, rng: np.random.Generator, hflip: bool, vflip: bool, rot90: bool
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Random horizontal/vertical flips and a random multiple of 90 degrees, identical for image and mask."""
    draws = rng.integers(0, 2, size=2)
    turns = int(rng.integers(0, 4))
    if hflip and draws[0]:
        image, mask = image.flip(-1), mask.flip(-1)
    if vflip and draws[1]:
        image, mask = image.flip(-2), mask.flip(-2)
    if rot90 and turns and image.shape[-1] == image.shape[-2]:
        image, mask = torch.rot90(image, turns, dims=(-2, -1)), torch.rot90(mask, turns, dims=(-2, -1))
    return image.contiguous(), mask.contiguous()


class SegmentationTransform:
    """Normalise an (image, mask) pair, bring it to the model's input geometry and augment (training only).

    Training: an S x S window made as `resize_mode` says, then flips / 90-degree turns.
    Evaluation: the whole image resized to S x S when `resize_for_eval` (resize mode), else the
    image at its own size (the sliding window takes it from there); the mask is left at its own size.
    """

    def __init__(
        self,
        image_size: int,
        normalization: Callable[[torch.Tensor], torch.Tensor],
        train: bool,
        resize_mode: str = "resize",
        hflip: bool = False,
        vflip: bool = False,
        rot90: bool = False,
        resize_for_eval: bool = True,
        foreground_fraction: float = 0.0,
    ):
        check_choice(resize_mode, RESIZE_MODES, "resize_mode")
        self.size = image_size
        self.normalization = normalization
        self.train = train
        self.resize_mode = resize_mode
        self.hflip, self.vflip, self.rot90 = hflip, vflip, rot90
        self.resize_for_eval = resize_for_eval
        self.foreground_fraction = foreground_fraction

    def __call__(
        self, image: torch.Tensor, mask: torch.Tensor, rng: Optional[np.random.Generator]
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        image = self.normalization(image)
        square = (self.size, self.size)
        if not self.train:
            return (resize_image(image, square) if self.resize_for_eval else image), mask
        if self.resize_mode == "random_crop":
            image, mask = random_crop(image, mask, self.size, rng, self.foreground_fraction)
        elif self.resize_mode == "pad":
            image, mask = random_padded_crop(image, mask, self.size, rng, self.foreground_fraction)
        else:
            image, mask = resize_image(image, square), resize_mask(mask, square)
        return random_flip_rotate(image, mask, rng, self.hflip, self.vflip, self.rot90)
