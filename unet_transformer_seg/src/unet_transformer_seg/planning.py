"""A config planned from the data: nnU-Net's dataset fingerprint and rules, for 2D images on a small machine.

`fingerprint` reads the training split once (images and masks as stored) and summarises what the rules need: image
sizes, channels, sample type, intensity percentiles per image, class pixel counts and object sizes. An object's size
is its equivalent diameter 4 * area / boundary (a disk of diameter d: about d; a square of side s: s), counted per
image and class from the mask alone, without labelling connected components.

`plan_config` replaces every `auto` value of a config (`config.auto_keys`) by the rule's choice; values a user set
stay and the later rules use them. The rules, each with the reason it prints:

| key | rule |
|---|---|
| data.in_channels | the most channels an image stores (alpha dropped; gray is copied to every channel) |
| data.ignore_index | 255 when masks hold 255 beside the ids 0..k-1, k >= 2 (PASCAL VOC's void), else none |
| data.mask_values | none when the masks' largest value is at most twice the number of values (class ids, a few absent); else the sorted values (binary masks of 0 and 255: [0, 255]) |
| data.num_classes | the largest id + 1, or the number of values with mask_values; void excluded |
| data.normalize | 8-bit images: fixed; otherwise per_image when image medians spread over more than 15 % of the robust range (exposure differs per image), else percentile |
| data.resize_mode | resize when the typical object spans >= 20 % of the image's short side (whole images fit the model), else pad (native resolution, windows) |
| data.image_size | resize: large enough that the smallest objects keep about 8 px; pad: about 4 large objects wide; both in [64, 96] (a CPU budget) and a multiple of 2**model.depth |
| data.foreground_fraction | pad: 0.33, nnU-Net's share of object-centred windows; resize: 0 (no windows) |
| train.batch_size | the most images (at most 16) whose activations fit the memory given |
| train.max_steps | 50 passes over the training pixels at the model's scale, within [1000, 2000] |
| train.val_every_steps | 20 validations over the budget |

The table also shows the weights `train.class_weights: auto` gives from the fingerprint's pixel counts; training
counts them again over every mask.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np
import torch
from tqdm import tqdm

from .config import Config, auto_keys, config_from_dict, config_to_dict
from .data.datasets import FolderDataset
from .data.image_io import VOC_VOID, mask_ids, read_stored_image, to_float32
from .losses import auto_class_weights

MAX_FINGERPRINT_IMAGES = 1000  # larger sets are sampled evenly
PIXELS_PER_IMAGE = 20_000  # intensity percentiles come from at most this many pixels of an image
SPREAD_FOR_PER_IMAGE = 0.15
LARGE_OBJECT_SHARE = 0.2
MIN_WINDOW, MAX_WINDOW = 64, 96
MIN_OBJECT_PIXELS = 8  # resize mode keeps the smallest objects at least this wide
OBJECTS_PER_WINDOW = 4
MAX_BATCH = 16
ACTIVATION_BYTES_PER_CHANNEL_PIXEL = 48  # float32 activations kept for the backward pass, about 12 per conv block
PIXEL_PASSES = 50
MIN_STEPS, MAX_STEPS = 1000, 2000
VALIDATIONS = 20


@dataclass
class Fingerprint:
    num_images: int  # images read
    set_size: int  # images in the split
    heights: np.ndarray  # [N]
    widths: np.ndarray  # [N]
    channels: int  # the most an image stores, alpha dropped
    sample_type: str  # numpy dtype name of the first image, e.g. uint8, uint16, float32
    percentiles: np.ndarray  # [N, 3] per image: 0.5th, 50th, 99.5th percentile of its values (as read_image gives)
    class_pixels: Dict[int, int]  # id -> pixel count over the masks, void included
    object_diameters: np.ndarray  # [M] one per (image, object class present): 4 * area / boundary pixels


def _boundary_pixels(ids: np.ndarray) -> np.ndarray:
    """[H, W] ids -> bool [H, W]: pixels with a 4-neighbour of another id (the image edge is not a boundary)."""
    boundary = np.zeros(ids.shape, dtype=bool)
    vertical, horizontal = ids[1:] != ids[:-1], ids[:, 1:] != ids[:, :-1]
    boundary[1:] |= vertical
    boundary[:-1] |= vertical
    boundary[:, 1:] |= horizontal
    boundary[:, :-1] |= horizontal
    return boundary


def object_diameters(ids: np.ndarray) -> Dict[int, float]:
    """{id: equivalent diameter 4 * area / boundary} of each id > 0 present in one mask [H, W]."""
    boundary = _boundary_pixels(ids)
    size = ids.max() + 1
    area = np.bincount(ids.reshape(-1), minlength=size)
    edge = np.bincount(ids[boundary], minlength=size)
    return {int(k): 4.0 * area[k] / max(edge[k], 1) for k in np.flatnonzero(area) if k > 0}


def _robust_percentiles(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[H, W, C] float32 -> [3] the 0.5th, 50th and 99.5th percentile of a sample of its values."""
    values = image.reshape(-1)
    if len(values) > PIXELS_PER_IMAGE:
        values = values[rng.choice(len(values), PIXELS_PER_IMAGE, replace=False)]
    return np.percentile(values, (0.5, 50, 99.5))


