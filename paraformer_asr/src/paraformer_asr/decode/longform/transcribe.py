"""Transcribing a long recording: the energy pass, the plan, the windows read, featurised and decoded in padded
batches (with judged pauses, in rounds), and the stitched transcript."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

import torch

from paraformer_asr.data.audio import open_audio, segment_frames
from paraformer_asr.data.batching import Collator
from paraformer_asr.data.setup import make_frontend
from paraformer_asr.data.tokenizer import Tokenizer, begins_word
from paraformer_asr.decode.hotwords import HotwordTrie
from paraformer_asr.decode.lexicon import LexiconAutomaton
from paraformer_asr.decode.longform.options import LongFormOptions
from paraformer_asr.decode.longform.pauses import Span, joined_window, judge_pauses
from paraformer_asr.decode.longform.plan import Window, plan_recording
from paraformer_asr.decode.longform.reader import WindowReader
from paraformer_asr.decode.longform.stitch import TimedUnit, stitch_by_text, stitch_by_times, window_units
from paraformer_asr.decode.longform.vad import energy_profile
from paraformer_asr.decode.phrases import PhraseCandidates
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.decode.timestamps import frame_clock, token_entries, word_times
from paraformer_asr.errors import DataError
from paraformer_asr.loaded_model import LoadedModel, features_from_waveform

PROFILE_BLOCK_SECONDS = 30.0  # the energy pass reads the recording in windows of this length
BATCH_SECONDS_PER_WINDOW = 5.0  # a batch holds at most batch_windows x this much padded audio


@dataclass
class LongTranscript:
    """A recording's transcript. words / tokens: [{"word" | "token", "start_ms", "end_ms"}] in whole ms from the
    recording's start (None for a model without a CIF); seconds: wall time of reading, features and decoding;
    decode_seconds: the model's share."""

    text: str
    words: list[dict] | None
    tokens: list[dict] | None
    duration_s: float
    num_windows: int
    seconds: float
    decode_seconds: float
    units: list[TimedUnit] = field(repr=False, default_factory=list)


def has_word_separators(tokenizer: Tokenizer) -> bool:
    """Whether the vocabulary can write a word boundary: a whitespace piece or a ``▁``-marked one."""
    return any(begins_word(piece) for piece in tokenizer.pieces(range(tokenizer.vocab_size)))


def transcribe_long(loaded: LoadedModel, source: str | Path | BinaryIO, device: torch.device,
                    options: LongFormOptions = LongFormOptions(), *, name: str | None = None,
                    start_s: float | None = None, end_s: float | None = None, method: str = "greedy",
                    beam_size: int = 4, lm=None, lm_weight: float = 0.0, length_candidates: int = 0,
                    count_prior: float = 0.0, ctc_score_weight: float = 0.0, hotwords: HotwordTrie | None = None,
                    lexicon: LexiconAutomaton | None = None, length_penalty: float = 1.0,
                    phrases: PhraseCandidates | None = None, progress: Callable[[int, int], None] | None = None,
                    pause: Callable[[], None] | None = None) -> LongTranscript:
    """Transcribe an audio file or file object (or its segment [start_s, end_s)) window by window.

    A first pass reads the recording window by window for its energy profile (segmentation at pauses, quiet cuts);
    the second reads, featurises and decodes the planned windows, ``options.batch_windows`` at a time; with judged
    pauses (a model with scores, ``options.judged_pauses_ms``) the segments on either side of each judged pause are
    decoded together too, in rounds, and kept together where that scores better (:func:`judge_pauses`).
    ``progress(done, total)`` is called after each batch: windows decoded, and the decodes planned so far plus one
    for the stitching (the last call, after it, has done == total); ``pause()`` before each batch (the service's
    long-recording lane yields there to short requests). The search options (``method`` .. ``phrases``) are
    :func:`transcribe_batches`'.
    """
    started = time.perf_counter()
    name = str(source) if name is None else name
    if loaded.cfg.data.kind != "manifest":
        raise DataError(f"{name}: this checkpoint was trained on toy features, not audio")
    rate = loaded.cfg.data.sample_rate
    hop = make_frontend(loaded.cfg).hop_length
    timed = bool(loaded.model.gives_timestamps)
    judged = timed and options.segment == "pauses" and options.judged_pauses_ms is not None
    by_words = has_word_separators(loaded.tokenizer)
    clock = frame_clock(loaded.cfg) if timed else None
    collate = Collator(loaded.tokenizer.pad_id)
    decoded: dict[Span, DecodedWindow] = {}
    decode_seconds = 0.0
    with open_audio(source, name) as handle, torch.no_grad():
        first_frame, count = segment_frames(handle.samplerate, handle.frames, start_s, end_s, name)
        reader = WindowReader(handle, name, rate, first_frame, count)
        align = math.lcm(hop, reader.up)
        profile = None
        if options.segment == "pauses" or options.cut == "quiet":
            profile = energy_profile(reader, hop, round(PROFILE_BLOCK_SECONDS * rate))
        plan_options = replace(options, min_pause_ms=options.judged_pauses_ms[0]) if judged else options
        windows = plan_recording(reader.num_samples, plan_options, hop, align, rate, profile)

        def span_samples(span: Span) -> int:
            return windows[span[1]].end - windows[span[0]].start

        def decode(spans: list[Span]) -> list[DecodedWindow]:
            """Decode the spans not decoded yet, ``options.batch_windows`` windows a batch, batched by length (less
            padding) -> every span's decode."""
            nonlocal decode_seconds
            missing = sorted((span for span in dict.fromkeys(spans) if span not in decoded), key=span_samples)
            lengths = [span_samples(span) for span in missing]  # shortest first
            done = 0
            for batch_size in padded_batches(lengths, options.batch_windows,
                                             round(options.batch_windows * BATCH_SECONDS_PER_WINDOW * rate)):
                if pause is not None:
                    pause()
                spans_now = missing[done:done + batch_size]
                done += batch_size
                batch = [joined_window(windows, span) for span in spans_now]
                items = []
                for window in batch:
                    waveform = reader.read(window.start, window.end)  # [N]
                    items.append({"id": str(window.index), "features": features_from_waveform(waveform, loaded),
                                  "tokens": torch.zeros(0, dtype=torch.long), "text": "",
                                  "duration_s": waveform.numel() / rate})
                transcripts, seconds = transcribe_batches(loaded.model, [collate(items)], device, method, beam_size,
                                                          lm, lm_weight, clock, length_candidates, count_prior,
                                                          ctc_score_weight, hotwords, lexicon, length_penalty,
                                                          phrases)
                decode_seconds += seconds
                for span, window, transcript in zip(spans_now, batch, transcripts):
                    decoded[span] = decoded_window(window, transcript, loaded.tokenizer, rate, by_words)
                if progress is not None:  # the last step, stitching, is reported at the end
                    progress(len(decoded), len(decoded) + len(missing) - done + 1)
            return [decoded[span] for span in spans]

        if judged:
            groups = judge_pauses(windows, options.judged_pauses_ms, round(options.chunk_seconds * rate),
                                  lambda spans: [(d.score, len(d.tokens)) for d in decode(spans)])
        else:
            groups = [(index, index) for index in range(len(windows))]
        stitched: list[TimedUnit] = []
        previous: DecodedWindow | None = None
        previous_count = 0  # units at the end of ``stitched`` that come from the previous window (text stitching)
        for current in decode(groups):
            if timed:
                stitched = stitch_by_times(stitched, [] if previous is None else previous.units, current.units,
                                           current.window)
            else:
                stitched, previous_count = stitch_by_text(stitched, previous_count,
                                                          None if previous is None else previous.window,
                                                          current.units, current.window)
            previous = current
        if progress is not None:
            progress(len(decoded) + 1, len(decoded) + 1)
    return _assemble(stitched, by_words, timed, reader.num_samples / rate, len(groups),
                     time.perf_counter() - started, decode_seconds)


