"""WAV input/output with the standard library and numpy (no audio packages).

Supported sample formats: PCM 8-bit unsigned, PCM 16/24/32-bit signed, IEEE float 32/64-bit, either as plain
``WAVE_FORMAT_PCM`` / ``WAVE_FORMAT_IEEE_FLOAT`` or wrapped in ``WAVE_FORMAT_EXTENSIBLE``. Any channel count and any
sample rate. Conversion to float is vectorised with numpy (no per-sample Python loops).

Contracts:
    read_wav(path)                      -> (samples [C, N] float32 in [-1, 1], sample_rate)
    load_audio(path, target_sample_rate) -> samples [N] float32 (mono mix-down, resampled)
    write_wav(path, samples [N] | [C, N], sample_rate)  16-bit PCM

Anything that is not a readable WAV (missing, empty, not RIFF/WAVE, truncated, unsupported encoding, no samples)
raises :class:`DataError` whose message starts with the file's path and says what is wrong.
"""

from __future__ import annotations

import struct
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from paraformer_asr.data.resample import resample
from paraformer_asr.errors import DataError

WAVE_FORMAT_PCM = 0x0001
WAVE_FORMAT_IEEE_FLOAT = 0x0003
WAVE_FORMAT_EXTENSIBLE = 0xFFFE

_RIFF_HEADER_BYTES = 12
_CHUNK_HEADER_BYTES = 8
_MIN_FMT_BYTES = 16
_EXTENSIBLE_FMT_BYTES = 40


@dataclass(frozen=True)
class WavFormat:
    """The parts of a ``fmt `` chunk needed to decode the samples."""

    encoding: int  # WAVE_FORMAT_PCM or WAVE_FORMAT_IEEE_FLOAT (EXTENSIBLE already unwrapped)
    num_channels: int
    sample_rate: int
    block_align: int
    bits_per_sample: int


def read_wav(path: str | Path) -> tuple[torch.Tensor, int]:
    """Read a WAV file. Returns (samples [C, N] float32 in [-1, 1], sample_rate in Hz)."""
    path = Path(path)
    data = _read_bytes(path)
    fmt, payload = _parse_riff(path, data)
    samples = _decode_samples(path, fmt, payload)  # [N, C]
    return torch.from_numpy(np.ascontiguousarray(samples.T)), fmt.sample_rate


def load_audio(path: str | Path, target_sample_rate: int) -> torch.Tensor:
    """Read a WAV file, mix it down to mono and resample it. Returns samples [N] float32."""
    samples, sample_rate = read_wav(path)  # [C, N]
    mono = samples.mean(dim=0)  # [N]
    return resample(mono, sample_rate, target_sample_rate)


def write_wav(path: str | Path, samples: torch.Tensor | np.ndarray, sample_rate: int) -> None:
    """Write samples [N] (mono) or [C, N] in [-1, 1] as 16-bit PCM; values outside [-1, 1] are clipped."""
    array = samples.detach().cpu().numpy() if isinstance(samples, torch.Tensor) else np.asarray(samples)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[0] < 1:
        raise ValueError(f"write_wav expects samples [N] or [C, N], got shape {tuple(array.shape)}")
    if not np.all(np.isfinite(array)):
        raise ValueError("write_wav: samples contain NaN or Inf")
    pcm = np.round(np.clip(array, -1.0, 1.0) * 32767.0).astype("<i2")  # [C, N]
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(pcm.shape[0])
        handle.setsampwidth(2)
        handle.setframerate(int(sample_rate))
        handle.writeframes(pcm.T.tobytes())  # interleaved frames [N, C]


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: audio file not found") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read audio file ({err.strerror or err})") from None
    if not data:
        raise DataError(f"{path}: file is empty, not a WAV file")
    return data


