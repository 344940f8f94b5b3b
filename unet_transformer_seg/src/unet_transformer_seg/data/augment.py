"""Batched augmentation of training batches, on the batch's device: images [B, C, S, S] normalised, masks [B, S, S].

`data.augment` gives each transform a probability per sample (nnU-Net's set):
- scale and rotation: one affine `grid_sample` for the whole batch; the image bilinear and padded with 0 (the mean
  colour after normalisation), the mask nearest and padded with IGNORE_LABEL, so pixels brought in from outside the
  window count in no loss;
- brightness (a multiplier), contrast (a factor around each image's mean), gamma (on each image rescaled to [0, 1],
  then scaled back), Gaussian noise (std uniform in [0, noise_std]) and Gaussian blur (a per-sample kernel, one
  grouped convolution). Intensity transforms leave the mask as it is.

Every random number comes from a generator seeded by `(run.seed, step, micro-step, rank)`, so a batch's
augmentation is a pure function of its position in training: resuming repeats it exactly.
"""

from __future__ import annotations

import math
from typing import Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from ..config import AugmentConfig
from ..labels import IGNORE_LABEL

AUGMENT_BATCH_STREAM = 11  # keeps these draws apart from any other use of the seed


def augment_generator(seed: int, step: int, micro: int, rank: int) -> np.random.Generator:
    return np.random.default_rng([seed, AUGMENT_BATCH_STREAM, step, micro, rank])


def _chosen(rng: np.random.Generator, probability: float, batch: int) -> np.ndarray:
    """[B] bool: which samples get a transform applied with `probability`."""
    return rng.random(batch) < probability


def _uniform(rng: np.random.Generator, bounds: Sequence[float], batch: int) -> np.ndarray:
    return rng.uniform(bounds[0], bounds[1], batch)


