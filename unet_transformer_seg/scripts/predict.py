"""Segment image files with a trained checkpoint and write, per image, a mask PNG (class ids) and an overlay PNG.

    python scripts/predict.py --checkpoint runs/RUN/checkpoints/best.pt IMAGE [IMAGE ...] [--out-dir predictions]

Images of any size are accepted: they are resized to the training size and the prediction is resized back.
"""

import argparse
from pathlib import Path

import _bootstrap  # noqa: F401

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.data.image_io import read_image, write_png
from unet_transformer_seg.inference import load_trained_model, overlay, segment_image


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint file or run folder")
    parser.add_argument("images", nargs="+", help="image files (PNG or JPEG)")
    parser.add_argument("--out-dir", default="predictions", help="output folder (default: predictions)")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    model, cfg = load_trained_model(args.checkpoint)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for image_path in map(Path, args.images):
        image = read_image(image_path, cfg.data.in_channels)  # [C, H, W]
        labels = segment_image(model, cfg, image)  # [H, W]
        mask_path = out_dir / f"{image_path.stem}_mask.png"
        overlay_path = out_dir / f"{image_path.stem}_overlay.png"
        write_png(mask_path, labels.numpy().astype("uint8"))
        write_png(overlay_path, overlay(image, labels, cfg.data.num_classes))
        counts = {int(k): int(v) for k, v in zip(*labels.unique(return_counts=True))}
        print(f"{image_path}: classes {counts} -> {mask_path}, {overlay_path}")
    return 0


if __name__ == "__main__":
    run_main(main)
