"""What scripts/benchmark.py measures.

1. The vectorised CIF (models/cif.py) against :func:`loop_cif`, the plain one-frame-at-a-time
   integrate-and-fire it must equal (tests/test_asr_cif.py checks that): times, speed-up, largest difference.
2. Decoding of one or more trained models on the same utterances (decode/speed.py per measurement):
   rounds that interleave the models, the median round reported, each row labelled with the model's
   output units (characters, BPE 64, ...); the batch-1 greedy speed-up of every model over the slowest
   one, and of every Paraformer over every autoregressive model, marked when both decode the same units.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path

import torch

from paraformer_asr.data.batching import Collator
from paraformer_asr.decode.speed import benchmark_decoding
from paraformer_asr.inference import evaluation_dataset, load_model
from paraformer_asr.models.cif import cif_integrate, inference_token_count
from paraformer_asr.models.factory import count_parameters


def device_name(device: str) -> str:
    """The GPU's name, or the CPU model from /proc/cpuinfo (Linux), else what ``platform`` knows."""
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


def loop_cif(hidden: torch.Tensor, alphas: torch.Tensor, num_tokens: torch.Tensor) -> tuple[list, list]:
    """Sequential integrate-and-fire, one frame at a time (threshold 1).

    hidden [B, T, D], alphas [B, T], num_tokens [B] -> (per utterance: list of embeddings [D],
    list of fire frames). A frame whose alpha completes a token fires it and carries the rest
    over (possibly firing again if alpha > 1); after the last frame an unfinished token is kept
    (divided by its mass) only while fewer than num_tokens have fired.
    """
    all_embeddings, all_fires = [], []
    for b in range(hidden.shape[0]):
        wanted = int(num_tokens[b])
        embeddings, fires = [], []
        acc = 0.0
        current = torch.zeros(hidden.shape[2], dtype=torch.float64)
        last_valid = 0
        for t in range(hidden.shape[1]):
            remaining = float(alphas[b, t])
            if remaining > 0:
                last_valid = t
            frame = hidden[b, t].double()
            while len(embeddings) < wanted and acc + remaining >= 1.0:
                part = 1.0 - acc
                current = current + part * frame
                embeddings.append(current)
                fires.append(t)
                current = torch.zeros_like(current)
                acc = 0.0
                remaining -= part
            if len(embeddings) < wanted:
                acc += remaining
                current = current + remaining * frame
        if len(embeddings) < wanted and acc > 0:
            embeddings.append(current / acc)
            fires.append(last_valid)
        all_embeddings.append(embeddings)
        all_fires.append(fires)
    return all_embeddings, all_fires


