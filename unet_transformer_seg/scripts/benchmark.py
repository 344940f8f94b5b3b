"""Training throughput (images/s) and peak memory of UNet, UNetTransformer (explicit attention) and UNetTransformer
(scaled_dot_product_attention), at one image size, written as JSON.

    python scripts/benchmark.py --config configs/unet_transformer.yaml [--image-size 64] [--batch-size 16]
                                [--steps 20] [--rounds 3] [--out benchmark.json]

Each measurement runs in a fresh process, so peak memory is per variant: on CUDA the peak allocated by torch, on CPU
the process's peak resident set size (ru_maxrss) and its growth over the footprint before the first step.
Variants are measured in interleaved rounds; the reported throughput is the median over rounds.
"""

import argparse
import json
import multiprocessing
import resource
import statistics
import time
from pathlib import Path

import _bootstrap  # noqa: F401

from unet_transformer_seg.cli import run_main

VARIANTS = {
    "unet": ["model.type=unet"],
    "unet_transformer_explicit": ["model.type=unet_transformer", "model.attention=explicit"],
    "unet_transformer_sdpa": ["model.type=unet_transformer", "model.attention=sdpa"],
}


def measure(config_path, overrides, steps, warmup, queue):
    import torch

    from unet_transformer_seg.config import load_config
    from unet_transformer_seg.data.datasets import build_split
    from unet_transformer_seg.losses import build_loss
    from unet_transformer_seg.models import build_model
    from unet_transformer_seg.training.loop import resolve_device, seed_everything

    cfg = load_config(config_path, overrides)
    if cfg.run.num_threads is not None:
        torch.set_num_threads(cfg.run.num_threads)
    seed_everything(cfg.run.seed)
    device = resolve_device(cfg.run.device)
    dataset = build_split(cfg, "train", train=True)
    batch = [dataset[i] for i in range(cfg.train.batch_size)]
    images = torch.stack([item[0] for item in batch]).to(device)  # [B, C, S, S]
    masks = torch.stack([item[1] for item in batch]).to(device)  # [B, S, S]
    model = build_model(cfg).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    loss_fn = build_loss(cfg.train.loss)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), masks).backward()
        optimizer.step()

    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    result = {
        "images_per_s": steps * cfg.train.batch_size / elapsed,
        "parameters": sum(p.numel() for p in model.parameters()),
        "device": str(device),
        "threads": torch.get_num_threads(),
    }
    rss_peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result["peak_rss_mib"] = rss_peak_kib / 1024
    result["rss_growth_mib"] = (rss_peak_kib - rss_before_kib) / 1024
    if device.type == "cuda":
        result["peak_cuda_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
    queue.put(result)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/unet_transformer.yaml")
    parser.add_argument("--image-size", type=int, help="override data.image_size")
    parser.add_argument("--batch-size", type=int, help="override train.batch_size")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per variant")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--out", default="benchmark.json")
    return parser.parse_args(argv)


def main() -> int:
    from unet_transformer_seg.config import load_config

    args = parse_args()
    overrides = list(args.overrides)
    if args.image_size:
        overrides.append(f"data.image_size={args.image_size}")
    if args.batch_size:
        overrides.append(f"train.batch_size={args.batch_size}")
    cfg = load_config(args.config, overrides)  # validates everything before any process starts
    context = multiprocessing.get_context("spawn")
    runs = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, variant in VARIANTS.items():
            queue = context.Queue()
            process = context.Process(
                target=measure, args=(args.config, overrides + variant, args.steps, args.warmup, queue)
            )
            process.start()
            runs[name].append(queue.get())
            process.join()
    summary = {
        "config": args.config,
        "overrides": overrides,
        "image_size": cfg.data.image_size,
        "batch_size": cfg.train.batch_size,
        "steps": args.steps,
        "rounds": args.rounds,
        "models": {},
    }
    for name, results in runs.items():
        summary["models"][name] = {
            "images_per_s": statistics.median(r["images_per_s"] for r in results),
            "images_per_s_all_rounds": [round(r["images_per_s"], 2) for r in results],
            "parameters": results[0]["parameters"],
            "device": results[0]["device"],
            "threads": results[0]["threads"],
            **{key: max(r[key] for r in results) for key in results[0] if key.endswith("_mib")},
        }
    models = summary["models"]
    summary["sdpa_over_explicit_throughput"] = (
        models["unet_transformer_sdpa"]["images_per_s"] / models["unet_transformer_explicit"]["images_per_s"]
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    run_main(main)
