"""Throughput and peak memory, measured the way `scripts/benchmark.py` reports them.

- Training: forward + backward + AdamW step on one fixed batch of the config's training data, for UNet and
  UNetTransformer with explicit and with `sdpa` attention.
- Evaluation: segmenting random images of a large size (e.g. 1024x1024, 2048x2048) with a model in eval mode,
  tiled (sliding windows of data.image_size, `tiling.py`) against the whole image in one forward pass.
- Deployment: a trained checkpoint run by PyTorch, by onnxruntime on its fp32 export and on its int8 export
  (`deployment.py`): images/s at given sizes and thread counts, and mean Dice on a split with its change against
  PyTorch and the share of pixels labelled alike.

Every measurement runs in a fresh process (spawn), so peak memory is per variant: on CUDA the peak allocated by
torch, on CPU the process's peak resident set size (ru_maxrss) and its growth over the footprint just before the
timed work. Variants are measured in interleaved rounds; the reported throughput is the median over rounds.
"""

from __future__ import annotations

import copy
import multiprocessing
import resource
import statistics
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import torch

from .config import load_config
from .data.datasets import build_split
from .deployment import export_onnx, load_model_for_inference
from .inference import InferenceOptions, Segmenter, load_trained_model
from .labels import logits_to_labels
from .losses import build_loss
from .models import build_model
from .runtime import apply_num_threads, resolve_device, seed_everything
from .training.evaluate import evaluate, evaluation_split

TRAIN_VARIANTS = {
    "unet": ["model.type=unet"],
    "unet_transformer_explicit": ["model.type=unet_transformer", "model.attention=explicit"],
    "unet_transformer_sdpa": ["model.type=unet_transformer", "model.attention=sdpa"],
}
# name -> (config overrides, tiled?)
EVAL_VARIANTS = {
    "unet_tiled": (["model.type=unet"], True),
    "unet_full_image": (["model.type=unet"], False),
    "unet_transformer_sdpa_tiled": (["model.type=unet_transformer", "model.attention=sdpa"], True),
    "unet_transformer_sdpa_full_image": (["model.type=unet_transformer", "model.attention=sdpa"], False),
}
# deployment benchmark backend -> load_model_for_inference backend
DEPLOY_BACKENDS = {"torch": "torch", "onnx_fp32": "onnx", "onnx_int8": "onnx"}


def _memory_report(device: torch.device, rss_before_kib: int) -> Dict[str, float]:
    rss_peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = {"peak_rss_mib": rss_peak_kib / 1024, "rss_growth_mib": (rss_peak_kib - rss_before_kib) / 1024}
    if device.type == "cuda":
        report["peak_cuda_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return report


def _setup(config_path, overrides):
    cfg = load_config(config_path, overrides)
    apply_num_threads(cfg.run.num_threads)
    seed_everything(cfg.run.seed)
    return cfg, resolve_device(cfg.run.device)


def _timed(device: torch.device, work: Callable[[], None], repeats: int) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        work()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def measure_training(config_path, overrides: Sequence[str], steps: int, warmup: int) -> Dict[str, object]:
    """Training images/s and memory of one variant (runs in the calling process)."""
    cfg, device = _setup(config_path, overrides)
    dataset = build_split(cfg, "train", train=True)
    batch = [dataset[i] for i in range(cfg.train.batch_size)]
    images = torch.stack([item[0] for item in batch]).to(device)  # [B, C, S, S]
    masks = torch.stack([item[1] for item in batch]).to(device)  # [B, S, S]
    model = build_model(cfg).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    loss_fn = build_loss(cfg.train.loss, deep_supervision=cfg.model.deep_supervision).to(device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), masks).backward()
        optimizer.step()

    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(warmup):
        step()
    elapsed = _timed(device, step, steps)
    return {"images_per_s": steps * cfg.train.batch_size / elapsed,
            "parameters": sum(p.numel() for p in model.parameters()), "device": str(device),
            "threads": torch.get_num_threads(), **_memory_report(device, rss_before_kib)}