def fingerprint(dataset: FolderDataset, show_progress: bool = False) -> Fingerprint:
    """Read each training image and mask once (an even sample of MAX_FINGERPRINT_IMAGES for larger sets)."""
    chosen = np.unique(np.linspace(0, len(dataset) - 1, min(len(dataset), MAX_FINGERPRINT_IMAGES)).round().astype(int))
    rng = np.random.default_rng(0)
    heights, widths, percentiles, diameters, counts = [], [], [], [], {}
    channels, sample_type = 0, None
    for index in tqdm(chosen, desc="fingerprint", disable=not show_progress, leave=False):
        image_path, mask_path = dataset.pairs[index]
        stored, has_alpha = read_stored_image(image_path)  # [H, W, C]
        sample_type = sample_type or stored.dtype.name
        channels = max(channels, stored.shape[2] - int(has_alpha))
        heights.append(stored.shape[0])
        widths.append(stored.shape[1])
        percentiles.append(_robust_percentiles(to_float32(stored[..., : stored.shape[2] - int(has_alpha)],
                                                          image_path), rng))
        ids = mask_ids(mask_path, dataset.palette)  # [H, W]
        for class_id, count in zip(*np.unique(ids, return_counts=True)):
            counts[int(class_id)] = counts.get(int(class_id), 0) + int(count)
        diameters += object_diameters(ids).items()
    void = VOC_VOID if _has_void(counts) else None
    objects = np.array([diameter for class_id, diameter in diameters if class_id != void])
    return Fingerprint(len(chosen), len(dataset), np.array(heights), np.array(widths), channels, sample_type,
                       np.array(percentiles), counts, objects)


def _has_void(class_pixels: Dict[int, int]) -> bool:
    """Masks hold 255 beside the ids 0..k-1, k >= 2: PASCAL VOC's void label rather than a class (a mask of 0 and
    255 alone is a binary mask)."""
    others = sorted(set(class_pixels) - {VOC_VOID})
    return VOC_VOID in class_pixels and len(others) >= 2 and others == list(range(len(others)))


@dataclass
class Decision:
    key: str
    value: object
    reason: str


def _round_window(size: float, factor: int, max_window: int) -> int:
    """size clamped to [MIN_WINDOW, max_window], rounded up to a multiple of `factor`."""
    clamped = min(max(size, MIN_WINDOW), max_window)
    return int(math.ceil(clamped / factor) * factor)


def _activation_bytes_per_pixel(cfg: Config) -> float:
    """Training memory per input pixel of one image: channels summed over the U-Net's levels (each a quarter of the
    pixels of the one above) times the bytes kept per channel and pixel."""
    widths = sum(cfg.model.base_channels * 2**level / 4**level for level in range(cfg.model.depth + 1))
    return 2 * widths * ACTIVATION_BYTES_PER_CHANNEL_PIXEL  # encoder and decoder


