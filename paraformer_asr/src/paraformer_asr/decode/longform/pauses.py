"""Judged pauses: which pauses part a recording's segments, decided by the model's own score of the segments
decoded apart and together (the package docstring, "Judged pauses")."""

from __future__ import annotations

import math
from collections.abc import Callable

from paraformer_asr.decode.longform.plan import Window


Span = tuple[int, int]  # windows [first, last] of a plan decoded as one


def joined_window(windows: list[Window], span: Span) -> Window:
    """Windows [first, last] (neighbours of one plan) as one window: from the first's start to the last's end,
    keeping from the first's keep start to the last's keep end."""
    first, last = windows[span[0]], windows[span[1]]
    return Window(first.index, first.start, last.end, first.keep_start_ms, last.keep_end_ms, last.pause_after_ms)


def pooled_score(first: tuple[float, int], second: tuple[float, int]) -> float:
    """Two decodes' scores per token, (score, tokens) each, as one score per token: their token-weighted mean."""
    return (first[0] * first[1] + second[0] * second[1]) / max(1, first[1] + second[1])


def judge_pauses(windows: list[Window], judged_ms: tuple[float, float], longest_samples: int,
                 score: Callable[[list[Span]], list[tuple[float, int]]]) -> list[Span]:
    """Which judged pauses part segments: the plan's windows grouped into the spans that are decoded.

    A pause is judged when the window before it ends a segment and ``judged_ms[0] <= pause_after_ms <
    judged_ms[1]``. ``score(spans)`` decodes each span as one window -> (score per token, tokens) each. Rounds of
    agglomeration: every two neighbouring groups parted by a judged pause (and together at most
    ``longest_samples`` long) are decoded together; the gain of joining them is the joint score less the two
    groups' pooled score (:func:`pooled_score`); the pairs whose gain is positive and larger than both
    neighbouring pairs' (ties to the left) are joined, and the next round judges the new neighbours; until no
    join gains. A phrase cut at an inner pause reads better whole, two phrases read better apart: the model's own
    confidence tells a pause inside a sentence from one between sentences, which no threshold on its length can
    (docs/history.md, "Long recordings: pauses judged by the decoder").
    -> spans [(first, last)] covering every window once, in order."""
    low, high = judged_ms
    judged = [low <= window.pause_after_ms < high for window in windows]
    groups: list[Span] = [(index, index) for index in range(len(windows))]
    known = dict(zip(groups, score(groups)))
    while True:
        pairs = [k for k in range(len(groups) - 1) if judged[groups[k][1]]
                 and windows[groups[k + 1][1]].end - windows[groups[k][0]].start <= longest_samples]
        spans = [(groups[k][0], groups[k + 1][1]) for k in pairs]
        unknown = [span for span in spans if span not in known]
        known.update(zip(unknown, score(unknown)))
        gains = {k: known[span][0] - pooled_score(known[groups[k]], known[groups[k + 1]])
                 for k, span in zip(pairs, spans)}
        joins = {k for k, gain in gains.items()
                 if gain > 0 and gain >= gains.get(k - 1, -math.inf) and gain > gains.get(k + 1, -math.inf)}
        if not joins:
            return groups
        merged, k = [], 0
        while k < len(groups):
            merged.append((groups[k][0], groups[k + 1][1]) if k in joins else groups[k])
            k += 2 if k in joins else 1
        groups = merged
