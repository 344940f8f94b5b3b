"""Write the toy shapes set in the folder format read by `data.kind: folder`.

    python scripts/export_toy_dataset.py --out data/toy_folder [--config configs/quick.yaml]
                                         [--train-size N] [--val-size N] [--test-size N] [--palette]

Creates OUT/{train,val,test}/images/toy_NNNNNN.png and OUT/{train,val,test}/masks/toy_NNNNNN.png. Masks are
single-channel class ids, or with --palette RGB colours (the palette to put in data.palette is printed).
Sizes, seed, image size and classes come from the config's data/run sections unless overridden here.
"""

import argparse
from pathlib import Path

import numpy as np

import _bootstrap  # noqa: F401

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.config import load_config
from unet_transformer_seg.data.datasets import base_dataset
from unet_transformer_seg.data.image_io import image_to_uint8, write_png
from unet_transformer_seg.training.plots import class_colours


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="dataset root to create")
    parser.add_argument("--config", help="config whose data/run sections describe the toy set (default: defaults)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--train-size", type=int)
    parser.add_argument("--val-size", type=int)
    parser.add_argument("--test-size", type=int)
    parser.add_argument("--palette", action="store_true", help="write RGB colour masks instead of class ids")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    overrides = list(args.overrides) + ["data.kind=toy"]
    for split in ("train", "val", "test"):
        size = getattr(args, f"{split}_size")
        if size is not None:
            overrides.append(f"data.{split}_size={size}")
    cfg = load_config(args.config, overrides)
    colours = class_colours(cfg.data.num_classes)
    root = Path(args.out)
    for split in ("train", "val", "test"):
        dataset = base_dataset(cfg, split)
        image_dir, mask_dir = root / split / "images", root / split / "masks"
        image_dir.mkdir(parents=True, exist_ok=True)
        mask_dir.mkdir(parents=True, exist_ok=True)
        for index in range(len(dataset)):
            image, mask = dataset[index]  # [C, H, W], [H, W]
            name = dataset.name(index)
            write_png(image_dir / f"{name}.png", image_to_uint8(image))
            mask_pixels = colours[mask.numpy()] if args.palette else mask.numpy().astype(np.uint8)
            write_png(mask_dir / f"{name}.png", mask_pixels)
        print(f"{split}: {len(dataset)} images -> {root / split}")
    if args.palette:
        print("data.palette: " + str(colours.tolist()))
    return 0


if __name__ == "__main__":
    run_main(main)