def measure_evaluation(config_path, overrides: Sequence[str], tiled: bool, image_size: int, num_images: int,
                       tile_batch: int) -> Dict[str, object]:
    """Evaluation images/s and memory of one variant on random image_size x image_size images: labels at native
    size, tiled (sliding windows, overlap 0.25) or the whole image in one forward pass."""
    cfg, device = _setup(config_path, overrides)
    model = build_model(cfg).to(device).eval()
    return {**_time_segmentation(model, cfg, device, tiled, image_size, num_images, tile_batch),
            "parameters": sum(p.numel() for p in model.parameters())}


def _time_segmentation(model: torch.nn.Module, cfg, device: torch.device, tiled: bool, image_size: int,
                       num_images: int, tile_batch: int) -> Dict[str, object]:
    """images/s and memory of segmenting random image_size x image_size images with `model` (PyTorch or exported):
    tiled through the Segmenter, or the whole image in one forward pass."""
    cfg = copy.deepcopy(cfg)
    cfg.data.resize_mode = "pad"  # windows at native size (as a model trained on windows is predicted), whatever the
    # model was trained with: the speed of the sliding-window path, not of a resize to the training size
    generator = torch.Generator().manual_seed(cfg.run.seed)
    images = torch.randn(num_images, cfg.data.in_channels, image_size, image_size, generator=generator)
    segmenter = Segmenter(model, cfg, InferenceOptions(tile_batch=tile_batch))

    @torch.no_grad()
    def segment(image: torch.Tensor) -> torch.Tensor:
        if tiled:
            (_, logits), = segmenter.native_logits(image[None], (image_size, image_size))
        else:
            logits = model(image[None].to(device))  # [1, K, N, N]
        return logits_to_labels(logits)

    with torch.no_grad():  # warm-up on one window
        model(torch.zeros(1, cfg.data.in_channels, cfg.data.image_size, cfg.data.image_size, device=device))
    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    remaining = iter(images)
    elapsed = _timed(device, lambda: segment(next(remaining)), num_images)
    return {"images_per_s": num_images / elapsed, "seconds_per_image": elapsed / num_images, "device": str(device),
            "threads": torch.get_num_threads(), **_memory_report(device, rss_before_kib)}


def measure_deployment(backend: str, model_path: str, tiled: bool, image_size: int, num_images: int,
                       tile_batch: int, num_threads: int) -> Dict[str, object]:
    """As measure_evaluation, for a trained model run by `backend`: torch (a checkpoint) or onnx_fp32 / onnx_int8
    (an export directory), with num_threads torch and onnxruntime intra-op threads."""
    model, cfg = load_model_for_inference(model_path, DEPLOY_BACKENDS[backend], num_threads)
    seed_everything(cfg.run.seed)
    return _time_segmentation(model, cfg, torch.device("cpu"), tiled, image_size, num_images, tile_batch)


def measure_deployed_quality(model_paths: Dict[str, str], split: str, num_threads: int) -> Dict[str, object]:
    """Per backend (name -> checkpoint or export directory, "torch" first): pooled mean_dice on the split of the
    model's data, its change against torch, and the share of pixels labelled as torch labels them."""
    torch_labels: Dict[int, torch.Tensor] = {}
    report = {}
    for backend, path in model_paths.items():
        model, cfg = load_model_for_inference(path, DEPLOY_BACKENDS[backend], num_threads)
        cfg.train.num_workers = 0
        labels: Dict[int, torch.Tensor] = {}
        scores = evaluate(model, evaluation_split(cfg, split), cfg,
                          prediction_callback=labels.__setitem__).scores  # labels: index -> [H0, W0]
        if backend == "torch":
            torch_labels = labels
        agreeing = sum(int((labels[i] == torch_labels[i]).sum()) for i in labels)
        report[backend] = {"mean_dice": scores["mean_dice"], "mean_iou": scores["mean_iou"],
                           "pixel_accuracy": scores["pixel_accuracy"],
                           "label_agreement_with_torch": agreeing / sum(v.numel() for v in labels.values())}
    for backend in report:
        report[backend]["mean_dice_change"] = report[backend]["mean_dice"] - report["torch"]["mean_dice"]
    return report


