"""How a long recording is cut and decoded: the options of long-form decoding, checked on construction."""

from __future__ import annotations

import math
from dataclasses import dataclass

from paraformer_asr.errors import ConfigError

SEGMENTATIONS = ("pauses", "windows")
CUT_RULES = ("middle", "quiet")
MIN_CHUNK_SECONDS = 1.0
DEFAULT_OVERLAP_SHARE = 0.2  # the command lines' overlap when none is given: a fifth of the window


@dataclass(frozen=True)
class LongFormOptions:
    """How a long recording is cut and decoded.

    segment: 'pauses' (speech segments between pauses, found by frame energy) or 'windows' (fixed windows);
    chunk_seconds: the longest window (a longer speech segment is cut into overlapping windows);
    overlap_seconds: overlap of neighbouring windows (0 .. chunk_seconds / 2);
    cut: where stitching passes from one overlapping window to the next: 'middle' of the overlap or its 'quiet'est
    stretch (in the overlap's middle half);
    batch_windows: windows decoded together (memory grows with it, not with the recording);
    speech_threshold_db: a 10 ms frame is speech when its energy exceeds the local noise floor by this much;
    min_pause_ms: shorter pauses do not end a speech segment (where pauses are not judged);
    margin_ms: (before, after) silence kept around each speech segment (never past the middle of a pause; within
    the 10-90 % range of the training utterances' own edges on the synthetic commands corpus, 30-180 ms before
    and 270-520 ms after the speech; docs/history.md, "Gaps of digital silence, of noise, and none");
    judged_pauses_ms: (low, high): with a model that scores its hypotheses (the Paraformer), pauses shorter than low
    never end a segment, pauses of high or more always do, and a pause in between is judged by decoding
    (:func:`judge_pauses`); min_pause_ms then does not apply. None: not judged."""

    segment: str = "pauses"
    chunk_seconds: float = 20.0
    overlap_seconds: float = 4.0
    cut: str = "quiet"
    batch_windows: int = 8
    speech_threshold_db: float = 12.0
    min_pause_ms: float = 300.0
    margin_ms: tuple[float, float] = (150.0, 300.0)
    judged_pauses_ms: tuple[float, float] | None = (200.0, 1000.0)

    def __post_init__(self) -> None:
        if self.segment not in SEGMENTATIONS:
            raise ConfigError(f"--segment must be one of {', '.join(SEGMENTATIONS)}, got {self.segment!r}")
        if not _finite(self.chunk_seconds) or self.chunk_seconds < MIN_CHUNK_SECONDS:
            raise ConfigError(f"--chunk-seconds must be a number >= {MIN_CHUNK_SECONDS:g}, got {self.chunk_seconds!r}")
        if not _finite(self.overlap_seconds) or not 0.0 <= self.overlap_seconds <= self.chunk_seconds / 2:
            raise ConfigError(f"--chunk-overlap must be between 0 and half of --chunk-seconds "
                              f"({self.chunk_seconds / 2:g} s), got {self.overlap_seconds!r}")
        if self.cut not in CUT_RULES:
            raise ConfigError(f"--chunk-cut must be one of {', '.join(CUT_RULES)}, got {self.cut!r}")
        if isinstance(self.batch_windows, bool) or not isinstance(self.batch_windows, int) or self.batch_windows < 1:
            raise ConfigError(f"--chunk-batch must be an integer >= 1, got {self.batch_windows!r}")
        if not _finite(self.speech_threshold_db) or self.speech_threshold_db <= 0:
            raise ConfigError(f"--speech-threshold-db must be > 0, got {self.speech_threshold_db!r}")
        if not _finite(self.min_pause_ms) or self.min_pause_ms < 0:
            raise ConfigError(f"--min-pause-ms must be >= 0, got {self.min_pause_ms!r}")
        if len(self.margin_ms) != 2 or not all(_finite(m) and m >= 0 for m in self.margin_ms):
            raise ConfigError(f"speech margins must be two numbers of ms >= 0, got {self.margin_ms!r}")
        if self.judged_pauses_ms is not None and not (
                len(self.judged_pauses_ms) == 2 and all(_finite(m) for m in self.judged_pauses_ms)
                and 0 <= self.judged_pauses_ms[0] <= self.judged_pauses_ms[1]):
            raise ConfigError(f"--judged-pauses-ms must be two numbers of ms, 0 <= LOW <= HIGH, got "
                              f"{self.judged_pauses_ms!r}")


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
