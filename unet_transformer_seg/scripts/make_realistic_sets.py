"""Write two generated image sets that look like real use, in the folder format read by `data.kind: folder`.

    python scripts/make_realistic_sets.py --out /work/data/seg_sets [--seed 0] [--scale 1.0] [--sets natural ...]

OUT/natural: photograph-like RGB JPEG images of mixed sizes (96..192 px a side) with a few large objects of three
classes (1: rounded blobs with wobbly outlines, 2: rotated boxes, 3: upright figures, a head over a body) on textured,
coloured, unevenly lit backgrounds; class colours overlap, objects occlude each other, and a 3-pixel void band (mask
value 255, as PASCAL VOC) runs along every object outline. Masks: indexed PNGs. 240 train / 60 val / 60 test.

OUT/microscopy: 16-bit gray PNG images of 256 x 256 in the style of fluorescence microscopy: many small objects of
two classes (1: round nuclei, radius 4-8 px; 2: elongated cells, 2-3 x 6-10 px) in a few clusters, on a heavy
background (uneven illumination, unlabelled out-of-focus debris, optical blur, shot and read noise); about 3 % of
the pixels are foreground. Masks: 8-bit gray PNGs of class ids. 80 train / 20 val / 20 test.

OUT/multichannel: 2-channel float32 `.npy` images of 160 x 160 on no fixed scale (each image has its own gain, 0.3x to
3x), as from a two-channel instrument: class 1 (round blobs, radius 8-16 px) is bright in channel 0, class 2
(elongated bands) only in channel 1, and class 3 is rare: small dots (radius 3-4 px) bright in both channels, in
about a third of the images. Masks: 8-bit gray PNGs. 120 train / 30 val / 30 test.

`--scale` multiplies every split's size; `--sets` picks some of the three. Everything is a pure function of --seed.
"""

import argparse
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageFilter

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.data.augment import blur
from unet_transformer_seg.errors import ConfigError

NATURAL_SPLITS = {"train": 240, "val": 60, "test": 60}
MICROSCOPY_SPLITS = {"train": 80, "val": 20, "test": 20}
MULTICHANNEL_SPLITS = {"train": 120, "val": 30, "test": 30}
VOID = 255
SPLIT_STREAMS = {"train": 0, "val": 1, "test": 2}


def smooth_noise(rng, height, width, cells, channels=1):
    """[H, W, channels] float in about [0, 1]: uniform noise on a cells x cells grid, upsampled bicubically."""
    layers = []
    for _ in range(channels):
        coarse = Image.fromarray((rng.random((cells, cells)) * 255).astype(np.uint8))
        layers.append(np.asarray(coarse.resize((width, height), Image.BICUBIC), dtype=np.float32) / 255.0)
    return np.stack(layers, -1)


def void_band(labels, width=1):
    """[H, W] ids -> bool [H, W]: pixels within `width` of a pixel of another id (outline band of 2 * width + 1)."""
    padded = np.pad(labels, width, mode="edge")
    height, wide = labels.shape
    band = np.zeros_like(labels, dtype=bool)
    for dy in range(2 * width + 1):
        for dx in range(2 * width + 1):
            band |= padded[dy : dy + height, dx : dx + wide] != labels
    return band


