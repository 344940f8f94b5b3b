"""Throughput (images/s) and peak memory, written as JSON.

    python scripts/benchmark.py --config configs/unet_transformer.yaml [--image-size 64] [--batch-size 16]
                                [--steps 20] [--rounds 3] [--out benchmark.json]
    python scripts/benchmark.py --mode eval --config configs/unet_transformer.yaml --eval-sizes 1024 2048
                                [--images 2] [--tile-batch 64] [--variants unet_tiled unet_full_image ...]

--mode train (default): training steps of UNet, UNetTransformer with explicit attention and with sdpa.
--mode eval: segmenting random images of each --eval-sizes at native size, tiled (windows of data.image_size) and
whole-image, in eval mode. Each measurement runs in a fresh process; see src/unet_transformer_seg/benchmarking.py.
"""

import argparse
import json
from pathlib import Path

from unet_transformer_seg.benchmarking import EVAL_VARIANTS, evaluation_benchmark, training_benchmark
from unet_transformer_seg.cli import run_main
from unet_transformer_seg.config import load_config
from unet_transformer_seg.errors import ConfigError


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", default="train", choices=("train", "eval"))
    parser.add_argument("--config", default="configs/unet_transformer.yaml")
    parser.add_argument("--image-size", type=int, help="override data.image_size (the training / window size)")
    parser.add_argument("--batch-size", type=int, help="override train.batch_size")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed training steps before timing")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per variant")
    parser.add_argument("--eval-sizes", type=int, nargs="+", default=[1024, 2048], help="eval image sides")
    parser.add_argument("--images", type=int, default=2, help="timed images per eval variant and round")
    parser.add_argument("--tile-batch", type=int, default=64, help="windows per forward pass when tiled")
    parser.add_argument("--variants", nargs="+", choices=list(EVAL_VARIANTS), default=list(EVAL_VARIANTS))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--out", default="benchmark.json")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    for flag in ("steps", "rounds", "images", "tile_batch"):
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    overrides = list(args.overrides)
    if args.image_size:
        overrides.append(f"data.image_size={args.image_size}")
    if args.batch_size:
        overrides.append(f"train.batch_size={args.batch_size}")
    cfg = load_config(args.config, overrides)  # validates everything before any process starts
    summary = {"mode": args.mode, "config": args.config, "overrides": overrides, "image_size": cfg.data.image_size,
               "rounds": args.rounds}
    if args.mode == "train":
        summary.update(batch_size=cfg.train.batch_size, steps=args.steps)
        summary.update(training_benchmark(args.config, overrides, args.steps, args.warmup, args.rounds))
    else:
        summary.update(images=args.images, tile_batch=args.tile_batch, tile_overlap=0.25)
        summary.update(evaluation_benchmark(args.config, overrides, args.eval_sizes, args.variants, args.images,
                                            args.tile_batch, args.rounds))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    run_main(main)
