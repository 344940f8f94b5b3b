"""Utterances with known word times, built from separately synthesised words (make_speech_corpus.py --word-times).

Each word's clip is trimmed to its audible part (:func:`audible_span`: where a short-time energy is within
``threshold_db`` of the clip's loudest moment), and the trimmed clips are joined with silent pauses, after a
leading silence and before a trailing one. A word's start/end is then exactly where its audible part begins and
ends in the joined waveform, in milliseconds; noise added afterwards does not move them.
"""

from __future__ import annotations

import numpy as np
import torch

ENERGY_WINDOW_MS = 5.0
THRESHOLD_DB = -35.0
PAUSE_S = (0.08, 0.35)  # silence between two words, drawn uniformly
TRAILING_S = (0.05, 0.25)


def audible_span(waveform: torch.Tensor, sample_rate: int, threshold_db: float = THRESHOLD_DB,
                 window_ms: float = ENERGY_WINDOW_MS) -> tuple[int, int]:
    """waveform [N] -> (first, last + 1) sample of its audible part: the samples whose centred ``window_ms``
    mean energy is within ``threshold_db`` dB of the loudest window. (0, 0) for a silent clip."""
    if waveform.dim() != 1:
        raise ValueError(f"audible_span expects a waveform [N], got shape {tuple(waveform.shape)}")
    width = max(1, round(window_ms * sample_rate / 1000.0))
    power = waveform.double().square()
    padded = torch.nn.functional.pad(power.view(1, 1, -1), (width // 2, width - 1 - width // 2))
    energy = torch.nn.functional.avg_pool1d(padded, width, stride=1).view(-1)  # [N] centred moving mean
    peak = float(energy.max()) if energy.numel() else 0.0
    if peak <= 0.0:
        return 0, 0
    loud = (energy >= peak * 10.0 ** (threshold_db / 10.0)).nonzero().view(-1)
    return int(loud[0]), int(loud[-1]) + 1


def draw_pauses(count: int, seed: int) -> tuple[list[float], float]:
    """``count`` pauses between words and one trailing silence (seconds), a pure function of ``seed``."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 11]))
    pauses = [float(p) for p in rng.uniform(*PAUSE_S, size=count)]
    return pauses, float(rng.uniform(*TRAILING_S))


def join_words(words: list[str], clips: list[torch.Tensor], pauses_s: list[float], leading_s: float,
               trailing_s: float, sample_rate: int) -> tuple[torch.Tensor, list[dict]]:
    """Trimmed word clips [N_i] joined with silences -> (waveform [N] float64, [{"word", "start_ms", "end_ms"}]).

    pauses_s: one pause per gap (len(words) - 1). A clip with nothing audible is an error (ValueError)."""
    if not len(words) == len(clips) == len(pauses_s) + 1:
        raise ValueError(f"need one clip per word and one pause per gap, got {len(words)} words, {len(clips)} clips "
                         f"and {len(pauses_s)} pauses")

    def silence(seconds: float) -> torch.Tensor:
        return torch.zeros(round(seconds * sample_rate), dtype=torch.float64)

    parts = [silence(leading_s)]
    offset = parts[0].numel()
    timed = []
    for index, (word, clip) in enumerate(zip(words, clips)):
        first, last = audible_span(clip, sample_rate)
        if last == first:
            raise ValueError(f"the synthesised clip of {word!r} is silent")
        audible = clip[first:last].double()
        timed.append({"word": word, "start_ms": round(1000.0 * offset / sample_rate, 1),
                      "end_ms": round(1000.0 * (offset + audible.numel()) / sample_rate, 1)})
        parts.append(audible)
        offset += audible.numel()
        if index < len(pauses_s):
            parts.append(silence(pauses_s[index]))
            offset += parts[-1].numel()
    parts.append(silence(trailing_s))
    return torch.cat(parts), timed