def natural_object(rng, yy, xx, height, width, class_id):
    """bool [H, W] region of one object of `class_id`, large against the image."""
    side = min(height, width)
    cy, cx = rng.uniform(0.2, 0.8) * height, rng.uniform(0.2, 0.8) * width
    angle = rng.uniform(0, np.pi)
    dy, dx = yy - cy, xx - cx
    u, v = dx * np.cos(angle) + dy * np.sin(angle), -dx * np.sin(angle) + dy * np.cos(angle)
    if class_id == 1:  # blob: ellipse with a wobbly outline
        radius = rng.uniform(0.18, 0.32) * side
        theta = np.arctan2(v, u)
        wobble = 1 + sum(rng.uniform(0, 0.12) * np.cos(k * theta + rng.uniform(0, 6.3)) for k in (2, 3, 5))
        return (u / 1.3) ** 2 + v**2 < (radius * wobble) ** 2
    if class_id == 2:  # box
        half_u, half_v = rng.uniform(0.12, 0.3) * side, rng.uniform(0.08, 0.2) * side
        return (np.abs(u) < half_u) & (np.abs(v) < half_v)
    # figure: upright body (rounded rectangle) with a head
    body_h, body_w = rng.uniform(0.2, 0.32) * side, rng.uniform(0.07, 0.12) * side
    tilt = rng.uniform(-0.3, 0.3)
    bu, bv = dx * np.cos(tilt) + dy * np.sin(tilt), -dx * np.sin(tilt) + dy * np.cos(tilt)
    body = (np.abs(bu) < body_w) & (np.abs(bv) < body_h)
    head = (bu**2 + (bv + body_h + body_w * 0.9) ** 2) < (body_w * 1.1) ** 2
    return body | head


def natural_sample(rng):
    height, width = (int(v) for v in rng.integers(96, 193, size=2))
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = rng.uniform(0.2, 0.8, size=3)
    background = base + 0.35 * (smooth_noise(rng, height, width, 4, 3) - 0.5) \
        + 0.15 * (smooth_noise(rng, height, width, 24, 3) - 0.5)
    light = 1 + rng.uniform(-0.3, 0.3) * (xx / width - 0.5) + rng.uniform(-0.3, 0.3) * (yy / height - 0.5)
    image = background * light[..., None]
    labels = np.zeros((height, width), dtype=np.int64)
    class_hues = {1: (0.8, 0.45, 0.2), 2: (0.3, 0.45, 0.75), 3: (0.55, 0.7, 0.35)}
    for _ in range(int(rng.integers(1, 4))):
        class_id = int(rng.integers(1, 4))
        region = natural_object(rng, yy, xx, height, width, class_id)
        colour = np.clip(np.array(class_hues[class_id]) + rng.normal(0, 0.18, 3), 0, 1)
        texture = 0.75 + 0.5 * smooth_noise(rng, height, width, int(rng.integers(8, 32)), 1)
        shading = 1 + 0.35 * ((xx - xx[region].mean()) / width if region.any() else 0)
        image = np.where(region[..., None], colour * texture * shading[..., None] * light[..., None], image)
        labels[region] = class_id  # later objects occlude earlier ones
    image = np.clip(image + rng.normal(0, 0.03, image.shape), 0, 1)
    mask = np.where(void_band(labels), VOID, labels).astype(np.uint8)
    picture = Image.fromarray((image * 255).round().astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.6))
    return picture, mask


def microscopy_sample(rng, size=256):
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    cy, cx = rng.uniform(0, size, 2)
    illumination = 7000 + 6000 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * (0.6 * size) ** 2))
    signal = illumination * (0.85 + 0.3 * smooth_noise(rng, size, size, 8)[..., 0])
    for _ in range(int(rng.integers(3, 9))):  # out-of-focus debris, unlabelled
        dy, dx = yy - rng.uniform(0, size), xx - rng.uniform(0, size)
        signal += rng.uniform(1500, 4000) * np.exp(-(dy**2 + dx**2) / (2 * rng.uniform(6, 14) ** 2))
    labels = np.zeros((size, size), dtype=np.int64)
    for _ in range(int(rng.integers(1, 4))):  # clusters
        centre = rng.uniform(0.15, 0.85, 2) * size
        spread = rng.uniform(12, 30)
        for _ in range(int(rng.integers(3, 9))):
            oy, ox = centre + rng.normal(0, spread, 2)
            class_id = 1 if rng.random() < 0.6 else 2
            angle = rng.uniform(0, np.pi)
            dy, dx = yy - oy, xx - ox
            u, v = dx * np.cos(angle) + dy * np.sin(angle), -dx * np.sin(angle) + dy * np.cos(angle)
            if class_id == 1:
                radius = rng.uniform(4, 8)
                region = (u / rng.uniform(1.0, 1.3)) ** 2 + v**2 < radius**2
                brightness = rng.uniform(3000, 9000)
            else:
                region = (u / rng.uniform(6, 10)) ** 2 + (v / rng.uniform(2, 3)) ** 2 < 1
                brightness = rng.uniform(2500, 6000)
            texture = 0.8 + 0.4 * smooth_noise(rng, size, size, 48)[..., 0]
            signal = np.where(region, signal + brightness * texture, signal)
            labels[region] = class_id
    blurred = blur(torch.from_numpy(signal.astype(np.float32))[None, None], torch.ones(1), radius=3)[0, 0].numpy()
    noisy = rng.poisson(np.clip(blurred, 0, None) / 4.0) * 4.0 + rng.normal(0, 300, blurred.shape)
    pixels = np.clip(noisy, 0, 65535).round().astype(np.uint16)
    return Image.fromarray(pixels), labels.astype(np.uint8)


