"""Stitching decoded windows into one transcript: by the CIF times of their words (a unit is kept by the window
whose keep range holds its centre), or by their text for a model without times (the package docstring, "The
stitching rule", "The autoregressive baseline")."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from paraformer_asr.decode.longform.plan import Window
from paraformer_asr.decode.timestamps import group_words
from paraformer_asr.metrics.asr_metrics import matched_pairs

TEXT_SEARCH_WIDENING = 1.5  # text stitching: words searched in an overlap, relative to the expected count


@dataclass(frozen=True)
class TimedUnit:
    """A stitching unit: a word (or a single token) with absolute times in ms (None without a CIF) and its
    tokens as (piece, start_ms, end_ms), the word separators before it in its window included."""

    text: str
    start_ms: float | None
    end_ms: float | None
    tokens: tuple[tuple[str, float, float], ...] = ()

    @property
    def centre_ms(self) -> float:
        return (self.start_ms + self.end_ms) / 2.0


def window_units(pieces: list[str], token_times: list[tuple[float, float]] | None, offset_ms: float,
                 by_words: bool) -> list[TimedUnit]:
    """A window's decoded pieces (and their times in ms from the window's start, or None) -> its units with times
    shifted by ``offset_ms``: words (``group_words``), each owning the tokens from after the previous word to its
    last one, or, with ``by_words`` False, every token with a surface form."""
    if token_times is not None and len(token_times) != len(pieces):
        raise ValueError(f"{len(pieces)} pieces but {len(token_times)} token times")
    times = [(start + offset_ms, end + offset_ms) for start, end in token_times] if token_times is not None else None

    def unit(text: str, first: int, last: int, owned_from: int) -> TimedUnit:
        if times is None:
            return TimedUnit(text, None, None)
        tokens = tuple((pieces[i], *times[i]) for i in range(owned_from, last + 1))
        return TimedUnit(text, times[first][0], times[last][1], tokens)

    if not by_words:
        return [unit(piece, index, index, index) for index, piece in enumerate(pieces) if piece]
    units, owned_from = [], 0
    for text, first, last in group_words(pieces):
        units.append(unit(text, first, last, owned_from))
        owned_from = last + 1
    return units


def keep_between(units: list[TimedUnit], start_ms: float, end_ms: float) -> list[TimedUnit]:
    """The units whose centre lies in [start_ms, end_ms)."""
    return [unit for unit in units if start_ms <= unit.centre_ms < end_ms]


def text_overlap_cut(previous: list[str], current: list[str], previous_tail: int,
                     current_head: int) -> tuple[int, int]:
    """Where text-only stitching passes from one window's words to the next's.

    ``previous_tail`` / ``current_head``: how many words at the end of ``previous`` / the start of ``current`` to
    search for the overlap. They are aligned by edit distance; at the middle matched pair (i, j) the transcript
    keeps previous[:i] and resumes with current[j:] (the matched word comes from ``current``). Without a match:
    half of each searched stretch. -> (words of ``previous`` to keep, index in ``current`` to resume at)."""
    previous_tail = min(previous_tail, len(previous))
    current_head = min(current_head, len(current))
    tail_start = len(previous) - previous_tail
    pairs = matched_pairs(previous[tail_start:], current[:current_head])
    if not pairs:
        return len(previous) - previous_tail // 2, current_head // 2
    i, j = pairs[len(pairs) // 2]
    return tail_start + i, j


def same_unit(first: TimedUnit, second: TimedUnit) -> bool:
    """Two windows' estimates of one unit: their spans overlap by at least half of the shorter one."""
    overlap = min(first.end_ms, second.end_ms) - max(first.start_ms, second.start_ms)
    shorter = min(first.end_ms - first.start_ms, second.end_ms - second.start_ms)
    return overlap > 0 and overlap >= 0.5 * shorter


def stitch_by_times(stitched: list[TimedUnit], previous_units: list[TimedUnit], units: list[TimedUnit],
                    window: Window) -> list[TimedUnit]:
    """Append the units of ``window`` whose centre lies in its keep range to ``stitched`` (which ends with the
    previous window's kept units; ``previous_units`` are all of that window's units).

    At a cut shared with the previous window, one unit the two windows both heard may have its two centre
    estimates on either side of the cut: kept by both (the previous window's last kept unit and this window's
    first are :func:`same_unit`) or by neither (the previous window's first unit past the cut and this window's
    last unit before it). Such a pair is one unit, kept once: from the previous window when the mean of the two
    centres lies before the cut, else from this window. The junction is then made ordered (``append_in_order``)."""
    cut = window.keep_start_ms
    kept = keep_between(units, cut, window.keep_end_ms)
    if previous_units and math.isfinite(cut):
        past_cut = [unit for unit in previous_units if unit.centre_ms >= cut]  # left to this window
        before_cut = [unit for unit in units if unit.centre_ms < cut]  # left to the previous window
        if stitched and kept and same_unit(stitched[-1], kept[0]):  # kept twice
            if (stitched[-1].centre_ms + kept[0].centre_ms) / 2 < cut:
                kept = kept[1:]
            else:
                stitched = stitched[:-1]
        elif past_cut and before_cut and same_unit(past_cut[0], before_cut[-1]):  # kept by neither
            if (past_cut[0].centre_ms + before_cut[-1].centre_ms) / 2 < cut:
                stitched = append_in_order(stitched, past_cut[:1])
            else:
                kept = before_cut[-1:] + kept
    return append_in_order(stitched, kept)


def append_in_order(stitched: list[TimedUnit], units: list[TimedUnit]) -> list[TimedUnit]:
    """``stitched`` + ``units`` (centres in order), with the junction's times made ordered: when the first new
    unit starts before the last stitched one ends (two windows' estimates), both meet at the middle of the
    overlap, clipped to [last start, first end], and their tokens are clipped to it."""
    if not stitched or not units or units[0].start_ms >= stitched[-1].end_ms:
        return stitched + units
    last, first = stitched[-1], units[0]
    meet = min(max((last.end_ms + first.start_ms) / 2.0, last.start_ms), first.end_ms)
    last = replace(last, end_ms=meet, tokens=tuple((p, min(a, meet), min(b, meet)) for p, a, b in last.tokens))
    first = replace(first, start_ms=meet, tokens=tuple((p, max(a, meet), max(b, meet)) for p, a, b in first.tokens))
    return stitched[:-1] + [last, first] + units[1:]


def stitch_by_text(stitched: list[TimedUnit], previous_count: int, previous: Window | None, units: list[TimedUnit],
                   window: Window) -> tuple[list[TimedUnit], int]:
    """Text-only stitching (models without a CIF). ``stitched`` ends with ``previous_count`` units of the
    ``previous`` window. A window that does not overlap it is appended; otherwise :func:`text_overlap_cut` finds
    the cut among the words expected in the overlap (the overlap's share of each window's words, widened), the
    previous window's words after it are dropped and the window's words from it on appended.
    -> (stitched, units of ``window`` at its end)."""
    if previous is None or window.start >= previous.end:
        return stitched + units, len(units)
    tail = stitched[len(stitched) - previous_count:]
    overlap = previous.end - window.start
    expected_previous = previous_count * overlap / (previous.end - previous.start)
    expected_current = len(units) * overlap / (window.end - window.start)
    keep, resume = text_overlap_cut([u.text for u in tail], [u.text for u in units],
                                    math.ceil(expected_previous * TEXT_SEARCH_WIDENING) + 1,
                                    math.ceil(expected_current * TEXT_SEARCH_WIDENING) + 1)
    return stitched[:len(stitched) - previous_count + keep] + units[resume:], len(units) - resume