@dataclass(frozen=True)
class DecodedWindow:
    """A decoded window: its units with absolute times (TimedUnit), its tokens (until <eos>) and the score per
    token of its hypothesis (None for a model that gives none)."""

    window: Window
    units: list[TimedUnit]
    tokens: list[int]
    score: float | None


def decoded_window(window: Window, transcript, tokenizer: Tokenizer, rate: int, by_words: bool) -> DecodedWindow:
    """A window's Transcript (decode/search.py) -> its DecodedWindow: the tokens until <eos>, as tokenizer.decode
    reads them, as units shifted to the window's start."""
    tokens = tokenizer.until_eos(transcript.hyp_tokens)
    times = None if transcript.token_times is None else transcript.token_times[:len(tokens)]
    units = window_units(tokenizer.pieces(tokens), times, window.start * 1000.0 / rate, by_words)
    return DecodedWindow(window, units, tokens, transcript.score)


def padded_batches(lengths: list[int], batch_windows: int, budget_samples: int) -> list[int]:
    """Window lengths in samples, shortest first -> the sizes of consecutive batches: at most ``batch_windows``
    windows, and at most ``budget_samples`` of padded audio (windows x the longest of them), a longer window alone.
    Activations grow with a batch's padded size, so joined windows of up to chunk_seconds cost no more memory
    than ``batch_windows`` windows of BATCH_SECONDS_PER_WINDOW."""
    sizes, start = [], 0
    while start < len(lengths):
        size = 1
        while (size < batch_windows and start + size < len(lengths)
               and (size + 1) * lengths[start + size] <= budget_samples):
            size += 1
        sizes.append(size)
        start += size
    return sizes


def _assemble(units: list[TimedUnit], by_words: bool, timed: bool, duration_s: float,
              num_windows: int, seconds: float, decode_seconds: float) -> LongTranscript:
    """Stitched units -> text (words joined by single spaces, or tokens joined without separator), words and
    tokens with whole-ms times."""
    text = (" " if by_words else "").join(unit.text for unit in units)
    words = tokens = None
    if timed:
        token_list = [token for unit in units for token in unit.tokens]
        pieces = [piece for piece, _, _ in token_list]
        token_times = [(start, end) for _, start, end in token_list]
        tokens = token_entries(pieces, token_times)
        words = ([{"word": unit.text, "start_ms": round(unit.start_ms), "end_ms": round(unit.end_ms)}
                  for unit in units] if by_words else word_times(pieces, token_times))
    return LongTranscript(text, words, tokens, duration_s, num_windows, seconds, decode_seconds, units)