def _child(queue, function, args):
    queue.put(function(*args))


def run_isolated(function: Callable[..., Dict[str, object]], *args) -> Dict[str, object]:
    """Run function(*args) in a fresh spawned process and return its result."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(queue, function, args))
    process.start()
    result = queue.get()
    process.join()
    return result


def summarise(runs: Dict[str, List[Dict[str, object]]]) -> Dict[str, Dict[str, object]]:
    """Per variant: median images/s over rounds, every round's images/s, the largest memory figures."""
    summary = {}
    for name, results in runs.items():
        first = results[0]
        summary[name] = {
            "images_per_s": statistics.median(r["images_per_s"] for r in results),
            "images_per_s_all_rounds": [round(r["images_per_s"], 4) for r in results],
            **{key: first[key] for key in ("parameters", "device", "threads") if key in first},
            **{key: max(r[key] for r in results) for key in first if key.endswith("_mib")},
        }
    return summary


def training_benchmark(config_path, overrides: Sequence[str], steps: int, warmup: int,
                       rounds: int) -> Dict[str, object]:
    runs = {name: [] for name in TRAIN_VARIANTS}
    for _ in range(rounds):
        for name, variant in TRAIN_VARIANTS.items():
            runs[name].append(run_isolated(measure_training, config_path, list(overrides) + variant, steps, warmup))
    models = summarise(runs)
    return {"models": models, "sdpa_over_explicit_throughput": (
        models["unet_transformer_sdpa"]["images_per_s"] / models["unet_transformer_explicit"]["images_per_s"])}


def evaluation_benchmark(config_path, overrides: Sequence[str], image_sizes: Sequence[int], variants: Sequence[str],
                         num_images: int, tile_batch: int, rounds: int) -> Dict[str, object]:
    results = {}
    for image_size in image_sizes:
        runs = {name: [] for name in variants}
        for _ in range(rounds):
            for name in variants:
                variant, tiled = EVAL_VARIANTS[name]
                runs[name].append(run_isolated(measure_evaluation, config_path, list(overrides) + variant, tiled,
                                               image_size, num_images, tile_batch))
        results[str(image_size)] = summarise(runs)
    return {"image_sizes": results}


def deployment_benchmark(checkpoints: Sequence[str], export_root: Path, image_sizes: Sequence[int],
                         thread_counts: Sequence[int], backends: Sequence[str], num_images: int, tile_batch: int,
                         rounds: int, tiled: bool, split: str) -> Dict[str, object]:
    """Per checkpoint: export it (fp32 and int8 under export_root/<model kind>/), then images/s of every backend at
    every size and thread count (interleaved rounds, fresh processes, median) and the Dice change on `split`."""
    results = {}
    for checkpoint in checkpoints:
        kind = load_trained_model(checkpoint)[1].model.type
        paths = {"torch": str(checkpoint)}
        for backend, quantize in (("onnx_fp32", None), ("onnx_int8", "int8")):
            if backend in backends:
                paths[backend] = str(export_root / kind / backend)
                export_onnx(checkpoint, paths[backend], quantize)
        speed = {}
        for image_size in image_sizes:
            for threads in thread_counts:
                runs = {name: [] for name in paths}
                for _ in range(rounds):
                    for name, path in paths.items():
                        runs[name].append(run_isolated(measure_deployment, name, path, tiled, image_size, num_images,
                                                       tile_batch, threads))
                speed.setdefault(str(image_size), {})[str(threads)] = summarise(runs)
        quality = run_isolated(measure_deployed_quality, paths, split, min(thread_counts))
        results[kind] = {"checkpoint": str(checkpoint), "exports": paths, "quality": quality,
                         "images_per_s": speed}
    return {"models": results}
