"""Audio files through soundfile (libsndfile): open, probe, read (whole file or a segment), write.

Decoding file formats is libsndfile's job: WAV of any PCM width (8-bit unsigned, 16/24/32-bit signed), IEEE float,
A-law / mu-law, plain or ``WAVE_FORMAT_EXTENSIBLE``, FLAC, OGG (Vorbis, Opus), MP3, AIFF and the other formats
``soundfile.available_formats()`` lists, any channel count, any sample rate. What the package does by hand comes
after: the mono mix-down (channel mean) and the resampler (data/resample.py).

Contracts:
    open_audio(source, name)                               -> context manager yielding an open soundfile.SoundFile
    check_wav_data(stream, name)                           -> None; DataError for a WAV whose data chunk is cut short
    audio_info(path)                                       -> AudioInfo(sample_rate, num_frames, channels, format)
    read_frames(handle, name, start_frame=0, num_frames=-1) -> samples [C, N] float32 in [-1, 1]
    read_audio(path, start_s=None, end_s=None)             -> (samples [C, N] float32 in [-1, 1], sample_rate)
    to_mono(samples [C, N], sample_rate, target_rate)      -> [N'] float32 (channel mean, resampled)
    load_audio(path, target_sample_rate, start_s=None, end_s=None) -> [N] float32 (mono, at the target rate)
    write_audio(path, samples [N] | [C, N], sample_rate, subtype=None)   format from the suffix (.wav, .flac, .ogg)
    noise_floor(samples [N] float array, sample_rate)      -> RMS of the quietest tenth of its 20 ms blocks

``start_s`` / ``end_s`` select a segment in seconds (``end_s`` None = to the end of the file); only its frames are
decoded (a seek, then a read). ``source`` may be a path or a binary file object (e.g. ``io.BytesIO`` of an upload).

Anything unreadable (missing, empty, not audio, damaged header, no samples, NaN/Inf samples, a segment outside the
file) raises :class:`DataError` whose message starts with ``name`` (the file's path by default) and says what is
wrong. A WAV whose data chunk is cut short (a partial upload or copy) is refused too, with the bytes its header
declares and the bytes present: libsndfile would read it up to the end of the file as if whole. Its RIFF chunks are
walked here (:func:`check_wav_data`); other formats are left to libsndfile.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soundfile
import torch

from paraformer_asr.data.resample import resample
from paraformer_asr.errors import DataError

AudioSource = str | Path | BinaryIO

WAV_UNKNOWN_SIZE = 0xFFFFFFFF  # the data size a streaming writer puts when it cannot know it: read to the end


@dataclass(frozen=True)
class AudioInfo:
    """What the header says: enough for durations and frame counts without decoding."""

    sample_rate: int
    num_frames: int  # samples per channel
    channels: int
    format: str  # e.g. "WAV", "FLAC", "OGG"

    @property
    def duration_s(self) -> float:
        return self.num_frames / self.sample_rate


@contextmanager
def open_audio(source: AudioSource, name: str | None = None) -> Iterator[soundfile.SoundFile]:
    """Open ``source`` for reading (only the header is read). DataError ``'<name>: ...'`` when that fails."""
    name = str(source) if name is None else name
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise DataError(f"{name}: audio file not found")
        if path.stat().st_size == 0:
            raise DataError(f"{name}: file is empty, not an audio file")
        with path.open("rb") as stream:
            check_wav_data(stream, name)
        source = str(path)
    elif _remaining_bytes(source) == 0:
        raise DataError(f"{name}: file is empty, not an audio file")
    else:
        check_wav_data(source, name)
    try:
        handle = soundfile.SoundFile(source)
    except (soundfile.SoundFileError, RuntimeError) as err:
        raise DataError(f"{name}: not a readable audio file ({_reason(err)})") from None
    with handle:
        if handle.samplerate < 1:
            raise DataError(f"{name}: invalid sample rate {handle.samplerate}")
        yield handle


def check_wav_data(stream: BinaryIO, name: str) -> None:
    """DataError ``'<name>: truncated WAV file: ...'`` when the RIFF/WAVE file at the stream's position has a data
    chunk declaring more bytes than the file holds after it. The chunks are walked ('RIFF', size, 'WAVE', then id and
    size per chunk, each padded to an even length) until 'data'; anything else (another format, a header cut before
    the data chunk, a streaming writer's unknown size) is left to libsndfile. The stream's position is restored."""
    start = stream.tell()
    try:
        size = stream.seek(0, 2) - start  # the file's bytes from its first
        stream.seek(start)
        header = stream.read(12)
        if len(header) < 12 or header[:4] != b"RIFF" or header[8:] != b"WAVE":
            return
        offset = 12
        while offset + 8 <= size:
            stream.seek(start + offset)
            chunk_id, chunk_size = struct.unpack("<4sI", stream.read(8))
            if chunk_id == b"data":
                present = size - offset - 8
                if chunk_size != WAV_UNKNOWN_SIZE and present < chunk_size:
                    raise DataError(f"{name}: truncated WAV file: its data chunk declares {chunk_size} bytes but "
                                    f"only {present} are present (the file was cut short)")
                return
            offset += 8 + chunk_size + chunk_size % 2
    finally:
        stream.seek(start)


def audio_info(source: AudioSource, name: str | None = None) -> AudioInfo:
    """Sample rate, frame count, channels and format from the header (no samples decoded)."""
    with open_audio(source, name) as handle:
        return AudioInfo(handle.samplerate, handle.frames, handle.channels, handle.format)


def read_frames(handle: soundfile.SoundFile, name: str, start_frame: int = 0, num_frames: int = -1) -> torch.Tensor:
    """Decode ``num_frames`` frames (-1 = to the end) from ``start_frame`` of an open file -> [C, N] float32."""
    try:
        if handle.tell() != start_frame:  # an open file may be read again and again (decode/longform/reader.py)
            handle.seek(start_frame)
        frames = handle.read(num_frames, dtype="float32", always_2d=True)  # [N, C]
    except (soundfile.SoundFileError, RuntimeError) as err:
        raise DataError(f"{name}: cannot decode the audio ({_reason(err)})") from None
    if frames.shape[0] == 0:
        raise DataError(f"{name}: file contains no audio samples")
    if not np.isfinite(frames).all():
        raise DataError(f"{name}: file contains NaN or Inf samples")
    np.clip(frames, -1.0, 1.0, out=frames)  # float files may exceed full scale
    return torch.from_numpy(np.ascontiguousarray(frames.T))


def read_audio(source: AudioSource, start_s: float | None = None, end_s: float | None = None,
               name: str | None = None) -> tuple[torch.Tensor, int]:
    """Read a file, or the segment [start_s, end_s) of it. -> (samples [C, N] float32 in [-1, 1], sample_rate)."""
    name = str(source) if name is None else name
    with open_audio(source, name) as handle:
        start, count = segment_frames(handle.samplerate, handle.frames, start_s, end_s, name)
        return read_frames(handle, name, start, count), handle.samplerate


def segment_frames(sample_rate: int, num_frames: int, start_s: float | None, end_s: float | None,
                   name: str) -> tuple[int, int]:
    """Seconds -> (first frame, frame count; -1 = to the end). A segment that ends past the file is cut at its end;
    one that starts at or after the end, or is empty, raises DataError."""
    if start_s is None and end_s is None:
        return 0, -1
    start = round((start_s or 0.0) * sample_rate)
    end = num_frames if end_s is None else min(round(end_s * sample_rate), num_frames)
    if start >= num_frames:
        raise DataError(f"{name}: the segment starts at {start_s:g} s but the file is only "
                        f"{num_frames / sample_rate:.3f} s long")
    if end <= start:
        raise DataError(f"{name}: the segment [{start_s or 0.0:g} s, {end_s:g} s) holds no samples")
    return start, end - start


FLOOR_BLOCK_S = 0.02
FLOOR_QUANTILE = 0.1


def noise_floor(samples: np.ndarray, sample_rate: int) -> float:
    """samples [N] -> the RMS of its quietest FLOOR_QUANTILE of FLOOR_BLOCK_S blocks (0 for fewer than one block): how
    loud a recording is between its words."""
    block = max(1, round(FLOOR_BLOCK_S * sample_rate))
    count = samples.shape[0] // block
    if count == 0:
        return 0.0
    power = np.square(samples[:count * block].reshape(count, block)).mean(axis=1)  # [count]
    quiet = np.sort(power)[:max(1, round(count * FLOOR_QUANTILE))]
    return float(np.sqrt(quiet.mean()))


def to_mono(samples: torch.Tensor, sample_rate: int, target_sample_rate: int) -> torch.Tensor:
    """samples [C, N] at ``sample_rate`` -> channel mean [N'] resampled to ``target_sample_rate``."""
    return resample(samples.mean(dim=0), sample_rate, target_sample_rate)


def load_audio(source: AudioSource, target_sample_rate: int, start_s: float | None = None,
               end_s: float | None = None, name: str | None = None) -> torch.Tensor:
    """Read a file (or a segment of it), mix it down to mono and resample it. Returns samples [N] float32."""
    samples, sample_rate = read_audio(source, start_s, end_s, name)  # [C, N]
    return to_mono(samples, sample_rate, target_sample_rate)


def write_audio(path: str | Path, samples: torch.Tensor | np.ndarray, sample_rate: int,
                subtype: str | None = None) -> None:
    """Write samples [N] (mono) or [C, N] in [-1, 1]; values outside are clipped. The format follows the suffix
    (.wav, .flac, .ogg, ...); ``subtype`` None is soundfile's default for it (16-bit PCM for WAV and FLAC,
    Vorbis for OGG). 16-bit PCM is quantised here, ``round(x * 32767)``, so that every format stores the same
    integers."""
    array = samples.detach().cpu().numpy() if isinstance(samples, torch.Tensor) else np.asarray(samples)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[0] < 1:
        raise ValueError(f"write_audio expects samples [N] or [C, N], got shape {tuple(array.shape)}")
    if not np.all(np.isfinite(array)):
        raise ValueError("write_audio: samples contain NaN or Inf")
    subtype = subtype or soundfile.default_subtype(Path(path).suffix.lstrip(".").upper())
    if subtype is None:
        raise ValueError(f"write_audio: cannot tell the audio format from the suffix of {path}")
    frames = np.clip(array, -1.0, 1.0).T  # [N, C]
    if subtype == "PCM_16":
        frames = np.round(frames * 32767.0).astype(np.int16)  # libsndfile's own conversion differs between formats
    soundfile.write(str(path), np.ascontiguousarray(frames), int(sample_rate), subtype=subtype)


def _remaining_bytes(stream: BinaryIO) -> int:
    position = stream.tell()
    size = stream.seek(0, 2) - position
    stream.seek(position)
    return size


def _reason(err: Exception) -> str:
    """libsndfile's own words (e.g. 'Format not recognised.') without the file object's repr."""
    return str(getattr(err, "error_string", None) or err)
