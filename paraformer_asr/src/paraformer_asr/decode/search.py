"""Model-independent decoding entry points (they call the model's own search methods)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.nn as nn

from paraformer_asr.data.batching import Batch


def greedy_decode(model: nn.Module, features: torch.Tensor, feat_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """features [B, T, F], feat_mask [B, T] -> tokens [B, T_out] long (pad past lengths), lengths [B]."""
    return model.greedy_decode(features, feat_mask)


def beam_search(model: nn.Module, features: torch.Tensor, feat_mask: torch.Tensor, beam_size: int,
                **kwargs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> tokens [B, beam, T_out], scores [B, beam] log-probabilities (best first), lengths [B, beam]."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    return model.beam_search(features, feat_mask, beam_size, **kwargs)


@dataclass
class Transcript:
    id: str
    ref_tokens: list[int]
    hyp_tokens: list[int]
    ref_text: str
    duration_s: float


def transcribe_batches(model: nn.Module, batches: Iterable[Batch], device: torch.device, method: str = "greedy",
                       beam_size: int = 4, lm=None, lm_weight: float = 0.0) -> tuple[list[Transcript], float]:
    """Decode every batch; -> (transcripts, decoding seconds). Best beam for method 'beam'; with an
    n-gram ``lm`` (decode/ngram_lm.py) the beam search uses shallow fusion with weight ``lm_weight``."""
    model.eval()
    transcripts: list[Transcript] = []
    seconds = 0.0
    for batch in batches:
        batch = batch.to(device)
        start = time.perf_counter()
        if method == "greedy":
            tokens, lengths = greedy_decode(model, batch.features, batch.feat_mask)
        elif method == "beam" and lm is not None:
            from paraformer_asr.decode.lm_fusion import lm_beam_search

            beams, _, beam_lengths = lm_beam_search(model, batch.features, batch.feat_mask, beam_size, lm, lm_weight)
            tokens, lengths = beams[:, 0], beam_lengths[:, 0]
        elif method == "beam":
            beams, _, beam_lengths = beam_search(model, batch.features, batch.feat_mask, beam_size)
            tokens, lengths = beams[:, 0], beam_lengths[:, 0]
        else:
            raise ValueError(f"decode method must be 'greedy' or 'beam', got {method!r}")
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds += time.perf_counter() - start
        tokens, lengths = tokens.cpu().tolist(), lengths.cpu().tolist()
        ref_lengths = batch.token_lengths.cpu().tolist()
        ref_rows = batch.tokens.cpu().tolist()
        for row in range(batch.size):
            transcripts.append(Transcript(id=batch.ids[row], ref_tokens=ref_rows[row][: ref_lengths[row]],
                                          hyp_tokens=tokens[row][: lengths[row]], ref_text=batch.texts[row],
                                          duration_s=float(batch.durations[row])))
    return transcripts, seconds
