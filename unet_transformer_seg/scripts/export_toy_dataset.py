"""Write the toy shapes set in the folder format read by `data.kind: folder`.

    python scripts/export_toy_dataset.py --out data/toy_folder [--config configs/quick.yaml]
                                         [--train-size N] [--val-size N] [--test-size N] [--palette]
                                         [--sizes 97x211,640x480,1500x1000] [--shape-size 64]

Creates OUT/{train,val,test}/images/toy_NNNNNN.png and OUT/{train,val,test}/masks/toy_NNNNNN.png. Masks are
single-channel class ids, or with --palette RGB colours (the palette to put in data.palette is printed). With
--sizes the images take the listed HEIGHTxWIDTH sizes in turn (a set of mixed sizes and aspect ratios); otherwise
they are data.image_size squares. --shape-size fixes the shapes' size in pixels (as on a square image of that side),
so that larger images hold smaller-looking objects, as in photographs and scans. Sizes, seed, image size and classes
come from the config's data/run sections unless overridden here.
"""

import argparse
from pathlib import Path

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.config import load_config
from unet_transformer_seg.data.toy_shapes import export_toy_folder
from unet_transformer_seg.errors import ConfigError
from unet_transformer_seg.labels import class_colours


def parse_sizes(text):
    """'97x211,640x480' -> [(97, 211), (640, 480)]."""
    try:
        sizes = [tuple(int(side) for side in item.lower().split("x")) for item in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(len(size) != 2 or min(size) < 8 for size in sizes):
        raise ConfigError(f"--sizes must look like 97x211,640x480 (each side >= 8), got {text!r}")
    return sizes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="dataset root to create")
    parser.add_argument("--config", help="config whose data/run sections describe the toy set (default: defaults)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--train-size", type=int)
    parser.add_argument("--val-size", type=int)
    parser.add_argument("--test-size", type=int)
    parser.add_argument("--palette", action="store_true", help="write RGB colour masks instead of class ids")
    parser.add_argument("--sizes", help="HEIGHTxWIDTH,... image sizes used in turn (default: image_size squares)")
    parser.add_argument("--shape-size", type=int, help="shapes as large in pixels as on a SHAPE_SIZE square image "
                        "(default: they scale with each image)")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    sizes = parse_sizes(args.sizes) if args.sizes else None
    if args.shape_size is not None and args.shape_size < 8:
        raise ConfigError(f"--shape-size must be >= 8, got {args.shape_size}")
    overrides = list(args.overrides) + ["data.kind=toy"]
    for split in ("train", "val", "test"):
        size = getattr(args, f"{split}_size")
        if size is not None:
            overrides.append(f"data.{split}_size={size}")
    cfg = load_config(args.config, overrides)
    counts = export_toy_folder(cfg, Path(args.out), sizes, args.shape_size, colour_masks=args.palette)
    for split, count in counts.items():
        print(f"{split}: {count} images -> {Path(args.out) / split}")
    if args.palette:
        print("data.palette: " + str(class_colours(cfg.data.num_classes).tolist()))
    return 0


if __name__ == "__main__":
    run_main(main)
