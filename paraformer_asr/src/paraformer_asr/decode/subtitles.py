"""Subtitles (SubRip, .srt) from timed words.

Words are grouped into cues in order; a new cue starts when the next word would make the line longer than
``max_chars`` characters, the cue longer than ``max_seconds``, or when the pause before the word is longer than
``max_gap_seconds``. A cue runs from its first word's start to its last word's end.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_CHARS = 42  # a common subtitle line length
MAX_SECONDS = 5.0
MAX_GAP_SECONDS = 1.0


@dataclass(frozen=True)
class Cue:
    start_ms: float
    end_ms: float
    text: str


def group_cues(words: list[dict], max_chars: int = MAX_CHARS, max_seconds: float = MAX_SECONDS,
               max_gap_seconds: float = MAX_GAP_SECONDS) -> list[Cue]:
    """[{"word", "start_ms", "end_ms"}] in time order -> cues."""
    cues: list[Cue] = []
    current: list[dict] = []
    for word in words:
        if current:
            text = " ".join(w["word"] for w in current + [word])
            too_long = len(text) > max_chars or word["end_ms"] - current[0]["start_ms"] > max_seconds * 1000.0
            if too_long or word["start_ms"] - current[-1]["end_ms"] > max_gap_seconds * 1000.0:
                cues.append(_cue(current))
                current = []
        current.append(word)
    if current:
        cues.append(_cue(current))
    return cues


def _cue(words: list[dict]) -> Cue:
    return Cue(words[0]["start_ms"], words[-1]["end_ms"], " ".join(w["word"] for w in words))


def srt_time(ms: float) -> str:
    """Milliseconds -> 'HH:MM:SS,mmm'."""
    total = max(0, round(ms))
    hours, rest = divmod(total, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d},{millis:03d}"


def format_srt(cues: list[Cue]) -> str:
    """Numbered cues, 'start --> end' lines, a blank line after each."""
    blocks = [f"{number}\n{srt_time(cue.start_ms)} --> {srt_time(cue.end_ms)}\n{cue.text}\n"
              for number, cue in enumerate(cues, start=1)]
    return "\n".join(blocks)
