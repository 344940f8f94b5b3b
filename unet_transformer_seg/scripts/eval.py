"""Evaluate a checkpoint on a split of its own data (or of a folder dataset given by --data-root).

    python scripts/eval.py --checkpoint runs/RUN/checkpoints/best.pt [--split val|test] [--out metrics.json]
                           [--data-root ROOT] [--save-predictions DIR]

Metrics are computed at each image's original size. Prints the metrics as JSON; --out also writes them to a file;
--save-predictions writes one PNG of predicted class ids per image, named by the image's stem.
"""

import argparse
import json
from pathlib import Path

import _bootstrap  # noqa: F401

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.data.datasets import build_split
from unet_transformer_seg.data.image_io import write_png
from unet_transformer_seg.inference import load_trained_model
from unet_transformer_seg.losses import build_loss
from unet_transformer_seg.training.evaluate import evaluate
from unet_transformer_seg.training.loop import resolve_device
from unet_transformer_seg.training.run_folder import write_json

METRIC_KEYS = ("mean_dice", "mean_iou", "pixel_accuracy", "per_class_dice", "per_class_iou", "num_images", "loss")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint file or run folder")
    parser.add_argument("--data-root", help="evaluate on this folder dataset instead of the checkpoint's data")
    parser.add_argument("--split", default="val", choices=("val", "test"))
    parser.add_argument("--out", help="write the metrics JSON here")
    parser.add_argument("--save-predictions", metavar="DIR", help="write predicted masks (class ids) as PNGs here")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    model, cfg = load_trained_model(args.checkpoint)
    device = resolve_device(cfg.run.device)
    model.to(device)
    dataset = build_split(cfg, args.split, train=False, root=args.data_root)
    callback = None
    if args.save_predictions:
        out_dir = Path(args.save_predictions)
        out_dir.mkdir(parents=True, exist_ok=True)

        def callback(index, labels):
            write_png(out_dir / f"{dataset.name(index)}.png", labels.numpy().astype("uint8"))

    scores = evaluate(model, dataset, cfg, device, build_loss(cfg.train.loss), prediction_callback=callback)
    metrics = {key: scores[key] for key in METRIC_KEYS}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_json(Path(args.out), metrics)
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    run_main(main)
