"""The vectorised CIF (models/cif.py) against :func:`loop_cif`, the plain one-frame-at-a-time integrate-and-fire it
must equal (tests/test_asr_cif.py checks that): times, speed-up, largest difference (``scripts/benchmark.py``)."""

from __future__ import annotations

import time

import torch

from paraformer_asr.models.cif import cif_integrate, inference_token_count


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
