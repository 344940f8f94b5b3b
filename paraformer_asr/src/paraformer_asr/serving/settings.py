"""Limits and batching knobs of the speech-recognition service, checked when they are made."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from paraformer_asr.decode.longform import LongFormOptions
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.errors import ConfigError

MIB = 1024 * 1024


@dataclass(frozen=True)
class ServeSettings:
    """max_upload_bytes: largest accepted request body (the whole multipart upload), in bytes; the default,
    128 MiB, holds an hour of 16 kHz 16-bit mono WAV (110 MiB) or FLAC / OGG of longer.
    max_audio_seconds: longest accepted audio, in seconds (default one hour).
    max_batch_size: most short requests decoded together in one batch.
    max_wait_ms: longest time the batcher waits for more requests once one is queued (0 = never wait).
    long_form: how recordings longer than its ``chunk_seconds`` are cut and decoded (their own lane).
    long_yield_ms: longest wait of the long-recording lane for idle short requests, per window batch.
    max_long_recordings: long recordings queued or being decoded at once; more are refused with 503.
    decoding: how every request is decoded (decode/options.py; greedy by default), its hotword list included.
    max_hotword_bytes, max_hotwords: the largest ``hotwords`` form field a request may send (UTF-8 bytes), and the most
    phrases it may list (its list is added to the server's).
    max_streams: WebSocket streams (/stream) open at once; more are refused (close code 1013). Their model work runs
    on as many worker threads.
    max_stream_seconds: the most audio one stream may send, in seconds (close code 1009 past it).
    stream_idle_seconds: a stream that sends no message for this long is closed (1008)."""

    max_upload_bytes: int = 128 * MIB
    max_audio_seconds: float = 3600.0
    max_batch_size: int = 8
    max_wait_ms: float = 5.0
    long_form: LongFormOptions = field(default_factory=LongFormOptions)
    long_yield_ms: float = 200.0
    max_long_recordings: int = 4
    decoding: DecodingOptions = field(default_factory=DecodingOptions)
    max_hotword_bytes: int = 64 * 1024
    max_hotwords: int = 1000
    max_streams: int = 16
    max_stream_seconds: float = 600.0
    stream_idle_seconds: float = 30.0

    def __post_init__(self) -> None:
        _require_int(self.max_upload_bytes, "max_upload_bytes", minimum=1)
        _require_int(self.max_batch_size, "max_batch_size", minimum=1)
        _require_int(self.max_long_recordings, "max_long_recordings", minimum=1)
        _require_int(self.max_hotword_bytes, "max_hotword_bytes", minimum=1)
        _require_int(self.max_hotwords, "max_hotwords", minimum=1)
        _require_int(self.max_streams, "max_streams", minimum=1)
        _require_number(self.max_stream_seconds, "max_stream_seconds", positive=True)
        _require_number(self.stream_idle_seconds, "stream_idle_seconds", positive=True)
        _require_number(self.max_audio_seconds, "max_audio_seconds", positive=True)
        _require_number(self.max_wait_ms, "max_wait_ms", positive=False)
        _require_number(self.long_yield_ms, "long_yield_ms", positive=False)
        if not isinstance(self.long_form, LongFormOptions):
            raise ConfigError(f"serve setting 'long_form' must be LongFormOptions, got {self.long_form!r}")
        if not isinstance(self.decoding, DecodingOptions):
            raise ConfigError(f"serve setting 'decoding' must be DecodingOptions, got {self.decoding!r}")

    def to_dict(self) -> dict:
        """Every setting as plain data; the server's hotword list as the number of its phrases (None: no list)."""
        values = asdict(self)
        hotwords = self.decoding.hotwords
        values["decoding"]["hotwords"] = None if hotwords is None else len(hotwords)
        return values


def _require_int(value: object, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"serve setting '{name}' must be an integer >= {minimum}, got {value!r}")


def _require_number(value: object, name: str, positive: bool) -> None:
    rule = "> 0" if positive else ">= 0"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"serve setting '{name}' must be a finite number {rule}, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"serve setting '{name}' must be {rule}, got {value!r}")
