"""Folder dataset for real data, the per-sample transform wrapper, and building datasets from a config.

Folder layout (paired by file stem):
    ROOT/train/images/NAME.png|jpg|jpeg   ROOT/train/masks/NAME.png
    ROOT/val/...                          ROOT/test/... (optional)
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..config import Config
from ..errors import DataError
from .image_io import IMAGE_SUFFIXES, read_image, read_mask
from .toy_shapes import ToyShapesDataset
from .transforms import SegmentationTransform

AUGMENT_STREAM = 7  # keeps augmentation draws apart from any other use of the seed


class FolderDataset(torch.utils.data.Dataset):
    """Items: image [C, H, W] float32 in [0, 1] at the file's own size, mask [H, W] int64 class ids."""

    def __init__(
        self,
        root: str | Path,
        split: str,
        in_channels: int,
        num_classes: int,
        palette: Optional[Sequence[Sequence[int]]] = None,
    ):
        self.split_dir = Path(root) / split
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.palette = palette
        self.pairs = self._find_pairs()

    def _find_pairs(self) -> List[Tuple[Path, Path]]:
        image_dir, mask_dir = self.split_dir / "images", self.split_dir / "masks"
        for folder in (image_dir, mask_dir):
            if not folder.is_dir():
                raise DataError(f"folder not found: {folder} (expected ROOT/<split>/images and ROOT/<split>/masks)")
        images = sorted(p for p in image_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        masks = {p.stem: p for p in mask_dir.iterdir() if p.suffix.lower() == ".png"}
        if not images:
            raise DataError(f"no images (*.png, *.jpg, *.jpeg) in {image_dir}")
        stems = [p.stem for p in images]
        if len(set(stems)) != len(stems):
            duplicate = next(s for s in stems if stems.count(s) > 1)
            raise DataError(f"two images share the stem '{duplicate}' in {image_dir}")
        for image_path in images:
            if image_path.stem not in masks:
                raise DataError(f"image {image_path} has no mask {mask_dir / (image_path.stem + '.png')}")
        orphans = sorted(set(masks) - set(stems))
        if orphans:
            raise DataError(f"mask {masks[orphans[0]]} has no image with the same stem in {image_dir}")
        return [(image_path, masks[image_path.stem]) for image_path in images]

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, torch.Tensor]:
        image_path, mask_path = self.pairs[index]
        image = read_image(image_path, self.in_channels)
        mask = read_mask(mask_path, self.num_classes, self.palette)
        if tuple(image.shape[-2:]) != tuple(mask.shape):
            raise DataError(
                f"mask {mask_path} is {tuple(mask.shape)} but image {image_path} is {tuple(image.shape[-2:])}"
            )
        return image, mask

    def name(self, index: int) -> str:
        return self.pairs[index][0].stem


class SegmentationSplit(torch.utils.data.Dataset):
    """Applies a SegmentationTransform to a base dataset.

    Training items: (image [C, S, S], mask [S, S]) with S = data.image_size; the augmentation of item i in epoch e
    draws from `np.random.default_rng([seed, AUGMENT_STREAM, e, i])`, so it does not depend on workers or ranks.
    Evaluation items: (image [C, S, S], mask [S, S], full_mask [H0, W0]) where full_mask is the untouched original.
    """

    def __init__(self, base, transform: SegmentationTransform, seed: int):
        self.base = base
        self.transform = transform
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int):
        image, full_mask = self.base[index]
        rng = np.random.default_rng([self.seed, AUGMENT_STREAM, self.epoch, index]) if self.transform.train else None
        image, mask = self.transform(image, full_mask, rng)
        if self.transform.train:
            return image, mask
        return image, mask, full_mask

    def name(self, index: int) -> str:
        return self.base.name(index)


def eval_collate(items):
    """Stack images and resized masks; keep original-size masks as a list (their sizes may differ)."""
    images = torch.stack([item[0] for item in items])  # [B, C, S, S]
    masks = torch.stack([item[1] for item in items])  # [B, S, S]
    return images, masks, [item[2] for item in items]


def base_dataset(cfg: Config, split: str, root: Optional[str] = None):
    """The untransformed dataset of one split: toy shapes, or the folder at `root` (default data.root)."""
    data = cfg.data
    if root is None and data.kind == "toy":
        sizes = {"train": data.train_size, "val": data.val_size, "test": data.test_size}
        return ToyShapesDataset(
            sizes[split], data.image_size, cfg.run.seed, split, data.in_channels, data.binary, data.max_shapes,
            data.noise_std,
        )
    return FolderDataset(root or data.root, split, data.in_channels, data.num_classes, data.palette)


def build_split(cfg: Config, split: str, train: bool, root: Optional[str] = None) -> SegmentationSplit:
    data = cfg.data
    transform = SegmentationTransform(
        data.image_size, data.mean, data.std, train, data.resize_mode, data.hflip, data.vflip, data.rot90
    )
    return SegmentationSplit(base_dataset(cfg, split, root), transform, cfg.run.seed)


def build_datasets(cfg: Config) -> Dict[str, SegmentationSplit]:
    return {"train": build_split(cfg, "train", train=True), "val": build_split(cfg, "val", train=False)}
