"""Benchmarks.

1. The vectorised CIF against the plain-loop reference (tests/asr_reference.py) at B x T x D
   (default 16 x 500 x 256): times, speed-up, largest difference.
2. With --checkpoints: decoding of one or more trained models (e.g. a Paraformer and the
   autoregressive baseline) on the same evaluation set, in one run: CER, RTF and latency per
   utterance for greedy and beam decoding at each batch size (default 1 and 16), and the greedy
   speed-up of every model over the slowest one at batch 1. Each measurement is repeated --rounds
   times, the models taking turns, and the median round is reported.

    python scripts/benchmark.py [--batch 16 --frames 500 --dim 256]
    python scripts/benchmark.py --skip-cif --checkpoints RUN_A RUN_B [--split test | --manifest FILE.jsonl]
        [--max-utterances 200] [--batch-sizes 1 16] [--beam-size 4] [--rounds 3] [--device cpu|cuda]
        [--out FILE.json] [--table FILE.md]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from paraformer_asr.cli import run_main  # noqa: E402
from paraformer_asr.errors import ConfigError  # noqa: E402


def device_name(device: str) -> str:
    """The GPU's name, or the CPU model from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


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


def benchmark_models(checkpoints: list[str], split: str, manifest: str | None, max_utterances: int,
                     batch_sizes: list[int], beam_size: int, device_name: str, rounds: int) -> list[dict]:
    """One row per (model, batch size, decoding method), all on the same utterances.

    Every measurement is repeated ``rounds`` times; the rounds interleave the models, so a slow spell
    of a shared machine hits all of them alike. A row is the round with the median decoding time,
    plus ``rounds`` and ``round_latencies_ms`` (every round's latency per utterance).
    """
    import torch

    from paraformer_asr.data.batching import Collator
    from paraformer_asr.decode.speed import benchmark_decoding
    from paraformer_asr.inference import evaluation_dataset, load_trained_model
    from paraformer_asr.models.factory import count_parameters

    device = torch.device(device_name)
    cases = []  # (row header, model, tokenizer, batches, method) in row order
    for checkpoint in checkpoints:
        loaded = load_trained_model(checkpoint, device)
        dataset = evaluation_dataset(loaded, split, manifest)
        items = [dataset[i] for i in range(min(max_utterances, len(dataset)))]
        collate = Collator(loaded.tokenizer.pad_id)
        header = {"model_type": loaded.cfg.model.type, "checkpoint": str(loaded.path),
                  "parameters": count_parameters(loaded.model), "device": str(device)}
        for size in batch_sizes:
            batches = [collate(items[i:i + size]) for i in range(0, len(items), size)]
            cases += [(header, loaded.model, loaded.tokenizer, batches, method) for method in ("greedy", "beam")]
    results: list[list[dict]] = [[] for _ in cases]
    for _ in range(rounds):
        for case_results, (_, model, tokenizer, batches, method) in zip(results, cases):
            case_results.append(benchmark_decoding(model, batches, method, device, tokenizer, beam_size))
    rows = []
    for (header, *_), case_results in zip(cases, results):
        median = sorted(case_results, key=lambda r: r["seconds"])[(len(case_results) - 1) // 2]
        rows.append({**header, **median, "rounds": rounds,
                     "round_latencies_ms": [r["latency_ms_per_utterance"] for r in case_results]})
    return rows


def greedy_speedups(rows: list[dict]) -> dict:
    """Batch-1 greedy latency of the slowest model divided by each model's."""
    greedy = {r["checkpoint"]: r["latency_ms_per_utterance"] for r in rows
              if r["method"] == "greedy" and r["batch_size"] == 1}
    if not greedy:
        return {}
    slowest = max(greedy.values())
    return {checkpoint: slowest / latency for checkpoint, latency in greedy.items()}


def markdown_table(rows: list[dict]) -> str:
    lines = ["| model | checkpoint | decode | batch | utterances | tokens / utt. | CER | RTF | latency (ms / utt.) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        decode = "greedy" if r["method"] == "greedy" else f"beam {r['beam_size']}"
        lines.append(f"| {r['model_type']} | {Path(r['checkpoint']).parent.parent.name} | {decode} | "
                     f"{r['batch_size']} | {r['num_utterances']} | {r['reference_tokens_per_utterance']:.1f} | "
                     f"{100 * r['cer']:.2f} % | {r['rtf']:.4f} | "
                     f"{r['latency_ms_per_utterance']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--frames", type=int, default=500)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loop-repeats", type=int, default=2)
    parser.add_argument("--skip-cif", action="store_true", help="do not run the CIF benchmark")
    parser.add_argument("--checkpoints", nargs="+", default=[], help="checkpoints or run folders to compare")
    parser.add_argument("--split", choices=("val", "test"), default="val")
    parser.add_argument("--manifest", help="JSON Lines manifest to decode (audio checkpoints)")
    parser.add_argument("--max-utterances", type=int, default=200)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="repeat every decoding measurement; report the median")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch default)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the models decode")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--table", help="write the model comparison as a Markdown table here")
    args = parser.parse_args(argv)
    if min(args.batch_sizes) < 1 or min(args.beam_size, args.max_utterances, args.rounds) < 1 or args.threads < 0:
        raise ConfigError("--batch-sizes, --beam-size, --max-utterances and --rounds must be >= 1, --threads >= 0")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    results: dict = {"torch_threads": torch.get_num_threads(), "device": args.device,
                     "device_name": device_name(args.device)}
    if not args.skip_cif:
        results["cif"] = benchmark_cif(args.batch, args.frames, args.dim, args.repeats, args.loop_repeats)
    if args.checkpoints:
        rows = benchmark_models(args.checkpoints, args.split, args.manifest, args.max_utterances, args.batch_sizes,
                                args.beam_size, args.device, args.rounds)
        results["decoding"] = rows
        results["greedy_speedup_batch1_vs_slowest"] = greedy_speedups(rows)
        table = markdown_table(rows)
        if args.table:
            Path(args.table).write_text(table, encoding="utf-8")
        print(table, file=sys.stderr)
    text = json.dumps(results, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
