"""Decoding speed and accuracy of trained models on the same utterances (``scripts/benchmark.py --checkpoints``).

:func:`benchmark_decoding` times one model on fixed batches; :func:`benchmark_models` runs it for several models
in rounds that interleave them, the median round reported, each row labelled with the model's output units
(characters, BPE 64, ...); the batch-1 greedy speed-up of every model over the slowest one, and of every Paraformer
over every autoregressive model, marked when both decode the same units.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Sequence

import torch
import torch.nn as nn

from paraformer_asr.config import MIN_INPUT_FRAMES
from paraformer_asr.data.batching import Batch, Collator, pad_short_utterances
from paraformer_asr.data.tokenizer import Tokenizer
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.factory import count_parameters
from paraformer_asr.inference import evaluation_dataset, load_model
from paraformer_asr.metrics.asr_metrics import score_transcripts


def benchmark_decoding(model: nn.Module, batches: Sequence[Batch], method: str, device: torch.device,
                       tokenizer: Tokenizer, beam_size: int = 4, warmup_batches: int = 1, lm=None,
                       lm_weight: float = 0.0, length_candidates: int = 0, count_prior: float = 0.0,
                       ctc_score_weight: float = 0.0, hotwords=None, lexicon=None,
                       length_penalty: float = 1.0, phrases=None) -> dict:
    """Decode ``batches`` with the model's ``greedy_decode`` (method 'greedy') or ``beam_search``
    ('beam', best beam scored), with an optional n-gram ``lm``, length candidates, ``hotwords`` (a HotwordTrie), a
    ``lexicon`` (a LexiconAutomaton) and ``phrases`` (PhraseCandidates) as transcribe_batches takes them, and time it.

    The first ``warmup_batches`` batches are decoded once untimed first. Returns a dict:
    method, beam_size, lm_order (0 without an LM), lm_weight, length_candidates, count_prior, ctc_score_weight,
    length_penalty, hotwords (the distinct phrases listed, 0 without a list), phrase_candidates (the phrases scored
    whole, 0 without), num_utterances, num_batches, batch_size (largest
    batch), seconds (decoding wall-clock summed over the batches, device synchronised), audio_seconds, rtf (seconds /
    audio_seconds), latency_ms_per_utterance (1000 * seconds / num_utterances),
    latency_ms_per_batch (1000 * seconds / num_batches), reference_tokens_per_utterance (the mean
    transcript length in tokens: the autoregressive decoder's step count) and cer (over the text
    decoded with ``tokenizer``, as scripts/eval.py computes it), decoder_passes_per_utterance (how many times the
    decoder runs over an utterance: a Paraformer once, or 2 k + 1 times with k length candidates; the autoregressive
    model once per output step, its hypothesis length + 1 for the end). Greedy rows also time the encoder alone on the same
    batches (a separate pass): encoder_ms_per_utterance (None for beam rows), the share of the latency the models'
    shared encoder architecture takes.
    """
    if method not in ("greedy", "beam"):
        raise ValueError(f"decode method must be 'greedy' or 'beam', got {method!r}")
    if not batches:
        raise ValueError("benchmark_decoding needs at least one batch")
    search = {"method": method, "beam_size": beam_size, "lm": lm, "lm_weight": lm_weight,
              "length_candidates": length_candidates, "count_prior": count_prior,
              "ctc_score_weight": ctc_score_weight, "hotwords": hotwords, "lexicon": lexicon,
              "length_penalty": length_penalty, "phrases": phrases}
    with torch.no_grad():
        if warmup_batches > 0:
            transcribe_batches(model, batches[:warmup_batches], device, **search)
        transcripts, seconds = transcribe_batches(model, batches, device, **search)
        encoder_seconds = time_encoder(model, batches, device) if method == "greedy" else None
    hypotheses = [t.hyp_tokens for t in transcripts]
    cer = score_transcripts([t.ref_tokens for t in transcripts], hypotheses, [t.ref_text for t in transcripts],
                            [tokenizer.decode(h) for h in hypotheses]).cer
    audio_seconds = sum(t.duration_s for t in transcripts)
    if model.cfg.type == "paraformer":
        decoder_passes = 1.0 + 2 * length_candidates
    else:
        decoder_passes = sum(len(h) + 1 for h in hypotheses) / len(hypotheses)
    return {
        "method": method,
        "beam_size": beam_size if method == "beam" else 1,
        "lm_order": lm.order if lm is not None else 0,
        "lm_weight": lm_weight if lm is not None else 0.0,
        "length_candidates": length_candidates,
        "count_prior": count_prior if length_candidates else 0.0,
        "ctc_score_weight": ctc_score_weight,
        "length_penalty": length_penalty,
        "hotwords": hotwords.num_phrases if hotwords is not None else 0,
        "phrase_candidates": len(phrases) if phrases is not None else 0,
        "num_utterances": len(transcripts),
        "num_batches": len(batches),
        "batch_size": max(batch.size for batch in batches),
        "seconds": seconds,
        "audio_seconds": audio_seconds,
        "rtf": seconds / audio_seconds if audio_seconds > 0 else 0.0,
        "latency_ms_per_utterance": 1000.0 * seconds / len(transcripts),
        "latency_ms_per_batch": 1000.0 * seconds / len(batches),
        "encoder_ms_per_utterance": None if encoder_seconds is None else 1000.0 * encoder_seconds / len(transcripts),
        "reference_tokens_per_utterance": sum(len(t.ref_tokens) for t in transcripts) / len(transcripts),
        "decoder_passes_per_utterance": decoder_passes,
        "cer": cer,
    }


def time_encoder(model: nn.Module, batches: Sequence[Batch], device: torch.device) -> float:
    """Seconds of ``model.encode`` over the batches (short utterances padded as decoding pads them; device
    synchronised)."""
    min_frames = MIN_INPUT_FRAMES[model.encoder.subsampling_factor]
    seconds = 0.0
    for batch in batches:
        batch, _ = pad_short_utterances(batch.to(device), min_frames)
        start = time.perf_counter()
        model.encode(batch.features, batch.feat_mask)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds += time.perf_counter() - start
    return seconds


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


def benchmark_models(checkpoints: list[str], split: str, manifest: str | None, max_utterances: int,
                     batch_sizes: list[int], beam_size: int, device_type: str, rounds: int,
                     exports: list[str] = (), num_threads: int = 1, config_decoding: bool = False) -> list[dict]:
    """One row per (model, batch size, decoding method), all on the same utterances: the PyTorch ``checkpoints``,
    then the ``exports`` (folders of scripts/export.py, fp32 or int8) in onnxruntime with ``num_threads`` threads.
    The methods are greedy and beam (``beam_size``, no LM), and with ``config_decoding`` also the decoding each
    checkpoint's ``decode`` config section ships (its beam size, LM and length candidates; ``config_decoding``
    true in its row).

    Every measurement is repeated ``rounds`` times; the rounds interleave the models, so a slow spell
    of a shared machine hits all of them alike. A row is the round with the median decoding time,
    plus ``rounds`` and ``round_latencies_ms`` (every round's latency per utterance).
    """
    cases = []  # (row header, model, tokenizer, batches, search arguments) in row order
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
        searches = [{"method": method, "beam_size": beam_size} for method in ("greedy", "beam")]
        if config_decoding:
            searches.append({**DecodingOptions().search_arguments(loaded), "config_decoding": True})
        for size in batch_sizes:
            batches = [collate(items[i:i + size]) for i in range(0, len(items), size)]
            cases += [(header, loaded.model, loaded.tokenizer, batches, search) for search in searches]
    results: list[list[dict]] = [[] for _ in cases]
    for _ in range(rounds):
        for case_results, (header, model, tokenizer, batches, search) in zip(results, cases):
            device = torch.device(header["device"])
            arguments = {k: v for k, v in search.items() if k != "config_decoding"}
            case_results.append(benchmark_decoding(model, batches, device=device, tokenizer=tokenizer, **arguments))
    rows = []
    for (header, *_, search), case_results in zip(cases, results):
        median = sorted(case_results, key=lambda r: r["seconds"])[(len(case_results) - 1) // 2]
        rows.append({**header, **median, "config_decoding": search.get("config_decoding", False), "rounds": rounds,
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
    entry per pair: ``paraformer``, ``ar`` (checkpoints), their ``*_name`` and ``*_units``, ``same_units``,
    ``backend``, ``speedup`` and ``encoder_bound``: the AR latency divided by the Paraformer's encoder alone, the
    speed-up a Paraformer whose predictor and decoder cost nothing would reach (None without encoder timings)."""
    greedy = [r for r in rows if r["method"] == "greedy" and r["batch_size"] == 1 and not r["config_decoding"]]
    return [{"paraformer": p["checkpoint"], "paraformer_name": p["name"], "paraformer_units": p["units"],
             "ar": a["checkpoint"], "ar_name": a["name"], "ar_units": a["units"],
             "same_units": p["units"] == a["units"], "backend": backend_name(p),
             "speedup": a["latency_ms_per_utterance"] / p["latency_ms_per_utterance"],
             "encoder_bound": (a["latency_ms_per_utterance"] / p["encoder_ms_per_utterance"]
                               if p.get("encoder_ms_per_utterance") else None)}
            for p in greedy if p["model_type"] == "paraformer"
            for a in greedy if a["model_type"] == "transformer_ar" and backend_name(a) == backend_name(p)]


def shipped_speedups(rows: list[dict]) -> list[dict]:
    """Batch-1 latency of every autoregressive model's shipped decoding (its config-decoding row) divided by every
    Paraformer's shipped decoding on the same backend: what a user of the two configs sees. One entry per pair:
    ``paraformer_name``, ``ar_name``, their ``*_units`` and ``*_decode`` labels, ``same_units``, ``backend``,
    ``paraformer_decoder_passes`` and ``speedup``. Empty without --config-decoding rows."""
    shipped = [r for r in rows if r["config_decoding"] and r["batch_size"] == 1]
    return [{"paraformer_name": p["name"], "paraformer_units": p["units"], "paraformer_decode": decoding_label(p),
             "ar_name": a["name"], "ar_units": a["units"], "ar_decode": decoding_label(a),
             "same_units": p["units"] == a["units"], "backend": backend_name(p),
             "paraformer_decoder_passes": p["decoder_passes_per_utterance"],
             "speedup": a["latency_ms_per_utterance"] / p["latency_ms_per_utterance"]}
            for p in shipped if p["model_type"] == "paraformer"
            for a in shipped if a["model_type"] == "transformer_ar" and backend_name(a) == backend_name(p)]


def greedy_speedups(rows: list[dict]) -> dict:
    """Batch-1 greedy latency of the slowest model divided by each model's."""
    greedy = {r["checkpoint"]: r["latency_ms_per_utterance"] for r in rows
              if r["method"] == "greedy" and r["batch_size"] == 1 and not r["config_decoding"]}
    if not greedy:
        return {}
    slowest = max(greedy.values())
    return {checkpoint: slowest / latency for checkpoint, latency in greedy.items()}


def decoding_label(row: dict) -> str:
    """'greedy', 'beam 4', or e.g. 'config: beam 8 + LM 6 (1.0), length candidates 3' for a row's decoding."""
    label = "greedy" if row["method"] == "greedy" else f"beam {row['beam_size']}"
    if row["lm_order"]:
        label += f" + LM {row['lm_order']} ({row['lm_weight']:g})"
    if row["length_candidates"]:
        label += f", length candidates {row['length_candidates']}"
        label += f" (count prior {row['count_prior']:g})" if row["count_prior"] else ""
    label += f" + CTC score ({row['ctc_score_weight']:g})" if row.get("ctc_score_weight") else ""
    label += f" + {row['phrase_candidates']} phrases" if row.get("phrase_candidates") else ""
    return f"config: {label}" if row["config_decoding"] else label


def run_name(checkpoint: str) -> str:
    """RUN/checkpoints/best.pt -> RUN's folder name; a checkpoint elsewhere (e.g. tuned.pt of tune_decoding.py) ->
    its file name."""
    path = Path(checkpoint)
    return path.parent.parent.name if path.parent.name == "checkpoints" else path.name


def backend_name(row: dict) -> str:
    """'PyTorch', or 'onnxruntime fp32' / 'onnxruntime int8'."""
    return "PyTorch" if row["backend"] == "torch" else f"onnxruntime {row['precision']}"


def markdown_table(rows: list[dict]) -> str:
    """The rows, then (with both model types) the batch-1 greedy speed-up of each Paraformer over each AR model."""
    lines = ["| model | units | checkpoint | backend | decode | decoder passes / utt. | batch | utterances | "
             "tokens / utt. | CER | RTF | latency (ms / utt.) | encoder alone (ms / utt.) | throughput (utt. / s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        decode = decoding_label(r)
        encoder = "" if r.get("encoder_ms_per_utterance") is None else f"{r['encoder_ms_per_utterance']:.2f}"
        lines.append(f"| {r['model_type']} | {r['units']} | {r['name']} | {backend_name(r)} | {decode} | "
                     f"{r['decoder_passes_per_utterance']:.1f} | {r['batch_size']} | {r['num_utterances']} | "
                     f"{r['reference_tokens_per_utterance']:.1f} | "
                     f"{100 * r['cer']:.2f} % | {r['rtf']:.4f} | "
                     f"{r['latency_ms_per_utterance']:.2f} | {encoder} | "
                     f"{1000.0 / r['latency_ms_per_utterance']:.1f} |")
    pairs = paraformer_speedups(rows)
    if pairs:
        lines += ["", "| Paraformer (units) | AR (units) | backend | same units | greedy speed-up, batch 1 | "
                  "bound: AR latency / Paraformer encoder alone |", "|---|---|---|---|---|---|"]
        lines += [f"| {p['paraformer_name']} ({p['paraformer_units']}) | {p['ar_name']} ({p['ar_units']}) | "
                  f"{p['backend']} | {'yes' if p['same_units'] else 'no'} | {p['speedup']:.1f}x | "
                  + ("" if p["encoder_bound"] is None else f"{p['encoder_bound']:.1f}x") + " |" for p in pairs]
    shipped = shipped_speedups(rows)
    if shipped:
        lines += ["", "| Paraformer, shipped decoding (decoder passes) | AR, shipped decoding | backend | same units | "
                  "speed-up, batch 1 |", "|---|---|---|---|---|"]
        lines += [f"| {p['paraformer_name']}: {p['paraformer_decode']} ({p['paraformer_decoder_passes']:g}) | "
                  f"{p['ar_name']}: {p['ar_decode']} | {p['backend']} | {'yes' if p['same_units'] else 'no'} | "
                  f"{p['speedup']:.1f}x |" for p in shipped]
    return "\n".join(lines) + "\n"
