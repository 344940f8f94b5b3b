"""Folder dataset for real data, the per-sample transform wrapper, evaluation batches, class statistics, and building
datasets from a config.

Folder layout (paired by file stem):
    ROOT/train/images/NAME.png|jpg|jpeg|tif|tiff|bmp|npy   ROOT/train/masks/NAME.png|tif|tiff|bmp
    ROOT/val/...                                        ROOT/test/... (optional)
"""

from __future__ import annotations

import copy
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from tqdm import tqdm

from ..config import Config
from ..errors import DataError
from ..labels import IGNORE_LABEL
from .normalization import Normalization
from .image_io import IMAGE_SUFFIXES, MASK_SUFFIXES, image_size, read_image, read_mask
from .folds import POOLED_SPLITS, fold_stems, split_file
from .toy_shapes import ToyShapesDataset
from .transforms import SegmentationTransform

AUGMENT_STREAM = 7  # keeps augmentation draws apart from any other use of the seed


class FolderDataset(torch.utils.data.Dataset):
    """Items: image [C, H, W] float32 (values as `read_image` keeps them) at the file's own size, mask [H, W] int64
    class ids (IGNORE_LABEL where the file holds `ignore_index`; `mask_values` maps stored values to ids)."""

    def __init__(
        self,
        root: str | Path,
        split: str,
        in_channels: int,
        num_classes: int,
        palette: Optional[Sequence[Sequence[int]]] = None,
        ignore_index: Optional[int] = None,
        mask_values: Optional[Sequence[int]] = None,
    ):
        self.split_dir = Path(root) / split
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.palette = palette
        self.ignore_index = ignore_index
        self.mask_values = mask_values
        self.pairs = self._find_pairs()

    def _find_pairs(self) -> List[Tuple[Path, Path]]:
        image_dir, mask_dir = self.split_dir / "images", self.split_dir / "masks"
        for folder in (image_dir, mask_dir):
            if not folder.is_dir():
                raise DataError(f"folder not found: {folder} (expected ROOT/<split>/images and ROOT/<split>/masks)")
        images = sorted(p for p in image_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        mask_files = sorted(p for p in mask_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        masks = {p.stem: p for p in mask_files if p.suffix.lower() in MASK_SUFFIXES}
        if not images:
            raise DataError(f"no images ({', '.join('*' + s for s in IMAGE_SUFFIXES)}) in {image_dir}")
        stems = [p.stem for p in images]
        if len(set(stems)) != len(stems):
            duplicate = next(s for s in stems if stems.count(s) > 1)
            raise DataError(f"two images share the stem '{duplicate}' in {image_dir}")
        lossy = {p.stem: p for p in mask_files if p.suffix.lower() not in MASK_SUFFIXES}
        for image_path in images:
            if image_path.stem in lossy and image_path.stem not in masks:
                unusable = lossy[image_path.stem]
                reason = ("is a JPEG: lossy compression changes class ids" if unusable.suffix.lower() != ".npy"
                          else "is a .npy array: masks are image files")
                raise DataError(f"mask {unusable} {reason}; save masks as PNG, TIFF or BMP")
            if image_path.stem not in masks:
                raise DataError(f"image {image_path} has no mask {mask_dir / (image_path.stem + '.png')}")
        orphans = sorted(set(masks) - set(stems))
        if orphans:
            raise DataError(f"mask {masks[orphans[0]]} has no image with the same stem in {image_dir}")
        return [(image_path, masks[image_path.stem]) for image_path in images]

    def __len__(self) -> int:
        return len(self.pairs)

    def with_pairs(self, pairs: List[Tuple[Path, Path]]) -> "FolderDataset":
        """The same reader over other (image, mask) pairs: a fold's part of a pool."""
        subset = copy.copy(self)
        subset.pairs = pairs
        return subset

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, torch.Tensor]:
        image_path, mask_path = self.pairs[index]
        image = read_image(image_path, self.in_channels)
        mask = self.read_mask(index)
        if tuple(image.shape[-2:]) != tuple(mask.shape):
            raise DataError(
                f"mask {mask_path} is {tuple(mask.shape)} but image {image_path} is {tuple(image.shape[-2:])}"
            )
        return image, mask

    def read_mask(self, index: int) -> torch.Tensor:
        """The mask of item `index` alone, [H, W] int64 (the image is not read)."""
        return read_mask(self.pairs[index][1], self.num_classes, self.palette, self.ignore_index, self.mask_values)

    def size_of(self, index: int) -> Tuple[int, int]:
        """(height, width) of image `index`, from its file header."""
        return image_size(self.pairs[index][0])

    def name(self, index: int) -> str:
        return self.pairs[index][0].stem


class SegmentationSplit(torch.utils.data.Dataset):
    """Applies a SegmentationTransform to a base dataset, optionally `repeats` times over.

    Training items: (image [C, S, S], mask [S, S]) with S = data.image_size; the augmentation of item i in epoch e
    draws from `np.random.default_rng([seed, AUGMENT_STREAM, e, i])`, so it does not depend on workers or ranks.
    Item i shows base image i mod len(base): with repeats > 1 a set smaller than a batch still fills one, each copy
    with windows and flips of its own (images drawn with replacement, as nnU-Net samples patches).
    Evaluation items: (image [C, S, S] resized, or [C, H0, W0] at its own size, normalised; mask [H0, W0] untouched).
    """

    def __init__(self, base, transform: SegmentationTransform, seed: int, repeats: int = 1):
        self.base = base
        self.transform = transform
        self.seed = seed
        self.repeats = repeats
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.base) * self.repeats

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, torch.Tensor]:
        image, mask = self.base[index % len(self.base)]
        rng = np.random.default_rng([self.seed, AUGMENT_STREAM, self.epoch, index]) if self.transform.train else None
        return self.transform(image, mask, rng)

    def size_of(self, index: int) -> Tuple[int, int]:
        """(height, width) of item `index` on disk."""
        return self.base.size_of(index % len(self.base))

    def name(self, index: int) -> str:
        return self.base.name(index % len(self.base))