def _parse_riff(path: Path, data: bytes) -> tuple[WavFormat, memoryview]:
    """Walk the RIFF chunks; return the decoded ``fmt `` chunk and the ``data`` chunk's bytes."""
    if len(data) < _RIFF_HEADER_BYTES or data[0:4] != b"RIFF" or data[8:12] != b"WAVE":
        if data[0:4] == b"RIFX":
            raise DataError(f"{path}: big-endian WAV (RIFX) is not supported")
        raise DataError(f"{path}: not a WAV file (missing RIFF/WAVE header)")
    view = memoryview(data)
    fmt: WavFormat | None = None
    offset = _RIFF_HEADER_BYTES
    while offset + _CHUNK_HEADER_BYTES <= len(data):
        chunk_id = bytes(view[offset:offset + 4])
        (chunk_size,) = struct.unpack_from("<I", data, offset + 4)
        body_start = offset + _CHUNK_HEADER_BYTES
        body_end = body_start + chunk_size
        if chunk_id == b"fmt ":
            if body_end > len(data):
                raise DataError(f"{path}: truncated WAV file (fmt chunk cut short)")
            fmt = _parse_fmt(path, view[body_start:body_end])
        elif chunk_id == b"data":
            if fmt is None:
                raise DataError(f"{path}: invalid WAV file (data chunk before fmt chunk)")
            if body_end > len(data):
                raise DataError(
                    f"{path}: truncated WAV file (data chunk declares {chunk_size} bytes, "
                    f"only {len(data) - body_start} present)"
                )
            return fmt, view[body_start:body_end]
        offset = body_end + (chunk_size & 1)  # chunks are padded to an even size
    if fmt is None:
        raise DataError(f"{path}: invalid or truncated WAV file (no fmt chunk)")
    raise DataError(f"{path}: invalid or truncated WAV file (no data chunk)")


def _parse_fmt(path: Path, body: memoryview) -> WavFormat:
    if len(body) < _MIN_FMT_BYTES:
        raise DataError(f"{path}: invalid WAV file (fmt chunk has {len(body)} bytes, needs {_MIN_FMT_BYTES})")
    encoding, channels, sample_rate, _byte_rate, block_align, bits = struct.unpack_from("<HHIIHH", body, 0)
    if encoding == WAVE_FORMAT_EXTENSIBLE:
        if len(body) < _EXTENSIBLE_FMT_BYTES:
            raise DataError(f"{path}: invalid WAV file (WAVE_FORMAT_EXTENSIBLE fmt chunk too short)")
        (encoding,) = struct.unpack_from("<H", body, 24)  # first two bytes of the sub-format GUID
    if encoding not in (WAVE_FORMAT_PCM, WAVE_FORMAT_IEEE_FLOAT):
        raise DataError(
            f"{path}: unsupported WAV encoding 0x{encoding:04x} (only PCM and IEEE float are supported)"
        )
    if channels < 1:
        raise DataError(f"{path}: invalid WAV file (channel count {channels})")
    if sample_rate < 1:
        raise DataError(f"{path}: invalid WAV file (sample rate {sample_rate})")
    supported_bits = (8, 16, 24, 32) if encoding == WAVE_FORMAT_PCM else (32, 64)
    if bits not in supported_bits:
        kind = "PCM" if encoding == WAVE_FORMAT_PCM else "float"
        raise DataError(f"{path}: unsupported {kind} sample size of {bits} bits (supported: {supported_bits})")
    if block_align != channels * bits // 8:
        raise DataError(
            f"{path}: invalid WAV file (block align {block_align} != {channels} channels x {bits // 8} bytes)"
        )
    return WavFormat(encoding, channels, sample_rate, block_align, bits)


def _decode_samples(path: Path, fmt: WavFormat, payload: memoryview) -> np.ndarray:
    """Interleaved bytes -> float32 array [N, C] in [-1, 1]."""
    if len(payload) == 0:
        raise DataError(f"{path}: WAV file contains no audio samples")
    if len(payload) % fmt.block_align != 0:
        raise DataError(
            f"{path}: truncated WAV file (data size {len(payload)} is not a multiple of the "
            f"{fmt.block_align}-byte frame size)"
        )
    raw = np.frombuffer(payload, dtype=np.uint8)
    bits = fmt.bits_per_sample
    if fmt.encoding == WAVE_FORMAT_IEEE_FLOAT:
        values = raw.view("<f4" if bits == 32 else "<f8").astype(np.float32)
        if not np.all(np.isfinite(values)):
            raise DataError(f"{path}: float WAV file contains NaN or Inf samples")
        values = np.clip(values, -1.0, 1.0)
    elif bits == 8:
        values = (raw.astype(np.float32) - 128.0) / 128.0  # 8-bit PCM is unsigned, 128 = silence
    elif bits == 16:
        values = raw.view("<i2").astype(np.float32) / 32768.0
    elif bits == 24:
        # Put each 3-byte little-endian sample into the top of an int32 ([0, b0, b1, b2]), then shift back with sign.
        triples = raw.reshape(-1, 3)
        widened = np.zeros((triples.shape[0], 4), dtype=np.uint8)
        widened[:, 1:] = triples
        values = (widened.view("<i4")[:, 0] >> 8).astype(np.float32) / 8388608.0
    else:
        values = (raw.view("<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    return values.reshape(-1, fmt.num_channels)
