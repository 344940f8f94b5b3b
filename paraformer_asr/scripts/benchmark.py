"""Benchmarks: the vectorised CIF against the plain-loop reference (tests/asr_reference.py), and
optionally decoding latency of a checkpoint.

    python scripts/benchmark.py [--batch 16 --frames 500 --dim 256 --repeats 5] [--checkpoint CKPT] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from paraformer_asr.cli import run_main  # noqa: E402


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def benchmark_cif(batch: int, frames: int, dim: int, repeats: int, loop_repeats: int) -> dict:
    import torch
    from asr_reference import loop_cif

    from paraformer_asr.models.cif import cif_integrate, inference_token_count

    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(batch, frames, dim, generator=gen)
    alphas = torch.rand(batch, frames, generator=gen) * 0.6  # ~0.3 tokens a frame
    num_tokens = inference_token_count(alphas)
    vectorised = best_time(lambda: cif_integrate(hidden, alphas, num_tokens), repeats)
    loop = best_time(lambda: loop_cif(hidden, alphas, num_tokens), loop_repeats)
    embeddings, _, _ = cif_integrate(hidden, alphas, num_tokens)
    reference, _ = loop_cif(hidden, alphas, num_tokens)
    max_diff = max(float((embeddings[b, : len(ref)] - torch.stack(ref).float()).abs().max())
                   for b, ref in enumerate(reference) if ref)
    return {"batch": batch, "frames": frames, "dim": dim, "tokens_mean": float(num_tokens.float().mean()),
            "vectorised_ms": vectorised * 1000, "loop_ms": loop * 1000, "speedup": loop / vectorised,
            "max_abs_diff": max_diff, "torch_threads": torch.get_num_threads()}


def benchmark_decoding(checkpoint: str, repeats: int) -> dict:
    import torch

    from paraformer_asr.data.batching import Collator
    from paraformer_asr.data.toy import ToySeq2SeqDataset
    from paraformer_asr.inference import load_trained_model

    loaded = load_trained_model(checkpoint, torch.device("cpu"))
    if loaded.cfg.data.kind != "toy":
        raise SystemExit("decoding benchmark uses the toy validation set; give a toy checkpoint")
    toy = ToySeq2SeqDataset.from_config(loaded.cfg.data.toy, "val", loaded.tokenizer)
    collate = Collator(loaded.tokenizer.pad_id)
    result = {}
    for size in (1, 16):
        batch = collate([toy[i] for i in range(size)])
        for method in ("greedy", "beam"):
            if method == "greedy":
                run = lambda: loaded.model.greedy_decode(batch.features, batch.feat_mask)  # noqa: E731
            else:
                run = lambda: loaded.model.beam_search(batch.features, batch.feat_mask, 4)  # noqa: E731
            seconds = best_time(run, repeats)
            result[f"{method}_batch{size}_ms_per_utt"] = seconds * 1000 / size
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--frames", type=int, default=500)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loop-repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch default)")
    parser.add_argument("--checkpoint", help="also time greedy/beam decoding of this toy checkpoint")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    results = {"cif": benchmark_cif(args.batch, args.frames, args.dim, args.repeats, args.loop_repeats)}
    if args.checkpoint:
        results["decoding"] = benchmark_decoding(args.checkpoint, args.repeats)
    text = json.dumps(results, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
