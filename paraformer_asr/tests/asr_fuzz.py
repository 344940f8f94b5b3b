"""Hypothesis strategies and settings profiles shared by the paraformer_asr fuzz tests.

Profiles (derandomized, no deadline, so CI runs the same cases every time):
    asr_fast  the fast tier (each fuzz test's own max_examples keeps it at >= 50 generated cases in all)
    asr_slow  the slow tier (>= 500 generated cases per fuzz test)

``audio_upload()`` draws one upload: ``Upload(data, filename, kind)`` where ``kind`` says what the service must do:
    "good"      readable audio of >= 1 sample (any WAV width, float, FLAC, OGG; mono/stereo; 8-48 kHz): 200
    "empty"     a valid header and no sample, or no byte at all: 400
    "garbage"   bytes that are no audio format: 400
    "nonfinite" a float WAV holding NaN or Inf samples: 400
    "truncated" a good WAV cut at a header field boundary or a few bytes into its samples: 400 (a damaged header,
                or a data chunk declaring more bytes than are left)
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import soundfile
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

_COMMON = dict(derandomize=True, deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.function_scoped_fixture])
settings.register_profile("asr_fast", **_COMMON)
settings.register_profile("asr_slow", **_COMMON)
FAST = settings.get_profile("asr_fast")
SLOW = settings.get_profile("asr_slow")

RATES = (8000, 11025, 16000, 22050, 32000, 44100, 48000)
FORMATS = (("WAV", "PCM_U8"), ("WAV", "PCM_16"), ("WAV", "PCM_24"), ("WAV", "PCM_32"), ("WAV", "FLOAT"),
           ("WAV", "DOUBLE"), ("FLAC", "PCM_16"), ("FLAC", "PCM_24"), ("OGG", "VORBIS"))
FILENAMES = ("audio.wav", "audio.flac", "audio.ogg", "audio.mp3", "notes.txt", "noextension")
# Byte offsets where the fields of a canonical 44-byte WAV header end (RIFF id, size, WAVE, fmt id, fmt size,
# format tag, channels, rate, byte rate, block align, bits, data id, data size).
WAV_FIELD_ENDS = (4, 8, 12, 16, 20, 22, 24, 28, 32, 34, 36, 40, 44)
OGG_MIN_SAMPLES = 2048  # a Vorbis stream shorter than its first block may hold no decodable sample


@dataclass(frozen=True)
class Upload:
    data: bytes
    filename: str
    kind: str


def encode(samples: np.ndarray, rate: int, fmt: str, subtype: str) -> bytes:
    """samples [N, C] float -> the bytes of an audio file."""
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def signal(num_samples: int, channels: int, rate: int, seed: int) -> np.ndarray:
    """A tone plus noise, [N, C] float32 in [-1, 1] (each channel its own tone)."""
    rng = np.random.default_rng(seed)
    t = np.arange(num_samples)[:, None] / rate  # [N, 1]
    pitch = rng.uniform(150.0, 900.0, size=(1, channels))  # [1, C]
    tone = 0.5 * np.sin(2 * np.pi * pitch * t) + 0.05 * rng.standard_normal((num_samples, channels))
    return np.clip(tone, -1.0, 1.0).astype(np.float32)


@st.composite
def good_audio(draw, max_seconds: float = 1.5) -> bytes:
    fmt, subtype = draw(st.sampled_from(FORMATS))
    rate, channels = draw(st.sampled_from(RATES)), draw(st.sampled_from((1, 2)))
    shortest = OGG_MIN_SAMPLES if fmt == "OGG" else 1
    num_samples = draw(st.one_of(st.integers(shortest, max(shortest, rate // 10)),  # short clips, under 100 ms
                                 st.integers(shortest, int(max_seconds * rate))))
    return encode(signal(num_samples, channels, rate, draw(st.integers(0, 2**16))), rate, fmt, subtype)


@st.composite
def empty_audio(draw) -> bytes:
    fmt, subtype = draw(st.sampled_from(FORMATS[:-1]))  # no OGG: libsndfile writes no Vorbis stream of 0 samples
    return draw(st.sampled_from((b"", encode(np.zeros((0, 1), np.float32), draw(st.sampled_from(RATES)), fmt,
                                                   subtype))))


@st.composite
def nonfinite_audio(draw) -> bytes:
    rate, channels = draw(st.sampled_from(RATES)), draw(st.sampled_from((1, 2)))
    samples = signal(draw(st.integers(1, rate)), channels, rate, draw(st.integers(0, 2**16)))
    positions = draw(st.lists(st.integers(0, samples.size - 1), min_size=1, max_size=4))
    samples.reshape(-1)[positions] = draw(st.sampled_from((np.nan, np.inf, -np.inf)))
    return encode(samples, rate, "WAV", draw(st.sampled_from(("FLOAT", "DOUBLE"))))


@st.composite
def truncated_wav(draw) -> bytes:
    rate = draw(st.sampled_from(RATES))
    subtype = draw(st.sampled_from(("PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT")))
    whole = encode(signal(rate // 4, draw(st.sampled_from((1, 2))), rate, 0), rate, "WAV", subtype)
    data_start = whole.index(b"data") + 8  # the float and wide PCM headers are longer than 44 bytes
    ends = [end for end in WAV_FIELD_ENDS if end < data_start] + [data_start]
    cut = draw(st.one_of(st.sampled_from(ends), st.integers(data_start, data_start + 64)))
    return whole[:cut]


def garbage() -> st.SearchStrategy[bytes]:
    """Bytes no audio format starts with: a zero byte first (no format's magic number does)."""
    return st.binary(min_size=0, max_size=256).map(lambda tail: b"\x00" + tail)


def audio_upload(max_seconds: float = 1.5) -> st.SearchStrategy[Upload]:
    """One upload; good audio is drawn twice as often as each kind of bad input."""
    kinds = [("good", good_audio(max_seconds)), ("good", good_audio(max_seconds)), ("empty", empty_audio()),
             ("garbage", garbage()), ("nonfinite", nonfinite_audio()), ("truncated", truncated_wav())]
    return st.one_of(*(st.builds(Upload, data, st.sampled_from(FILENAMES), st.just(kind)) for kind, data in kinds))
