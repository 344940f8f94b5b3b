"""Scoring a model on a loader (used for validation in the loop and by scripts/eval.py)."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from paraformer_asr.data.tokenizer import Tokenizer
from paraformer_asr.decode.search import Transcript, transcribe_batches
from paraformer_asr.metrics import score_transcripts


def evaluate(model: nn.Module, loader: DataLoader, tokenizer: Tokenizer, device: torch.device,
             method: str = "greedy", beam_size: int = 4, lm=None,
             lm_weight: float = 0.0) -> tuple[dict, list[Transcript], list[str]]:
    """-> (scores: cer, wer, token_accuracy, sequence_accuracy, length_accuracy, num_utterances, rtf;
    transcripts; hypothesis texts). rtf = decoding seconds / seconds of input."""
    transcripts, seconds = transcribe_batches(model, loader, device, method, beam_size, lm, lm_weight)
    hyp_texts = [tokenizer.decode(t.hyp_tokens) for t in transcripts]
    scores = score_transcripts([t.ref_tokens for t in transcripts], [t.hyp_tokens for t in transcripts],
                               [t.ref_text for t in transcripts], hyp_texts).to_dict()
    audio_seconds = sum(t.duration_s for t in transcripts)
    scores["rtf"] = seconds / audio_seconds if audio_seconds > 0 else 0.0
    return scores, transcripts, hyp_texts


def resolve_device(name: str) -> torch.device:
    from paraformer_asr.errors import ConfigError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("config key 'run.device' is 'cuda' but no CUDA device is available")
    return torch.device(name)
