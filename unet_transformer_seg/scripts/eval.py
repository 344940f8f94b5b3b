"""Evaluate a checkpoint, or an ensemble of several, on a split of its own data (or of a folder dataset given by
--data-root).

    python scripts/eval.py --checkpoint runs/RUN/checkpoints/best.pt [MORE ...] [--split val|test] [--out metrics.json]
                           [--data-root ROOT] [--save-predictions DIR] [--per-image FILE.csv]
                           [--confusion-plot FILE.png] [--tile-overlap 0.25] [--tile-batch N] [--tta none|flip]
                           [--batch-size N] [--device auto|cpu|cuda] [--backend torch|onnx] [--threads N]

Metrics are computed at each image's original size (see docs/results.md for the conventions): pooled mean_dice /
mean_iou / pixel_accuracy / per_class_*, and per image mean_dice_per_image / mean_iou_per_image / hd95; the same
per class by name under per_class, and the pooled confusion_matrix (pixel counts, rows truth, columns prediction).
Prints the metrics as JSON; --out also writes them to a file; --save-predictions writes STEM.png (indexed PNG: pixel
= class id, palette = class colours) and STEM_overlay.png per image; --per-image writes one CSV row per image
(columns dice_NAME, iou_NAME, hd95_NAME per class name); --confusion-plot draws the row-normalised confusion matrix.
The loss is train.loss without class weights. Several --checkpoint values evaluate their ensemble: the mean of the
members' class probabilities (members trained on different folds are refused on --split val). --device picks where
the model runs, whatever device it was trained on. With --backend onnx, --checkpoint names directories written by
scripts/export.py (their export.json holds the config) and onnxruntime runs the graphs on the CPU.
"""

import argparse
import json
from pathlib import Path

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.deployment import add_backend_arguments
from unet_transformer_seg.ensemble import check_evaluation_split, load_ensemble
from unet_transformer_seg.errors import ConfigError
from unet_transformer_seg.inference import InferenceOptions, model_device
from unet_transformer_seg.labels import class_names
from unet_transformer_seg.training.evaluate import (
    evaluate, evaluation_split, per_class_report, prediction_writer, write_per_image_csv,
)
from unet_transformer_seg.training.plots import plot_confusion_matrix
from unet_transformer_seg.training.run_folder import write_json

METRIC_KEYS = ("mean_dice", "mean_iou", "pixel_accuracy", "per_class_dice", "per_class_iou", "mean_dice_per_image",
               "mean_iou_per_image", "hd95", "per_class_hd95", "num_images", "loss")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, nargs="+",
                        help="checkpoint file or run folder (--backend onnx: export directory); several: their "
                             "ensemble")
    parser.add_argument("--data-root", help="evaluate on this folder dataset instead of the checkpoint's data")
    parser.add_argument("--split", default="val", choices=("val", "test"))
    parser.add_argument("--out", help="write the metrics JSON here")
    parser.add_argument("--save-predictions", metavar="DIR", help="write STEM.png id masks and STEM_overlay.png here")
    parser.add_argument("--per-image", metavar="FILE.csv", help="write per-image pixel accuracy, Dice, IoU, HD95 here")
    parser.add_argument("--confusion-plot", metavar="FILE.png", help="draw the row-normalised confusion matrix here")
    InferenceOptions.add_arguments(parser)
    add_backend_arguments(parser)
    parser.add_argument("--batch-size", type=int, help="images per evaluation batch (default: train.eval_batch_size)")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    options = InferenceOptions.from_arguments(args)
    model, cfg = load_ensemble(args.checkpoint, args.backend, args.threads, options.device)
    check_evaluation_split(model, args.split)
    device = model_device(model)
    if args.batch_size is not None:
        if args.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
        cfg.train.eval_batch_size = args.batch_size
    dataset = evaluation_split(cfg, args.split, root=args.data_root)
    writer = None
    if args.save_predictions:
        writer = prediction_writer(Path(args.save_predictions), dataset, cfg.data.num_classes)
    result = evaluate(model, dataset, cfg, options=options, prediction_callback=writer,
                      keep_rows=bool(args.per_image))
    names = class_names(cfg.data)
    metrics = {key: result.scores[key] for key in METRIC_KEYS}
    metrics["class_names"] = names
    metrics["per_class"] = per_class_report(result.scores, names)
    metrics["confusion_matrix"] = result.scores["confusion_matrix"]
    metrics["inference"] = {"checkpoints": args.checkpoint, "resize_mode": cfg.data.resize_mode,
                            "windows": not dataset.transform.resize_for_eval, "tile_overlap": options.tile_overlap,
                            "tta": options.tta, "device": str(device)}
    if args.per_image:
        write_per_image_csv(Path(args.per_image), result.rows, names)
    if args.confusion_plot:
        Path(args.confusion_plot).parent.mkdir(parents=True, exist_ok=True)
        plot_confusion_matrix(result.scores["confusion_matrix"], names, Path(args.confusion_plot))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_json(Path(args.out), metrics)
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    run_main(main)
