"""Evaluate a checkpoint on a split of its own data (or of a folder dataset given by --data-root).

    python scripts/eval.py --checkpoint runs/RUN/checkpoints/best.pt [--split val|test] [--out metrics.json]
                           [--data-root ROOT] [--save-predictions DIR] [--per-image FILE.csv]
                           [--tiles] [--tile-overlap 0.25] [--tile-batch N] [--tta none|flip] [--batch-size N]

Metrics are computed at each image's original size (see docs/results.md for the conventions): pooled mean_dice /
mean_iou / pixel_accuracy / per_class_*, and per image mean_dice_per_image / mean_iou_per_image / hd95. Prints the
metrics as JSON; --out also writes them to a file; --save-predictions writes STEM.png (indexed PNG: pixel = class
id, palette = class colours) and STEM_overlay.png per image; --per-image writes one CSV row per image. The loss is
train.loss without class weights.
"""

import argparse
import json
from pathlib import Path

import _bootstrap  # noqa: F401

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.data.image_io import write_label_png, write_png
from unet_transformer_seg.errors import ConfigError
from unet_transformer_seg.inference import TTA_CHOICES, InferenceOptions, load_trained_model, overlay
from unet_transformer_seg.losses import build_loss
from unet_transformer_seg.training.evaluate import evaluate, evaluation_split
from unet_transformer_seg.training.loop import resolve_device
from unet_transformer_seg.training.run_folder import write_csv, write_json

METRIC_KEYS = ("mean_dice", "mean_iou", "pixel_accuracy", "per_class_dice", "per_class_iou", "mean_dice_per_image",
               "mean_iou_per_image", "hd95", "per_class_hd95", "num_images", "loss")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint file or run folder")
    parser.add_argument("--data-root", help="evaluate on this folder dataset instead of the checkpoint's data")
    parser.add_argument("--split", default="val", choices=("val", "test"))
    parser.add_argument("--out", help="write the metrics JSON here")
    parser.add_argument("--save-predictions", metavar="DIR", help="write STEM.png id masks and STEM_overlay.png here")
    parser.add_argument("--per-image", metavar="FILE.csv", help="write per-image pixel accuracy, Dice, IoU, HD95 here")
    parser.add_argument("--tiles", action="store_true", help="sliding windows at native size even in resize mode")
    parser.add_argument("--tile-overlap", type=float, default=0.25, help="overlap of neighbouring windows, [0, 1)")
    parser.add_argument("--tile-batch", type=int, help="windows per forward pass (default: train.eval_batch_size)")
    parser.add_argument("--tta", default="none", choices=TTA_CHOICES, help="flip: average over h/v flips")
    parser.add_argument("--batch-size", type=int, help="images per evaluation batch (default: train.eval_batch_size)")
    return parser.parse_args(argv)


def prediction_writer(out_dir: Path, dataset, num_classes: int):
    """Callback writing STEM.png (class ids) and STEM_overlay.png for every prediction."""
    out_dir.mkdir(parents=True, exist_ok=True)

    def write(index, labels):
        stem = dataset.name(index)
        write_label_png(out_dir / f"{stem}.png", labels, num_classes)
        write_png(out_dir / f"{stem}_overlay.png", overlay(dataset.base[index][0], labels, num_classes))

    return write


def main() -> int:
    args = parse_args()
    options = InferenceOptions(args.tiles, args.tile_overlap, args.tile_batch, args.tta)
    model, cfg = load_trained_model(args.checkpoint)
    model.to(resolve_device(cfg.run.device))
    if args.batch_size is not None:
        if args.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
        cfg.train.eval_batch_size = args.batch_size
    dataset = evaluation_split(cfg, args.split, options, root=args.data_root)
    writer = prediction_writer(Path(args.save_predictions), dataset, cfg.data.num_classes) \
        if args.save_predictions else None
    loss_fn = build_loss(cfg.train.loss, dice_include_background=cfg.train.dice_include_background)
    result = evaluate(model, dataset, cfg, loss_fn.to(next(model.parameters()).device), options=options,
                      prediction_callback=writer, keep_rows=bool(args.per_image))
    metrics = {key: result.scores[key] for key in METRIC_KEYS}
    metrics["inference"] = {"resize_mode": cfg.data.resize_mode, "windows": not dataset.transform.resize_for_eval,
                            "tile_overlap": options.tile_overlap, "tta": options.tta}
    if args.per_image:
        columns = ["stem", "height", "width", "pixel_accuracy"] + [
            f"{metric}_{class_id}" for class_id in range(cfg.data.num_classes) for metric in ("dice", "iou", "hd95")]
        write_csv(Path(args.per_image), result.rows, columns)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_json(Path(args.out), metrics)
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    run_main(main)
