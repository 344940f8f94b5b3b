"""Throughput (images/s) and peak memory, written as JSON.

    python scripts/benchmark.py --config configs/unet_transformer.yaml [--image-size 64] [--batch-size 16]
                                [--steps 20] [--rounds 3] [--out benchmark.json]
    python scripts/benchmark.py --mode eval --config configs/unet_transformer.yaml --eval-sizes 1024 2048
                                [--images 2] [--tile-batch 64] [--variants unet_tiled unet_full_image ...]
    python scripts/benchmark.py --mode deploy --checkpoints RUN_A/checkpoints/best.pt RUN_B/checkpoints/best.pt
                                --eval-sizes 256 1024 --threads 1 2 [--backends torch onnx_fp32 onnx_int8]
                                [--whole-image] [--split test] [--export-dir runs/exports]

--mode train (default): training steps of UNet, UNetTransformer with explicit attention and with sdpa.
--mode eval: segmenting random images of each --eval-sizes at native size, tiled (windows of data.image_size) and
whole-image, in eval mode.
--mode deploy: each trained checkpoint exported to ONNX (fp32 and int8, under --export-dir), then segmenting random
images of each --eval-sizes with PyTorch and onnxruntime at each --threads count (tiled, or --whole-image), and the
mean Dice of every backend on --split with its change against PyTorch.
Each measurement runs in a fresh process; see src/unet_transformer_seg/benchmarking.py.
"""

import argparse
import json
from pathlib import Path

from unet_transformer_seg.benchmarking import (
    DEPLOY_BACKENDS, EVAL_VARIANTS, deployment_benchmark, evaluation_benchmark, training_benchmark,
)
from unet_transformer_seg.cli import run_main
from unet_transformer_seg.config import load_config
from unet_transformer_seg.errors import ConfigError


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", default="train", choices=("train", "eval", "deploy"))
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
    parser.add_argument("--checkpoints", nargs="+", help="deploy: trained checkpoints (files or run folders)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="deploy: CPU thread counts")
    parser.add_argument("--backends", nargs="+", choices=list(DEPLOY_BACKENDS), default=list(DEPLOY_BACKENDS))
    parser.add_argument("--whole-image", action="store_true", help="deploy: one forward pass per image, not tiles")
    parser.add_argument("--split", default="test", choices=("val", "test"), help="deploy: split for the Dice")
    parser.add_argument("--export-dir", default="runs/exports", help="deploy: where the exports are written")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--out", default="benchmark.json")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    for flag in ("steps", "rounds", "images", "tile_batch"):
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.mode == "deploy":
        return deploy(args)
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
    write_summary(args.out, summary)
    return 0


def deploy(args) -> int:
    if not args.checkpoints:
        raise ConfigError("--mode deploy needs --checkpoints")
    if min(args.threads) < 1:
        raise ConfigError(f"--threads must be >= 1, got {min(args.threads)}")
    if "torch" not in args.backends:
        raise ConfigError("--backends must include torch (the Dice change is measured against it)")
    summary = {"mode": "deploy", "image_sizes": args.eval_sizes, "threads": args.threads, "rounds": args.rounds,
               "images": args.images, "way": "whole image" if args.whole_image else "tiled", "split": args.split,
               "tile_batch": args.tile_batch, "tile_overlap": 0.25}
    summary.update(deployment_benchmark(args.checkpoints, Path(args.export_dir), args.eval_sizes, args.threads,
                                        args.backends, args.images, args.tile_batch, args.rounds,
                                        not args.whole_image, args.split))
    write_summary(args.out, summary)
    return 0


def write_summary(out: str, summary: dict) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    run_main(main)
