"""Segment image files with a trained checkpoint and write, per image, a mask PNG (class ids) and an overlay PNG.

    python scripts/predict.py --checkpoint runs/RUN/checkpoints/best.pt IMAGE [IMAGE ...] [--out-dir predictions]
                              [--tiles] [--tile-overlap 0.25] [--tile-batch N] [--tta none|flip]
                              [--device auto|cpu|cuda] [--backend torch|onnx] [--threads N]

Images of any size are accepted and predicted at their own size, the way the model was trained (data.resize_mode:
resized to the training size and back, or sliding windows). STEM_mask.png is an indexed PNG whose pixel values are
the class ids and whose palette shows the classes in colour. --device picks where the model runs, whatever device it
was trained on. With --backend onnx, --checkpoint names a directory written by scripts/export.py and onnxruntime
runs its graph on the CPU (same windows, flips and outputs).
"""

import argparse
from pathlib import Path

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.data.image_io import IMAGE_SUFFIXES, read_image, write_label_png, write_png
from unet_transformer_seg.deployment import add_backend_arguments, load_model_for_inference
from unet_transformer_seg.inference import InferenceOptions, Segmenter, overlay


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint file or run folder (--backend onnx: export directory)")
    parser.add_argument("images", nargs="+", help=f"image files ({', '.join(IMAGE_SUFFIXES)})")
    parser.add_argument("--out-dir", default="predictions", help="output folder (default: predictions)")
    InferenceOptions.add_arguments(parser)
    add_backend_arguments(parser)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    options = InferenceOptions.from_arguments(args)
    model, cfg = load_model_for_inference(args.checkpoint, args.backend, args.threads, options.device)
    segmenter = Segmenter(model, cfg, options)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for image_path in map(Path, args.images):
        image = read_image(image_path, cfg.data.in_channels)  # [C, H, W]
        labels = segmenter.segment(image)  # [H, W]
        mask_path = out_dir / f"{image_path.stem}_mask.png"
        overlay_path = out_dir / f"{image_path.stem}_overlay.png"
        write_label_png(mask_path, labels, cfg.data.num_classes)
        write_png(overlay_path, overlay(image, labels, cfg.data.num_classes))
        counts = {int(k): int(v) for k, v in zip(*labels.unique(return_counts=True))}
        print(f"{image_path}: classes {counts} -> {mask_path}, {overlay_path}")
    return 0


if __name__ == "__main__":
    run_main(main)
