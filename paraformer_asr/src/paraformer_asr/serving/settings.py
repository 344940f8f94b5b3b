"""Limits and batching knobs of the speech-recognition service, checked when they are made."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from paraformer_asr.errors import ConfigError


@dataclass(frozen=True)
class ServeSettings:
    """max_upload_bytes: largest accepted request body (the whole multipart upload), in bytes.
    max_audio_seconds: longest accepted audio, in seconds.
    max_batch_size: most requests decoded together in one batch.
    max_wait_ms: longest time the batcher waits for more requests once one is queued (0 = never wait)."""

    max_upload_bytes: int = 10 * 1024 * 1024
    max_audio_seconds: float = 30.0
    max_batch_size: int = 8
    max_wait_ms: float = 5.0

    def __post_init__(self) -> None:
        _require_int(self.max_upload_bytes, "max_upload_bytes", minimum=1)
        _require_int(self.max_batch_size, "max_batch_size", minimum=1)
        _require_number(self.max_audio_seconds, "max_audio_seconds", positive=True)
        _require_number(self.max_wait_ms, "max_wait_ms", positive=False)

    def to_dict(self) -> dict:
        return asdict(self)


def _require_int(value: object, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"serve setting '{name}' must be an integer >= {minimum}, got {value!r}")


def _require_number(value: object, name: str, positive: bool) -> None:
    rule = "> 0" if positive else ">= 0"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"serve setting '{name}' must be a finite number {rule}, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"serve setting '{name}' must be {rule}, got {value!r}")
