"""Decoding speed and accuracy of any model of the package on fixed batches (for benchmark scripts)."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

from paraformer_asr.data.batching import Batch
from paraformer_asr.data.tokenizer import Tokenizer
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.metrics.asr_metrics import score_transcripts


def benchmark_decoding(model: nn.Module, batches: Sequence[Batch], method: str, device: torch.device,
                       tokenizer: Tokenizer, beam_size: int = 4, warmup_batches: int = 1) -> dict:
    """Decode ``batches`` with the model's ``greedy_decode`` (method 'greedy') or ``beam_search``
    ('beam', best beam scored) and time it.

    The first ``warmup_batches`` batches are decoded once untimed first. Returns a dict:
    method, beam_size, num_utterances, num_batches, batch_size (largest batch), seconds (decoding
    wall-clock summed over the batches, device synchronised), audio_seconds, rtf (seconds /
    audio_seconds), latency_ms_per_utterance (1000 * seconds / num_utterances),
    latency_ms_per_batch (1000 * seconds / num_batches), reference_tokens_per_utterance (the mean
    transcript length in tokens: the autoregressive decoder's step count) and cer (over the text
    decoded with ``tokenizer``, as scripts/eval.py computes it).
    """
    if method not in ("greedy", "beam"):
        raise ValueError(f"decode method must be 'greedy' or 'beam', got {method!r}")
    if not batches:
        raise ValueError("benchmark_decoding needs at least one batch")
    with torch.no_grad():
        if warmup_batches > 0:
            transcribe_batches(model, batches[:warmup_batches], device, method, beam_size)
        transcripts, seconds = transcribe_batches(model, batches, device, method, beam_size)
    hypotheses = [t.hyp_tokens for t in transcripts]
    cer = score_transcripts([t.ref_tokens for t in transcripts], hypotheses, [t.ref_text for t in transcripts],
                            [tokenizer.decode(h) for h in hypotheses]).cer
    audio_seconds = sum(t.duration_s for t in transcripts)
    return {
        "method": method,
        "beam_size": beam_size if method == "beam" else 1,
        "num_utterances": len(transcripts),
        "num_batches": len(batches),
        "batch_size": max(batch.size for batch in batches),
        "seconds": seconds,
        "audio_seconds": audio_seconds,
        "rtf": seconds / audio_seconds if audio_seconds > 0 else 0.0,
        "latency_ms_per_utterance": 1000.0 * seconds / len(transcripts),
        "latency_ms_per_batch": 1000.0 * seconds / len(batches),
        "reference_tokens_per_utterance": sum(len(t.ref_tokens) for t in transcripts) / len(transcripts),
        "cer": cer,
    }
