"""Model-independent decoding entry points (they call the model's own search methods)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.nn as nn

from paraformer_asr.data.batching import Batch
from paraformer_asr.decode.timestamps import FrameClock, decoded_token_times
from paraformer_asr.errors import ConfigError


def greedy_decode(model: nn.Module, features: torch.Tensor, feat_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """features [B, T, F], feat_mask [B, T] -> tokens [B, T_out] long (pad past lengths), lengths [B]."""
    return model.greedy_decode(features, feat_mask)


def beam_search(model: nn.Module, features: torch.Tensor, feat_mask: torch.Tensor, beam_size: int,
                **kwargs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> tokens [B, beam, T_out], scores [B, beam] log-probabilities (best first), lengths [B, beam]."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    return model.beam_search(features, feat_mask, beam_size, **kwargs)


def require_timestamps(model: nn.Module) -> None:
    """ConfigError unless the model gives token times (``gives_timestamps``: the Paraformer's CIF)."""
    if not model.gives_timestamps:
        raise ConfigError("timestamps come from the CIF predictor: this model (the autoregressive baseline) has "
                          "none; use a Paraformer checkpoint")


@dataclass
class Transcript:
    """One decoded utterance. token_times: (start_ms, end_ms) of each hypothesis token when timestamps were
    asked for (Paraformer only); ref_words: the reference's timed words when the data has them."""

    id: str
    ref_tokens: list[int]
    hyp_tokens: list[int]
    ref_text: str
    duration_s: float
    token_times: list[tuple[float, float]] | None = None
    ref_words: list[dict] | None = None


def transcribe_batches(model: nn.Module, batches: Iterable[Batch], device: torch.device, method: str = "greedy",
                       beam_size: int = 4, lm=None, lm_weight: float = 0.0,
                       clock: FrameClock | None = None) -> tuple[list[Transcript], float]:
    """Decode every batch; -> (transcripts, decoding seconds). Best beam for method 'beam'; with an
    n-gram ``lm`` (decode/ngram_lm.py) the beam search uses shallow fusion with weight ``lm_weight``.
    With a ``clock`` (decode/timestamps.py) every token also gets its CIF times; only models with
    ``gives_timestamps`` (the Paraformer) can: ConfigError otherwise."""
    if method not in ("greedy", "beam"):
        raise ValueError(f"decode method must be 'greedy' or 'beam', got {method!r}")
    if clock is not None:
        require_timestamps(model)
    model.eval()
    transcripts: list[Transcript] = []
    seconds = 0.0
    for batch in batches:
        batch = batch.to(device)
        start = time.perf_counter()
        times = None
        if clock is not None:
            tokens, lengths, cif = model.decode_with_cif(batch.features, batch.feat_mask,
                                                         beam_size if method == "beam" else 1, lm, lm_weight)
            times = decoded_token_times(model, cif, batch.feat_lengths, batch.durations, clock)  # 2 x [B, N]
        elif method == "greedy":
            tokens, lengths = greedy_decode(model, batch.features, batch.feat_mask)
        elif method == "beam" and lm is not None:
            from paraformer_asr.decode.lm_fusion import lm_beam_search

            beams, _, beam_lengths = lm_beam_search(model, batch.features, batch.feat_mask, beam_size, lm, lm_weight)
            tokens, lengths = beams[:, 0], beam_lengths[:, 0]
        elif method == "beam":
            beams, _, beam_lengths = beam_search(model, batch.features, batch.feat_mask, beam_size)
            tokens, lengths = beams[:, 0], beam_lengths[:, 0]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds += time.perf_counter() - start
        tokens, lengths = tokens.cpu().tolist(), lengths.cpu().tolist()
        ref_lengths = batch.token_lengths.cpu().tolist()
        ref_rows = batch.tokens.cpu().tolist()
        starts, ends = (times[0].cpu().tolist(), times[1].cpu().tolist()) if times is not None else (None, None)
        for row in range(batch.size):
            token_times = None if times is None else list(zip(starts[row][: lengths[row]], ends[row][: lengths[row]]))
            transcripts.append(Transcript(id=batch.ids[row], ref_tokens=ref_rows[row][: ref_lengths[row]],
                                          hyp_tokens=tokens[row][: lengths[row]], ref_text=batch.texts[row],
                                          duration_s=float(batch.durations[row]), token_times=token_times,
                                          ref_words=batch.words[row]))
    return transcripts, seconds
