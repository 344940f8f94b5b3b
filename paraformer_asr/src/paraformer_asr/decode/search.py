"""Model-independent decoding entry points (they call the model's own search methods)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.nn as nn

from paraformer_asr.config import MIN_INPUT_FRAMES
from paraformer_asr.data.batching import Batch, pad_short_utterances
from paraformer_asr.decode.hotwords import HotwordTrie, biasing
from paraformer_asr.decode.lexicon import LexiconAutomaton
from paraformer_asr.decode.phrases import PhraseCandidates
from paraformer_asr.decode.timestamps import FrameClock, decoded_token_times
from paraformer_asr.errors import ConfigError


def require_timestamps(model: nn.Module) -> None:
    """ConfigError unless the model gives token times (``gives_timestamps``: the Paraformer's CIF)."""
    if not model.gives_timestamps:
        raise ConfigError("timestamps come from the CIF predictor: this model (the autoregressive baseline) has "
                          "none; use a Paraformer checkpoint")


@dataclass
class Transcript:
    """One decoded utterance. token_times: (start_ms, end_ms) of each hypothesis token when timestamps were
    asked for (Paraformer only); ref_words: the reference's timed words when the data has them; score: the
    hypothesis's score per token (``decode_scored``) when it was decoded with timestamps or length candidates."""

    id: str
    ref_tokens: list[int]
    hyp_tokens: list[int]
    ref_text: str
    duration_s: float
    token_times: list[tuple[float, float]] | None = None
    ref_words: list[dict] | None = None
    score: float | None = None


def transcribe_batches(model: nn.Module, batches: Iterable[Batch], device: torch.device, method: str = "greedy",
                       beam_size: int = 4, lm=None, lm_weight: float = 0.0, clock: FrameClock | None = None,
                       length_candidates: int = 0, count_prior: float = 0.0, ctc_score_weight: float = 0.0,
                       hotwords: HotwordTrie | None = None,
                       lexicon: LexiconAutomaton | None = None, length_penalty: float = 1.0,
                       phrases: PhraseCandidates | None = None) -> tuple[list[Transcript], float]:
    """Decode every batch; -> (transcripts, decoding seconds). Best beam for method 'beam'; with an
    n-gram ``lm`` (decode/ngram_lm.py) the beam search uses shallow fusion with weight ``lm_weight``; with
    ``hotwords`` (a non-empty HotwordTrie, decode/hotwords.py) every search is biased toward its phrases, greedy
    decoding being beam 1 with biasing; with a ``lexicon`` (decode/lexicon.py, a Paraformer) every hypothesis is a
    sentence of its words where one of the counted length exists, greedy decoding being beam 1 constrained.
    ``length_candidates`` k > 0 (a Paraformer): k candidate token counts either side of the extractor's own are
    decoded too (decode/paraformer_search.py, ``decode_length_candidates``) and the best kept (scores normalised by
    ``length_penalty``), less ``count_prior`` x its distance to the extractor's expected count and plus
    ``ctc_score_weight`` x its CTC log-likelihood per token (``model.decode_length_candidates``); the autoregressive
    baseline's beams are ranked again with that CTC term (``model.beam_search``). ``length_penalty``: every summed
    score that ranks hypotheses of different lengths (the candidates, the autoregressive beams) is divided by the
    token count to this power ("per token" above is 1). With ``phrases`` (decode/phrases.py, a Paraformer with length
    candidates) the listed phrases are scored whole beside the searched hypotheses.
    With a ``clock`` (decode/timestamps.py) every token also gets its CIF times; only models with
    ``gives_timestamps`` (the Paraformer) can: ConfigError otherwise. An utterance too short for the encoder's
    subsampling (fewer than ``MIN_INPUT_FRAMES`` frames, e.g. a 30 ms clip) gets an empty hypothesis."""
    if method not in ("greedy", "beam"):
        raise ValueError(f"decode method must be 'greedy' or 'beam', got {method!r}")
    if clock is not None:
        require_timestamps(model)
    model.eval()
    min_frames = MIN_INPUT_FRAMES[model.encoder.subsampling_factor]
    hotwords = hotwords.to(device) if hotwords is not None else None  # once, not per batch
    lexicon = lexicon.to(device) if lexicon is not None else None
    phrases = phrases.to(device) if phrases is not None else None
    transcripts: list[Transcript] = []
    seconds = 0.0
    for batch in batches:
        batch, too_short = pad_short_utterances(batch.to(device), min_frames)  # too_short [B]
        start = time.perf_counter()
        times = scores = None
        if clock is not None or length_candidates > 0:
            tokens, lengths, cif, scores = model.decode_scored(batch.features, batch.feat_mask,
                                                               beam_size if method == "beam" else 1, lm, lm_weight,
                                                               length_candidates, count_prior, ctc_score_weight,
                                                               hotwords, lexicon, length_penalty, phrases)
            if clock is not None:
                times = decoded_token_times(model, cif, batch.features, batch.feat_lengths, batch.durations,
                                            clock)  # 2 x [B, N]
        elif method == "greedy" and not biasing(hotwords) and lexicon is None:
            tokens, lengths = model.greedy_decode(batch.features, batch.feat_mask)
        else:
            beams, _, beam_lengths = model.beam_search(batch.features, batch.feat_mask,
                                                       beam_size if method == "beam" else 1, lm=lm,
                                                       lm_weight=lm_weight, ctc_score_weight=ctc_score_weight,
                                                       hotwords=hotwords, lexicon=lexicon,
                                                       length_penalty=length_penalty)
            tokens, lengths = beams[:, 0], beam_lengths[:, 0]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds += time.perf_counter() - start
        tokens, lengths = tokens.cpu().tolist(), lengths.masked_fill(too_short, 0).cpu().tolist()
        ref_lengths = batch.token_lengths.cpu().tolist()
        ref_rows = batch.tokens.cpu().tolist()
        starts, ends = (times[0].cpu().tolist(), times[1].cpu().tolist()) if times is not None else (None, None)
        scores = [None] * batch.size if scores is None else scores.cpu().tolist()
        for row in range(batch.size):
            token_times = None if times is None else list(zip(starts[row][: lengths[row]], ends[row][: lengths[row]]))
            transcripts.append(Transcript(id=batch.ids[row], ref_tokens=ref_rows[row][: ref_lengths[row]],
                                          hyp_tokens=tokens[row][: lengths[row]], ref_text=batch.texts[row],
                                          duration_s=float(batch.durations[row]), token_times=token_times,
                                          ref_words=batch.words[row], score=scores[row]))
    return transcripts, seconds
