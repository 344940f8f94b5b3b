"""Window planning: the windows a recording is decoded in, at its pauses or on a fixed grid, with the keep range of
each (where stitching passes from one overlapping window to the next)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from paraformer_asr.decode.longform.options import LongFormOptions
from paraformer_asr.decode.longform.vad import (FLOOR_REACH_SECONDS, MIN_SPEECH_MS, audible_span, quiet_point,
                                                speech_runs)

QUIET_SPAN_MS = 100.0  # the quiet cut is the centre of the lowest-energy stretch of this length
MIN_WINDOW_SECONDS = 0.2  # a speech segment is given at least this much audio (the encoder needs 85 ms)


@dataclass(frozen=True)
class Window:
    """Samples [start, end) of the recording at the model's sample rate; the units (words) whose centre lies in
    [keep_start_ms, keep_end_ms) are its part of the transcript; pause_after_ms: the pause between its speech and
    the next window's when a pause parts them (segmentation at pauses), else 0."""

    index: int
    start: int
    end: int
    keep_start_ms: float = -math.inf
    keep_end_ms: float = math.inf
    pause_after_ms: float = 0.0


def plan_windows(num_samples: int, window_samples: int, overlap_samples: int, align: int) -> list[tuple[int, int]]:
    """(start, end) of windows covering [0, num_samples): one window when the recording fits in one; otherwise
    starts every ``window - overlap`` samples rounded down to a multiple of ``align`` (at least ``align``), and a
    last window that ends at ``num_samples``, starting at the first multiple of ``align`` that keeps it within
    ``window_samples`` (its overlap with the previous window is then at least ``overlap_samples``)."""
    if num_samples < 1 or window_samples < 1 or align < 1 or not 0 <= overlap_samples < window_samples:
        raise ValueError(f"cannot plan windows: {num_samples} samples, windows of {window_samples}, overlap "
                         f"{overlap_samples}, alignment {align}")
    if num_samples <= window_samples:
        return [(0, num_samples)]
    step = max(align, (window_samples - overlap_samples) // align * align)
    starts = range(0, num_samples - window_samples, step)  # every start whose window ends before the end
    last_start = -(-(num_samples - window_samples) // align) * align
    return [(start, start + window_samples) for start in starts] + [(last_start, num_samples)]


def stitched_windows(spans: list[tuple[int, int]], cut: str, profile_db: torch.Tensor | None, hop: int,
                     sample_rate: int, keep_from_ms: float = -math.inf,
                     keep_to_ms: float = math.inf) -> list[tuple[int, int, float, float]]:
    """Overlapping (start, end) sample spans in order -> (start, end, keep_start_ms, keep_end_ms): the keep ranges
    run from ``keep_from_ms`` to ``keep_to_ms`` and meet at one cut per overlap, its middle or (``cut`` 'quiet',
    with a profile) the centre of its quietest QUIET_SPAN_MS inside the overlap's middle half."""
    to_ms = 1000.0 / sample_rate
    cuts = []
    for (_, end), (next_start, _) in zip(spans, spans[1:]):
        middle = (next_start + end) / 2.0
        quarter = (end - next_start) // 4
        if cut == "quiet" and profile_db is not None and quarter >= hop:
            first, last = -(-(next_start + quarter) // hop), (end - quarter) // hop
            span = max(1, round(QUIET_SPAN_MS / 1000.0 * sample_rate / hop))
            middle = (quiet_point(profile_db, first, max(last, first + 1), span) + 0.5) * hop
        cuts.append(middle * to_ms)
    keep_from = [keep_from_ms] + cuts
    keep_to = cuts + [keep_to_ms]
    return [(start, end, low, high) for (start, end), low, high in zip(spans, keep_from, keep_to)]


def plan_recording(num_samples: int, options: LongFormOptions, hop: int, align: int, sample_rate: int,
                   profile_db: torch.Tensor | None) -> list[Window]:
    """The windows a recording is decoded in (the package docstring). 'windows': fixed windows over the whole
    recording. 'pauses': each speech run (``speech_runs`` on the profile) with ``margin_ms`` around it (never past
    the middle of the pause to the next run, which also bounds what it keeps), less the digital silence at its edges
    (``audible_span``), starts rounded down and ends up to the ``align`` grid, at least MIN_WINDOW_SECONDS long; a
    run longer than ``chunk_seconds`` is cut into overlapping windows; the last window of a segment records the
    pause to the next segment's speech (``pause_after_ms``). A recording without speech gets no window."""
    window_samples = round(options.chunk_seconds * sample_rate)
    overlap_samples = round(options.overlap_seconds * sample_rate)
    if options.segment == "windows":
        spans = plan_windows(num_samples, window_samples, overlap_samples, align)
        return [Window(index, *entry) for index, entry in enumerate(stitched_windows(spans, options.cut, profile_db,
                                                                                     hop, sample_rate))]
    frame_ms = 1000.0 * hop / sample_rate
    runs = speech_runs(profile_db, options.speech_threshold_db, round(FLOOR_REACH_SECONDS * 1000 / frame_ms),
                       round(options.min_pause_ms / frame_ms), max(1, round(MIN_SPEECH_MS / frame_ms)))
    before, after = (round(margin * sample_rate / 1000.0) for margin in options.margin_ms)
    shortest = round(MIN_WINDOW_SECONDS * sample_rate)
    to_ms = 1000.0 / sample_rate
    planned = []
    for index, (first, end) in enumerate(runs):
        low = 0 if index == 0 else (runs[index - 1][1] + first) * hop // 2  # middle of the pause before
        high = num_samples if index + 1 == len(runs) else (end + runs[index + 1][0]) * hop // 2
        start = max(low, first * hop - before)
        stop = min(high, num_samples, end * hop + after)
        audible_first, audible_end = audible_span(profile_db, start // hop, -(-stop // hop))
        start = max(start, audible_first * hop) // align * align
        stop = min(stop, -(-(audible_end * hop) // align) * align)
        stop = max(stop, min(num_samples, start + shortest))
        spans = [(start + a, start + b) for a, b in plan_windows(stop - start, window_samples, overlap_samples,
                                                                 align)]
        segment = stitched_windows(spans, options.cut, profile_db, hop, sample_rate,
                                   -math.inf if index == 0 else low * to_ms,
                                   math.inf if index + 1 == len(runs) else high * to_ms)
        pause_ms = 0.0 if index + 1 == len(runs) else (runs[index + 1][0] - end) * frame_ms
        planned += [entry + (0.0,) for entry in segment[:-1]] + [segment[-1] + (pause_ms,)]
    return [Window(index, *entry) for index, entry in enumerate(planned)]