def benchmark_cif(batch: int, frames: int, dim: int, repeats: int, loop_repeats: int) -> dict:
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
                     batch_sizes: list[int], beam_size: int, device_type: str, rounds: int,
                     exports: list[str] = (), num_threads: int = 1) -> list[dict]:
    """One row per (model, batch size, decoding method), all on the same utterances: the PyTorch ``checkpoints``,
    then the ``exports`` (folders of scripts/export.py, fp32 or int8) in onnxruntime with ``num_threads`` threads.

    Every measurement is repeated ``rounds`` times; the rounds interleave the models, so a slow spell
    of a shared machine hits all of them alike. A row is the round with the median decoding time,
    plus ``rounds`` and ``round_latencies_ms`` (every round's latency per utterance).
    """
    cases = []  # (row header, model, tokenizer, batches, method) in row order
    sources = [(checkpoint, "torch") for checkpoint in checkpoints] + [(folder, "onnx") for folder in exports]
    for source, backend in sources:
        loaded, device = load_model(source, backend, device_type, num_threads)
        dataset = evaluation_dataset(loaded, split, manifest)
        items = [dataset[i] for i in range(min(max_utterances, len(dataset)))]
        collate = Collator(loaded.tokenizer.pad_id)
        header = {"model_type": loaded.cfg.model.type, "checkpoint": str(loaded.path), "backend": backend,
                  "name": loaded.path.name if backend == "onnx" else run_name(str(loaded.path)),
                  "precision": getattr(loaded.model, "precision", "fp32"), "units": units_name(loaded.tokenizer),
                  "device": str(device),
                  "parameters": count_parameters(loaded.model) if backend == "torch" else None}
        for size in batch_sizes:
            batches = [collate(items[i:i + size]) for i in range(0, len(items), size)]
            cases += [(header, loaded.model, loaded.tokenizer, batches, method) for method in ("greedy", "beam")]
    results: list[list[dict]] = [[] for _ in cases]
    for _ in range(rounds):
        for case_results, (header, model, tokenizer, batches, method) in zip(results, cases):
            device = torch.device(header["device"])
            case_results.append(benchmark_decoding(model, batches, method, device, tokenizer, beam_size))
    rows = []
    for (header, *_), case_results in zip(cases, results):
        median = sorted(case_results, key=lambda r: r["seconds"])[(len(case_results) - 1) // 2]
        rows.append({**header, **median, "rounds": rounds,
                     "round_latencies_ms": [r["latency_ms_per_utterance"] for r in case_results]})
    return rows


def units_name(tokenizer) -> str:
    """A tokenizer's output units as a row label: 'characters', or the subword kind and its vocabulary size
    (specials included, as ``data.vocab_size`` counts them), e.g. 'BPE 64'."""
    if tokenizer.kind == "char":
        return "characters"
    return f"{'BPE' if tokenizer.kind == 'bpe' else tokenizer.kind} {tokenizer.vocab_size}"


def paraformer_speedups(rows: list[dict]) -> list[dict]:
    """Batch-1 greedy latency of every autoregressive model divided by every Paraformer's on the same backend, one
    entry per pair: ``paraformer``, ``ar`` (checkpoints), their ``*_name`` and ``*_units``, ``same_units``, ``backend`` and ``speedup``."""
    greedy = [r for r in rows if r["method"] == "greedy" and r["batch_size"] == 1]
    return [{"paraformer": p["checkpoint"], "paraformer_name": p["name"], "paraformer_units": p["units"],
             "ar": a["checkpoint"], "ar_name": a["name"], "ar_units": a["units"], "same_units": p["units"] == a["units"], "backend": backend_name(p),
             "speedup": a["latency_ms_per_utterance"] / p["latency_ms_per_utterance"]}
            for p in greedy if p["model_type"] == "paraformer"
            for a in greedy if a["model_type"] == "transformer_ar" and backend_name(a) == backend_name(p)]


def greedy_speedups(rows: list[dict]) -> dict:
    """Batch-1 greedy latency of the slowest model divided by each model's."""
    greedy = {r["checkpoint"]: r["latency_ms_per_utterance"] for r in rows
              if r["method"] == "greedy" and r["batch_size"] == 1}
    if not greedy:
        return {}
    slowest = max(greedy.values())
    return {checkpoint: slowest / latency for checkpoint, latency in greedy.items()}


def run_name(checkpoint: str) -> str:
    """RUN/checkpoints/best.pt -> RUN's folder name."""
    return Path(checkpoint).parent.parent.name


def backend_name(row: dict) -> str:
    """'PyTorch', or 'onnxruntime fp32' / 'onnxruntime int8'."""
    return "PyTorch" if row["backend"] == "torch" else f"onnxruntime {row['precision']}"


def markdown_table(rows: list[dict]) -> str:
    """The rows, then (with both model types) the batch-1 greedy speed-up of each Paraformer over each AR model."""
    lines = ["| model | units | checkpoint | backend | decode | batch | utterances | tokens / utt. | CER | RTF | "
             "latency (ms / utt.) | throughput (utt. / s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        decode = "greedy" if r["method"] == "greedy" else f"beam {r['beam_size']}"
        lines.append(f"| {r['model_type']} | {r['units']} | {r['name']} | {backend_name(r)} | {decode} | "
                     f"{r['batch_size']} | {r['num_utterances']} | {r['reference_tokens_per_utterance']:.1f} | "
                     f"{100 * r['cer']:.2f} % | {r['rtf']:.4f} | "
                     f"{r['latency_ms_per_utterance']:.2f} | {1000.0 / r['latency_ms_per_utterance']:.1f} |")
    pairs = paraformer_speedups(rows)
    if pairs:
        lines += ["", "| Paraformer (units) | AR (units) | backend | same units | greedy speed-up, batch 1 |",
                  "|---|---|---|---|---|"]
        lines += [f"| {p['paraformer_name']} ({p['paraformer_units']}) | {p['ar_name']} ({p['ar_units']}) | {p['backend']} | "
                  f"{'yes' if p['same_units'] else 'no'} | {p['speedup']:.1f}x |" for p in pairs]
    return "\n".join(lines) + "\n"
