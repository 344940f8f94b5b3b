"""Intensity normalisation (`data.normalize`) and the training-split statistics it may need.

| Mode | Model input, per channel c |
|---|---|
| `fixed` | (x - mean[c]) / std[c], with `data.mean` / `data.std` as given (one number = every channel) |
| `dataset` | the same, with mean and std counted over every pixel of the training split |
| `per_image` | (x - mean of this image's channel c) / its std: a z-score per image |
| `percentile` | x clipped to [clip_low[c], clip_high[c]], the 0.5 and 99.5 percentiles of the training split, then (x - mean[c]) / std[c] of the clipped training pixels |

`dataset` and `percentile` statistics are counted once, before training, by `count_statistics`; training writes them
into `data.mean`, `data.std` (and `data.clip_low`, `data.clip_high`) of the run's config, so the run folder's
config.yaml and every checkpoint hold them, and eval.py / predict.py normalise as training did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from tqdm import tqdm

PERCENTILES = (0.5, 99.5)
PERCENTILE_PIXELS_PER_IMAGE = 10_000  # percentiles come from at most this many pixels of each training image
MIN_STD = 1e-6  # a constant channel gets this std instead of 0


def _per_channel(value, channels: int) -> torch.Tensor:
    """A number or a list of `channels` numbers -> [C, 1, 1] float32."""
    values = value if isinstance(value, (list, tuple)) else [value] * channels
    return torch.tensor(values, dtype=torch.float32).view(-1, 1, 1)


@dataclass(frozen=True)
class Normalization:
    """Callable: image [C, H, W] or [B, C, H, W] as read -> normalised float32 of the same shape."""

    mode: str
    mean: torch.Tensor  # [C, 1, 1]
    std: torch.Tensor  # [C, 1, 1]
    clip_low: Optional[torch.Tensor] = None  # [C, 1, 1], percentile mode
    clip_high: Optional[torch.Tensor] = None

    @classmethod
    def from_config(cls, data) -> "Normalization":
        channels = data.in_channels
        clip = [None, None]
        if data.normalize == "percentile" and data.clip_low is not None:
            clip = [_per_channel(data.clip_low, channels), _per_channel(data.clip_high, channels)]
        return cls(data.normalize, _per_channel(data.mean, channels), _per_channel(data.std, channels), *clip)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        if self.mode == "per_image":
            mean = image.mean(dim=(-2, -1), keepdim=True)  # [..., C, 1, 1]
            std = image.std(dim=(-2, -1), correction=0, keepdim=True).clamp(min=MIN_STD)
            return (image - mean) / std
        if self.clip_low is not None:
            image = torch.maximum(torch.minimum(image, self.clip_high), self.clip_low)
        return (image - self.mean) / self.std


class _ImageSummaries(torch.utils.data.Dataset):
    """Item i: (pixel count, per-channel mean [C], per-channel sum of squared deviations [C], sampled pixels [n, C])
    of training image i, in float64; read in DataLoader workers."""

    def __init__(self, base, seed: int, sample: bool):
        self.base, self.seed, self.sample = base, seed, sample

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int):
        image = self.base[index][0]
        pixels = image.reshape(image.shape[0], -1).T.double().numpy()  # [H*W, C]
        mean = pixels.mean(axis=0)  # [C]
        squared_deviations = ((pixels - mean) ** 2).sum(axis=0)  # [C]
        sampled = pixels[:0]
        if self.sample:
            count = min(len(pixels), PERCENTILE_PIXELS_PER_IMAGE)
            chosen = np.random.default_rng([self.seed, index]).choice(len(pixels), count, replace=False)
            sampled = pixels[np.sort(chosen)]
        return len(pixels), mean, squared_deviations, sampled


def _pooled_mean_std(counts: np.ndarray, means: np.ndarray, squared_deviations: np.ndarray):
    """Per-image (n_i [N], mean_i [N, C], sum of squared deviations M_i [N, C]) -> pooled mean [C], std [C]
    (population std; Chan et al.'s combination, exact in float64 without a sum of squares that cancels)."""
    total = counts.sum()
    mean = (counts[:, None] * means).sum(axis=0) / total
    spread = squared_deviations.sum(axis=0) + (counts[:, None] * (means - mean) ** 2).sum(axis=0)
    return mean, np.sqrt(spread / total)


def count_statistics(base, mode: str, seed: int, num_workers: int = 0,
                     show_progress: bool = False) -> Dict[str, List[float]]:
    """Statistics of the training split `base` for `mode` (dataset | percentile): {"mean", "std"} per channel, and
    for percentile {"clip_low", "clip_high"}, with mean and std then those of the clipped sampled pixels."""
    summaries = _ImageSummaries(base, seed, sample=mode == "percentile")
    loader = torch.utils.data.DataLoader(summaries, batch_size=None, num_workers=num_workers,
                                         generator=torch.Generator())  # leaves the global RNG alone
    rows = list(tqdm(loader, total=len(base), desc="intensity statistics", disable=not show_progress, leave=False))
    counts = np.array([row[0] for row in rows], dtype=np.float64)  # [N]
    means = np.stack([np.asarray(row[1]) for row in rows])  # [N, C]
    squared_deviations = np.stack([np.asarray(row[2]) for row in rows])  # [N, C]
    if mode == "dataset":
        mean, std = _pooled_mean_std(counts, means, squared_deviations)
        return {"mean": mean.tolist(), "std": np.maximum(std, MIN_STD).tolist()}
    sampled = np.concatenate([np.asarray(row[3]) for row in rows])  # [n, C]
    low, high = np.percentile(sampled, PERCENTILES, axis=0)  # [C] each
    clipped = np.clip(sampled, low, high)
    return {"mean": clipped.mean(axis=0).tolist(), "std": np.maximum(clipped.std(axis=0), MIN_STD).tolist(),
            "clip_low": low.tolist(), "clip_high": high.tolist()}


def describe(statistics: Dict[str, Sequence[float]]) -> str:
    """One log line's worth: 'mean [..] std [..] (clip_low [..] clip_high [..])'."""
    return " ".join(f"{key} [{', '.join(f'{value:.6g}' for value in values)}]" for key, values in statistics.items())