def affine_matrices(angles: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """angles [B] radians, scales [B] zoom factors -> [B, 2, 3] `affine_grid` matrices: output pixel p samples the
    input at R(angle) p / scale (normalised coordinates about the centre)."""
    cos, sin = torch.cos(angles) / scales, torch.sin(angles) / scales
    zeros = torch.zeros_like(angles)
    return torch.stack([torch.stack([cos, -sin, zeros], -1), torch.stack([sin, cos, zeros], -1)], 1)


def affine_warp(images: torch.Tensor, masks: torch.Tensor, matrices: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """images [B, C, H, W], masks [B, H, W] int64, matrices [B, 2, 3] -> warped images (bilinear, 0 outside) and
    masks (nearest, IGNORE_LABEL outside)."""
    grid = F.affine_grid(matrices.to(images.dtype), list(images.shape), align_corners=False)  # [B, H, W, 2]
    warped = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    shifted = (masks - IGNORE_LABEL).unsqueeze(1).to(images.dtype)  # [B, 1, H, W]; IGNORE_LABEL -> 0 = outside
    warped_masks = F.grid_sample(shifted, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    return warped, warped_masks[:, 0].round().long() + IGNORE_LABEL


def gaussian_kernels(sigmas: torch.Tensor, radius: int) -> torch.Tensor:
    """sigmas [B] (0 = no blur) -> normalised 1-D kernels [B, 2 * radius + 1]."""
    offsets = torch.arange(-radius, radius + 1, dtype=sigmas.dtype, device=sigmas.device)  # [k]
    safe = sigmas.clamp_min(1e-6)[:, None]  # [B, 1]
    kernels = torch.exp(-0.5 * (offsets[None] / safe) ** 2)  # [B, k]; sigma ~ 0 gives the delta kernel
    return kernels / kernels.sum(dim=1, keepdim=True)


def blur(images: torch.Tensor, sigmas: torch.Tensor, radius: int) -> torch.Tensor:
    """images [B, C, H, W], sigmas [B] -> each image blurred with its own separable Gaussian (reflect padding)."""
    batch, channels, height, width = images.shape
    kernels = gaussian_kernels(sigmas, radius).repeat_interleave(channels, dim=0)  # [B*C, k]
    flat = images.reshape(1, batch * channels, height, width)
    flat = F.conv2d(F.pad(flat, (radius, radius, 0, 0), mode="reflect"), kernels[:, None, None, :],
                    groups=batch * channels)  # along W
    flat = F.conv2d(F.pad(flat, (0, 0, radius, radius), mode="reflect"), kernels[:, None, :, None],
                    groups=batch * channels)  # along H
    return flat.reshape(batch, channels, height, width)


class BatchAugment:
    """`data.augment` on a training batch: __call__(images [B, C, S, S], masks [B, S, S], rng) -> same shapes."""

    def __init__(self, settings: AugmentConfig):
        self.settings = settings
        self.blur_radius = max(1, math.ceil(3 * settings.blur_sigma[1]))

    @property
    def active(self) -> bool:
        return self.settings.any()

    def __call__(
        self, images: torch.Tensor, masks: torch.Tensor, rng: np.random.Generator
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        if not self.active:
            return images, masks
        images, masks = self._spatial(images, masks, rng)
        return self._intensity(images, rng), masks

    def _spatial(self, images, masks, rng):
        cfg, batch = self.settings, images.shape[0]
        scaled, rotated = _chosen(rng, cfg.scale_prob, batch), _chosen(rng, cfg.rotate_prob, batch)
        scales = np.where(scaled, _uniform(rng, cfg.scale_range, batch), 1.0)
        angles = np.where(rotated, np.deg2rad(rng.uniform(-cfg.rotate_degrees, cfg.rotate_degrees, batch)), 0.0)
        moved = np.flatnonzero(scaled | rotated)
        if len(moved) == 0:
            return images, masks
        index = torch.as_tensor(moved, device=images.device)
        matrices = affine_matrices(torch.as_tensor(angles[moved]), torch.as_tensor(scales[moved])).to(images.device)
        warped, warped_masks = affine_warp(images[index], masks[index], matrices)
        return images.index_copy(0, index, warped), masks.index_copy(0, index, warped_masks)

    @staticmethod
    def _per_sample(rng, probability: float, bounds: Sequence[float], neutral: float, batch: int) -> np.ndarray:
        """[B] factors: uniform in bounds for the samples chosen with `probability`, `neutral` for the others."""
        return np.where(_chosen(rng, probability, batch), _uniform(rng, bounds, batch), neutral)

    def _intensity(self, images: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        """Brightness, contrast, gamma, noise, blur; the draws are decided on the host (no device sync)."""
        cfg, batch = self.settings, images.shape[0]

        def as_factor(values: np.ndarray) -> torch.Tensor:  # [B] -> [B, 1, 1, 1] on the images' device
            return torch.as_tensor(values, dtype=images.dtype, device=images.device).view(batch, 1, 1, 1)

        brightness = self._per_sample(rng, cfg.brightness_prob, cfg.brightness_range, 1.0, batch)
        contrast = self._per_sample(rng, cfg.contrast_prob, cfg.contrast_range, 1.0, batch)
        gamma = self._per_sample(rng, cfg.gamma_prob, cfg.gamma_range, 1.0, batch)
        noise_std = self._per_sample(rng, cfg.noise_prob, (0.0, cfg.noise_std), 0.0, batch)
        sigmas = self._per_sample(rng, cfg.blur_prob, cfg.blur_sigma, 0.0, batch)
        if (brightness != 1.0).any():
            images = images * as_factor(brightness)
        if (contrast != 1.0).any():
            means = images.mean(dim=(1, 2, 3), keepdim=True)  # [B, 1, 1, 1]
            images = (images - means) * as_factor(contrast) + means
        if (gamma != 1.0).any():
            low = images.amin(dim=(1, 2, 3), keepdim=True)  # [B, 1, 1, 1]
            span = (images.amax(dim=(1, 2, 3), keepdim=True) - low).clamp_min(1e-6)
            images = ((images - low) / span).clamp(0, 1) ** as_factor(gamma) * span + low
        if (noise_std > 0).any():
            generator = torch.Generator(device="cpu").manual_seed(int(rng.integers(2**62)))
            noise = torch.randn(images.shape, generator=generator, dtype=images.dtype)  # [B, C, S, S]
            images = images + noise.to(images.device) * as_factor(noise_std)
        if (sigmas > 0).any():
            images = blur(images, torch.as_tensor(sigmas, dtype=images.dtype, device=images.device), self.blur_radius)
        return images
