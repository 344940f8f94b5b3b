"""Toy shapes: a background with circles, squares and triangles drawn on it.

`ToyShapesDataset(...)[i]` is a pure function of (seed, split, i): every call, epoch and DataLoader worker gets the
same sample, because each sample draws from its own generator `np.random.default_rng([seed, split_id, i])`.

Classes: 0 background, 1 circle, 2 square, 3 triangle (binary mode: 0 background, 1 any shape). Shapes may overlap;
a later shape hides an earlier one in both image and mask.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from ..labels import TOY_CLASS_NAMES as CLASS_NAMES, class_colours
from .image_io import convert_channels, image_to_uint8, write_png

SPLIT_IDS = {"train": 0, "val": 1, "test": 2}
MIN_COLOUR_DISTANCE = 0.35


def _distinct_colour(rng: np.random.Generator, background: np.ndarray) -> np.ndarray:
    """A colour at least MIN_COLOUR_DISTANCE (L2, RGB in [0,1]) away from the background."""
    colour = rng.uniform(0.0, 1.0, size=3)
    gap = colour - background
    distance = float(np.linalg.norm(gap))
    if distance < MIN_COLOUR_DISTANCE:
        direction = gap / distance if distance > 1e-6 else np.array([1.0, -1.0, 1.0]) / np.sqrt(3.0)
        colour = np.clip(background + direction * MIN_COLOUR_DISTANCE, 0.0, 1.0)
        if np.linalg.norm(colour - background) < MIN_COLOUR_DISTANCE:
            colour = np.where(background > 0.5, 0.0, 1.0)
    return colour


def _shape_mask(
    kind: int, rng: np.random.Generator, ys: np.ndarray, xs: np.ndarray, shape_size: Optional[int]
) -> np.ndarray:
    """Boolean [H, W] mask of one shape with random size, position (and orientation for triangles).

    The radius is 0.10..0.22 of the shorter side, or of `shape_size` pixels when given (shapes of the same pixel
    size whatever the image size, at most 0.45 of the shorter side)."""
    height, width = ys.shape
    if shape_size is None:
        radius = rng.uniform(0.10, 0.22) * min(height, width)
    else:
        radius = min(rng.uniform(0.10, 0.22) * shape_size, 0.45 * min(height, width))
    cy, cx = rng.uniform(radius, [height - radius, width - radius])
    if kind == 1:  # circle
        return (ys - cy) ** 2 + (xs - cx) ** 2 <= radius**2
    if kind == 2:  # axis-aligned square with half side `radius * 0.85`
        half = radius * 0.85
        return (np.abs(ys - cy) <= half) & (np.abs(xs - cx) <= half)
    # triangle: three vertices on the circle of `radius`, random rotation; inside = same side of all three edges
    angle0 = rng.uniform(0.0, 2.0 * np.pi)
    angles = angle0 + np.array([0.0, 2.0 * np.pi / 3.0, 4.0 * np.pi / 3.0])
    vy, vx = cy + radius * np.sin(angles), cx + radius * np.cos(angles)
    signs = []
    for a, b in ((0, 1), (1, 2), (2, 0)):
        signs.append((vx[b] - vx[a]) * (ys - vy[a]) - (vy[b] - vy[a]) * (xs - vx[a]))
    signs = np.stack(signs)  # [3, H, W]
    return (signs >= 0).all(axis=0) | (signs <= 0).all(axis=0)


def generate_sample(
    seed: int, split_id: int, index: int, height: int, width: int, max_shapes: int, noise_std: float,
    shape_size: Optional[int] = None,
) -> Tuple[np.ndarray, np.ndarray]:
    """One sample: image [H, W, 3] float32 in [0, 1] and mask [H, W] int64 with class ids 0..3 (shape sizes as
    `_shape_mask` says)."""
    rng = np.random.default_rng([seed, split_id, index])
    ys, xs = np.meshgrid(np.arange(height) + 0.5, np.arange(width) + 0.5, indexing="ij")  # [H, W] each
    background = rng.uniform(0.0, 1.0, size=3)
    tilt = rng.uniform(-0.15, 0.15, size=(2, 3))  # a gentle colour gradient over the image
    image = background + (ys / height - 0.5)[..., None] * tilt[0] + (xs / width - 0.5)[..., None] * tilt[1]
    mask = np.zeros((height, width), dtype=np.int64)
    for _ in range(int(rng.integers(1, max_shapes + 1))):
        kind = int(rng.integers(1, 4))
        region = _shape_mask(kind, rng, ys, xs, shape_size)
        image[region] = _distinct_colour(rng, background)
        mask[region] = kind
    image = image + rng.normal(0.0, noise_std, size=image.shape)
    return np.clip(image, 0.0, 1.0).astype(np.float32), mask


class ToyShapesDataset(torch.utils.data.Dataset):
    """Items: image [C, H, W] float32 in [0, 1] (C = in_channels), mask [H, W] int64 in [0, num_classes).

    Square images of `image_size`, or with `sizes` item i is sizes[i % len(sizes)], for a set of mixed sizes and
    aspect ratios; shapes scale with the shorter side, or have the pixel size of a `shape_size` square image."""

    def __init__(
        self,
        size: int,
        image_size: int = 64,
        seed: int = 0,
        split: str = "train",
        in_channels: int = 3,
        binary: bool = False,
        max_shapes: int = 3,
        noise_std: float = 0.05,
        sizes: Optional[Sequence[Tuple[int, int]]] = None,
        shape_size: Optional[int] = None,
    ):
        self.size = size
        self.image_size = image_size
        self.seed = seed
        self.split_id = SPLIT_IDS[split]
        self.in_channels = in_channels
        self.binary = binary
        self.max_shapes = max_shapes
        self.noise_std = noise_std
        self.num_classes = 2 if binary else len(CLASS_NAMES)
        self.sizes = list(sizes) if sizes else [(image_size, image_size)]
        self.shape_size = shape_size

    @classmethod
    def from_config(cls, cfg, split: str, sizes: Optional[Sequence[Tuple[int, int]]] = None,
                    shape_size: Optional[int] = None) -> "ToyShapesDataset":
        """The toy split a config describes (data.*_size images of data.image_size, or of `sizes` in turn)."""
        data = cfg.data
        count = {"train": data.train_size, "val": data.val_size, "test": data.test_size}[split]
        return cls(count, data.image_size, cfg.run.seed, split, data.in_channels, data.binary, data.max_shapes,
                   data.noise_std, sizes, shape_size)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} out of range for {self.size} toy images")
        image, mask = generate_sample(
            self.seed, self.split_id, index, *self.size_of(index), self.max_shapes, self.noise_std, self.shape_size
        )
        if self.binary:
            mask = (mask > 0).astype(np.int64)
        image_t = convert_channels(torch.from_numpy(image).permute(2, 0, 1), self.in_channels)  # [C, H, W]
        return image_t, torch.from_numpy(mask)

    def read_mask(self, index: int) -> torch.Tensor:
        """The mask of item `index`, [H, W] int64."""
        return self[index][1]

    def size_of(self, index: int) -> Tuple[int, int]:
        """(height, width) of item `index`: image_size square, or the sizes given, in turn."""
        return self.sizes[index % len(self.sizes)]

    def name(self, index: int) -> str:
        return f"toy_{index:06d}"


def export_toy_folder(cfg, root: Path, sizes: Optional[Sequence[Tuple[int, int]]] = None,
                      shape_size: Optional[int] = None, colour_masks: bool = False) -> Dict[str, int]:
    """Write the toy train/val/test splits in the folder format (ROOT/<split>/images|masks/toy_NNNNNN.png), with
    the `sizes` and `shape_size` of ToyShapesDataset.

    Masks are 8-bit gray class ids, or RGB class colours (`class_colours`, the data.palette to use) with
    `colour_masks`. Returns the number of images per split."""
    colours = class_colours(cfg.data.num_classes)
    counts = {}
    for split in SPLIT_IDS:
        dataset = ToyShapesDataset.from_config(cfg, split, sizes, shape_size)
        image_dir, mask_dir = Path(root) / split / "images", Path(root) / split / "masks"
        image_dir.mkdir(parents=True, exist_ok=True)
        mask_dir.mkdir(parents=True, exist_ok=True)
        for index in range(len(dataset)):
            image, mask = dataset[index]  # [C, H, W], [H, W]
            write_png(image_dir / f"{dataset.name(index)}.png", image_to_uint8(image))
            ids = mask.numpy()
            write_png(mask_dir / f"{dataset.name(index)}.png", colours[ids] if colour_masks else ids.astype(np.uint8))
        counts[split] = len(dataset)
    return counts