def multichannel_sample(rng, size=160):
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    gain = rng.uniform(0.3, 3.0)
    channels = np.stack([50 + 10 * smooth_noise(rng, size, size, 6)[..., 0],
                         20 + 6 * smooth_noise(rng, size, size, 6)[..., 0]], -1)  # [H, W, 2]
    labels = np.zeros((size, size), dtype=np.int64)
    objects = [1] * int(rng.integers(1, 5)) + [2] * int(rng.integers(1, 4)) + [3] * int(rng.random() < 0.35)
    for class_id in rng.permutation(objects):
        cy, cx = rng.uniform(0.1, 0.9, 2) * size
        dy, dx = yy - cy, xx - cx
        angle = rng.uniform(0, np.pi)
        u, v = dx * np.cos(angle) + dy * np.sin(angle), -dx * np.sin(angle) + dy * np.cos(angle)
        if class_id == 1:
            region, boost = (u / rng.uniform(1.0, 1.4)) ** 2 + v**2 < rng.uniform(8, 16) ** 2, (35.0, 0.0)
        elif class_id == 2:
            region, boost = (u / rng.uniform(14, 28)) ** 2 + (v / rng.uniform(3, 6)) ** 2 < 1, (0.0, 18.0)
        else:
            region, boost = u**2 + v**2 < rng.uniform(3, 4.5) ** 2, (25.0, 14.0)
        channels[region] += np.array(boost, dtype=np.float32)
        labels[region] = class_id
    image = gain * (channels + rng.normal(0, 4, channels.shape))
    return image.astype(np.float32), labels.astype(np.uint8)


def write_set(root: Path, splits, sample, seed: int, image_suffix: str, scale: float) -> None:
    for split, count in splits.items():
        images, masks = root / split / "images", root / split / "masks"
        images.mkdir(parents=True, exist_ok=True)
        masks.mkdir(parents=True, exist_ok=True)
        for index in range(max(1, round(count * scale))):
            rng = np.random.default_rng([seed, SPLIT_STREAMS[split], index])
            picture, mask = sample(rng)
            stem = f"{split}_{index:04d}"
            if image_suffix == ".npy":
                np.save(images / f"{stem}.npy", picture)
            else:
                picture.save(images / f"{stem}{image_suffix}", **({"quality": 92} if image_suffix == ".jpg" else {}))
            Image.fromarray(mask, mode="L").save(masks / f"{stem}.png")
        print(f"{root.name} {split}: {max(1, round(count * scale))} images -> {root / split}", flush=True)


SETS = {"natural": (NATURAL_SPLITS, natural_sample, ".jpg"),
        "microscopy": (MICROSCOPY_SPLITS, microscopy_sample, ".png"),
        "multichannel": (MULTICHANNEL_SPLITS, multichannel_sample, ".npy")}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder to create the sets in (OUT/natural, ...)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the number of images of every split")
    parser.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS), help="which sets to write")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    if args.scale <= 0:
        raise ConfigError(f"--scale must be > 0, got {args.scale}")
    out = Path(args.out)
    for name in args.sets:
        splits, sample, suffix = SETS[name]
        write_set(out / name, splits, sample, args.seed, suffix, args.scale)
    return 0


if __name__ == "__main__":
    run_main(main)
