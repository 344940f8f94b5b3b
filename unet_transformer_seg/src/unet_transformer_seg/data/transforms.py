"""Transforms that keep image and mask aligned.

Images are [C, H, W] float32, masks [H, W] int64. Geometry (resize, crop, flips, 90-degree rotations) is applied
to both with the same parameters; masks are resized with nearest neighbour so class ids stay class ids.
Random choices come from a numpy Generator passed in, so a sample's augmentation is a pure function of that generator.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F


def resize_image(image: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """[C, H, W] -> [C, h, w], bilinear (antialiased when shrinking)."""
    if tuple(image.shape[-2:]) == tuple(size):
        return image
    shrinking = size[0] < image.shape[-2] or size[1] < image.shape[-1]
    return F.interpolate(image[None], size=size, mode="bilinear", align_corners=False, antialias=shrinking)[0]


def resize_mask(mask: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """[H, W] int64 -> [h, w] int64, nearest neighbour."""
    if tuple(mask.shape[-2:]) == tuple(size):
        return mask
    return F.interpolate(mask[None, None].float(), size=size, mode="nearest-exact")[0, 0].long()


def resize_logits(logits: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """[B, K, h, w] -> [B, K, H, W], bilinear; used to bring predictions back to an image's original size."""
    if tuple(logits.shape[-2:]) == tuple(size):
        return logits
    return F.interpolate(logits, size=size, mode="bilinear", align_corners=False)


def random_crop(
    image: torch.Tensor, mask: torch.Tensor, size: int, rng: np.random.Generator
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Crop a random size x size window; an image smaller than that is first scaled up (aspect kept) to fit."""
    height, width = image.shape[-2:]
    scale = max(size / height, size / width, 1.0)
    if scale > 1.0:
        new_size = (max(size, round(height * scale)), max(size, round(width * scale)))
        image, mask = resize_image(image, new_size), resize_mask(mask, new_size)
        height, width = new_size
    top = int(rng.integers(0, height - size + 1))
    left = int(rng.integers(0, width - size + 1))
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


def normalize(image: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """[C, H, W] in [0, 1] -> (image - mean) / std."""
    return (image - mean) / std


class SegmentationTransform:
    """Bring an (image, mask) pair to the training size, augment (training only) and normalise.

    Training: `resize_mode: resize` resizes, `random_crop` crops a random window. Evaluation always resizes.
    """

    def __init__(
        self,
        image_size: int,
        mean: float,
        std: float,
        train: bool,
        resize_mode: str = "resize",
        hflip: bool = False,
        vflip: bool = False,
        rot90: bool = False,
    ):
        self.size = (image_size, image_size)
        self.mean, self.std = mean, std
        self.train = train
        self.resize_mode = resize_mode
        self.hflip, self.vflip, self.rot90 = hflip, vflip, rot90

    def __call__(
        self, image: torch.Tensor, mask: torch.Tensor, rng: Optional[np.random.Generator]
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        if self.train and self.resize_mode == "random_crop":
            image, mask = random_crop(image, mask, self.size[0], rng)
        else:
            image, mask = resize_image(image, self.size), resize_mask(mask, self.size)
        if self.train:
            image, mask = random_flip_rotate(image, mask, rng, self.hflip, self.vflip, self.rot90)
        return normalize(image, self.mean, self.std), mask