def decide(cfg: Config, fp: Fingerprint, memory_gib: float, max_window: int = MAX_WINDOW) -> List[Decision]:
    """The rules of the module docstring, in order, for every key of `cfg` still `auto`; values already set are
    used as given."""
    todo = set(auto_keys(cfg))
    decisions: List[Decision] = []

    def settle(key: str, value, reason: str):
        if key in todo:
            decisions.append(Decision(key, value, reason))
            section, name = key.split(".")
            setattr(getattr(cfg, section), name, value)
        return getattr(getattr(cfg, key.split(".")[0]), key.split(".")[1])

    short_side = float(np.median(np.minimum(fp.heights, fp.widths)))
    void = _has_void(fp.class_pixels)
    settle("data.in_channels", fp.channels, f"images store up to {fp.channels} channel(s)")
    settle("data.ignore_index", VOC_VOID if void else None,
           "255 beside the ids 0..k-1: void" if void else "no void value in the masks")
    values = sorted(set(fp.class_pixels) - ({VOC_VOID} if void else set()))
    if values[-1] <= 2 * len(values):  # class ids, some perhaps absent from the training masks
        settle("data.mask_values", None, f"masks hold class ids (up to {values[-1]})")
        settle("data.num_classes", max(values[-1] + 1, 2), f"mask ids 0..{values[-1]}")
    else:
        settle("data.mask_values", values, f"masks hold the values {values}: class k is the k-th")
        settle("data.num_classes", max(len(values), 2), f"{len(values)} distinct mask values")

    low, median, high = fp.percentiles[:, 0], fp.percentiles[:, 1], fp.percentiles[:, 2]
    robust_range = max(float(np.median(high) - np.median(low)), 1e-12)
    spread = float(np.std(median) / robust_range)
    if fp.sample_type == "uint8":
        settle("data.normalize", "fixed", "8-bit images: values / 255, then mean 0.5 / std 0.25")
    elif spread > SPREAD_FOR_PER_IMAGE:
        settle("data.normalize", "per_image", f"{fp.sample_type} images whose medians spread over "
               f"{spread:.0%} of the robust range: exposure differs per image")
    else:
        settle("data.normalize", "percentile", f"{fp.sample_type} images on one scale (medians spread "
               f"{spread:.0%} of the range): clip to the 0.5-99.5th percentiles of the set")

    factor = 2**cfg.model.depth
    diameters = fp.object_diameters if len(fp.object_diameters) else np.array([short_side])
    typical, small, large = (float(np.percentile(diameters, q)) for q in (50, 10, 90))
    share = typical / short_side
    if share >= LARGE_OBJECT_SHARE:
        mode = settle("data.resize_mode", "resize", f"objects span {share:.0%} of the short side "
                      f"({typical:.0f} of {short_side:.0f} px): whole images, resized")
    else:
        mode = settle("data.resize_mode", "pad", f"objects span {share:.0%} of the short side "
                      f"({typical:.0f} of {short_side:.0f} px): native resolution, windows")
    if mode == "resize":
        wanted = MIN_OBJECT_PIXELS * short_side / max(small, 1.0)
        size = settle("data.image_size", _round_window(min(wanted, short_side), factor, max_window),
                      f"small objects ({small:.0f} px) keep {MIN_OBJECT_PIXELS} px or more")
    else:
        size = settle("data.image_size", _round_window(OBJECTS_PER_WINDOW * large, factor, max_window),
                      f"about {OBJECTS_PER_WINDOW} large objects ({large:.0f} px) a window")
    settle("data.foreground_fraction", 0.33 if mode != "resize" else 0.0,
           "a third of the windows centred on an object class" if mode != "resize" else "no windows in resize mode")

    per_image = _activation_bytes_per_pixel(cfg) * size**2
    fits = int(memory_gib * 2**30 // per_image)
    batch = settle("train.batch_size", max(1, min(MAX_BATCH, fits)),
                   f"{per_image / 2**20:.1f} MiB of activations an image; {memory_gib:g} GiB hold {fits}")

    window = size * size
    pixels = np.full(fp.num_images, window) if mode == "resize" else np.maximum(fp.heights * fp.widths, window)
    pass_steps = float(pixels.mean()) * fp.set_size / (batch * window)  # steps to show every training pixel once
    steps = settle("train.max_steps", int(min(max(PIXEL_PASSES * pass_steps, MIN_STEPS), MAX_STEPS)),
                   f"{PIXEL_PASSES} passes over the training pixels = {PIXEL_PASSES * pass_steps:.0f} steps, "
                   f"kept in [{MIN_STEPS}, {MAX_STEPS}]")
    settle("train.val_every_steps", max(1, steps // VALIDATIONS), f"{VALIDATIONS} validations")
    return decisions


def class_weights_of(fp: Fingerprint, data) -> List[float]:
    """`train.class_weights: auto` as the fingerprint's pixel counts give it, one weight per class id of `data`."""
    values = data.mask_values or list(range(data.num_classes))
    counts = torch.tensor([fp.class_pixels.get(value, 0) for value in values], dtype=torch.int64)  # [N]
    return auto_class_weights(counts)


def describe(fp: Fingerprint, decisions: List[Decision]) -> str:
    """The fingerprint and the decisions as a short text table."""
    sizes = f"{int(np.median(fp.heights))} x {int(np.median(fp.widths))} (median)"
    foreground = {k: v for k, v in sorted(fp.class_pixels.items()) if k != 0}
    total = sum(fp.class_pixels.values())
    lines = [f"fingerprint of {fp.num_images} of {fp.set_size} training images: {sizes}, {fp.channels} channel(s) of "
             f"{fp.sample_type}; class pixel shares "
             + ", ".join(f"{k}: {v / total:.2%}" for k, v in foreground.items())]
    width = max([len(d.key) for d in decisions] + [3])
    lines += [f"  {d.key:<{width}}  {str(d.value):<10}  {d.reason}" for d in decisions]
    return "\n".join(lines)


def plan_config(cfg: Config, memory_gib: float = 2.0, show_progress: bool = False) -> Tuple[Config, str]:
    """A copy of `cfg` with every `auto` value planned from ROOT/train (with folds as well:
    every fold trains the same plan), and the table saying why; a config without `auto` comes back unchanged with an empty table."""
    if not auto_keys(cfg):
        return cfg, ""
    planned = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data), train=dataclasses.replace(cfg.train))
    data = planned.data
    dataset = FolderDataset(data.root, "train", 1, 2**16, data.palette, None)  # pairs only: read as stored
    fp = fingerprint(dataset, show_progress)
    decisions = decide(planned, fp, memory_gib)
    planned = config_from_dict(config_to_dict(planned))
    table = describe(fp, decisions)
    if planned.train.class_weights == "auto":
        weights = ", ".join(f"{weight:.3f}" for weight in class_weights_of(fp, planned.data))
        table += f"\n  train.class_weights auto: [{weights}] from these pixel counts (counted again over every mask " \
                 f"when training starts)"
    return planned, table