def eval_collate(items) -> Tuple[torch.Tensor, torch.Tensor]:
    """Stack images [B, C, h, w] and masks [B, H0, W0] of one evaluation batch (all items share their sizes)."""
    return torch.stack([item[0] for item in items]), torch.stack([item[1] for item in items])


def size_grouped_batches(sizes: Mapping[int, Tuple[int, int]], max_images: int, pixel_budget: int) -> List[List[int]]:
    """Evaluation batches from {index: (height, width)}: items of one image size together, at most `max_images` per
    batch and at most `pixel_budget` pixels (always at least one image). Sizes keep the order they first appear in."""
    by_size: Dict[Tuple[int, int], List[int]] = defaultdict(list)
    for index, size in sizes.items():
        by_size[tuple(size)].append(index)
    batches = []
    for (height, width), members in by_size.items():
        per_batch = max(1, min(max_images, pixel_budget // (height * width)))
        batches += [members[start : start + per_batch] for start in range(0, len(members), per_batch)]
    return batches


class _MaskClassCounts(torch.utils.data.Dataset):
    """Item i: pixel count per class [N] int64 of mask i (ignored pixels left out); read in DataLoader workers."""

    def __init__(self, base, num_classes: int):
        self.base, self.num_classes = base, num_classes

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> torch.Tensor:
        mask = self.base.read_mask(index)
        return torch.bincount(mask[mask != IGNORE_LABEL].reshape(-1), minlength=self.num_classes)


def class_pixel_counts(base, num_classes: int, num_workers: int = 0, show_progress: bool = False) -> torch.Tensor:
    """Pixel count per class over every mask of a base dataset, [N] int64; each mask is read once, images never."""
    loader = torch.utils.data.DataLoader(_MaskClassCounts(base, num_classes), batch_size=None, num_workers=num_workers,
                                         generator=torch.Generator())  # leaves the global RNG alone
    total = torch.zeros(num_classes, dtype=torch.int64)
    for counts in tqdm(loader, total=len(base), desc="class frequencies", disable=not show_progress, leave=False):
        total += counts
    return total


def base_dataset(cfg: Config, split: str, root: Optional[str] = None):
    """The untransformed dataset of one split: toy shapes, or the folder at `root` (default data.root); with
    `data.folds` (and no other root) the train and val splits are fold `data.fold`'s parts of train + val."""
    data = cfg.data
    if root is None and data.kind == "toy":
        return ToyShapesDataset.from_config(cfg, split)
    if root is None and data.folds is not None and split in POOLED_SPLITS:
        return _fold_dataset(cfg, split)
    return FolderDataset(root or data.root, split, data.in_channels, data.num_classes, data.palette, data.ignore_index,
                         data.mask_values)


def _fold_dataset(cfg: Config, split: str) -> FolderDataset:
    """Fold data.fold of the pool ROOT/train + ROOT/val (`folds.py`): its validation part for `val`, the rest for
    `train`."""
    data = cfg.data
    pool = pooled_dataset(cfg)
    stems = [pool.name(index) for index in range(len(pool))]
    validation = set(fold_stems(split_file(cfg.run.output_dir, data.root, data.folds), stems, data.folds)[data.fold])
    return pool.with_pairs([pair for pair in pool.pairs if (pair[0].stem in validation) == (split == "val")])


def pooled_dataset(cfg: Config) -> FolderDataset:
    """Every image of ROOT/train and ROOT/val (when it exists), in that order: what folds split, and what their
    intensity statistics are counted over, so that every fold normalises alike and their models can be ensembled."""
    data = cfg.data
    pools = [FolderDataset(data.root, name, data.in_channels, data.num_classes, data.palette, data.ignore_index,
                           data.mask_values)
             for name in POOLED_SPLITS if name == "train" or (Path(data.root) / name).is_dir()]
    pairs = [pair for pool in pools for pair in pool.pairs]
    stems = [image.stem for image, _ in pairs]
    if len(set(stems)) != len(stems):
        duplicate = next(stem for stem in stems if stems.count(stem) > 1)
        raise DataError(f"train and val both hold an image with the stem '{duplicate}' in {data.root}: folds pool "
                        f"them, so stems must be unique across the two")
    return pools[0].with_pairs(pairs)


def build_split(
    cfg: Config, split: str, train: bool, root: Optional[str] = None, resize_for_eval: bool = True
) -> SegmentationSplit:
    """A split with its transform; `resize_for_eval=False` keeps evaluation images at their own size (windows)."""
    data = cfg.data
    transform = SegmentationTransform(
        data.image_size, Normalization.from_config(data), train, data.resize_mode, data.hflip, data.vflip, data.rot90,
        resize_for_eval, data.foreground_fraction,
    )
    return SegmentationSplit(base_dataset(cfg, split, root), transform, cfg.run.seed)
