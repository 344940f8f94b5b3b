"""WAV reading: every sample format and channel count round-trips; bad files raise DataError naming the file."""

import math
import struct
import wave

import numpy as np
import pytest
import torch

from paraformer_asr.data.wav import load_audio, read_wav, write_wav
from paraformer_asr.errors import DataError

PCM, FLOAT, EXTENSIBLE = 1, 3, 0xFFFE
KSDATAFORMAT_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"


def encode_samples(values: np.ndarray, encoding: int, bits: int) -> bytes:
    """values [N, C] float in [-1, 1] -> interleaved little-endian bytes, quantised the usual way per format."""
    if encoding == FLOAT:
        return values.astype("<f4" if bits == 32 else "<f8").tobytes()
    if bits == 8:
        return np.clip(np.round(values * 128 + 128), 0, 255).astype(np.uint8).tobytes()
    scale = 2 ** (bits - 1)
    ints = np.clip(np.round(values * scale), -scale, scale - 1).astype(np.int64)
    if bits == 24:
        little = ints.reshape(-1, 1) & 0xFFFFFF
        return np.concatenate([(little >> shift) & 0xFF for shift in (0, 8, 16)], axis=1).astype(np.uint8).tobytes()
    return ints.astype("<i2" if bits == 16 else "<i4").tobytes()


def riff_wav(values: np.ndarray, rate: int, encoding: int, bits: int, extensible: bool = False) -> bytes:
    """A complete WAV file with an extra LIST chunk (odd size, padded) before the data, as real files have."""
    channels = values.shape[1]
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", EXTENSIBLE if extensible else encoding, channels, rate, rate * block, block, bits)
    if extensible:
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", encoding) + KSDATAFORMAT_TAIL
    data = encode_samples(values, encoding, bits)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    chunks += b"LIST" + struct.pack("<I", 3) + b"abc\x00"
    chunks += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def tone_signal(num_frames: int, channels: int) -> np.ndarray:
    """[N, C] in [-0.9, 0.9], a different tone per channel, reaching both extremes."""
    t = np.arange(num_frames) / 8000.0
    return np.stack([0.9 * np.sin(2 * math.pi * (300 + 200 * c) * t) for c in range(channels)], axis=1)


FORMATS = [(PCM, 8), (PCM, 16), (PCM, 24), (PCM, 32), (FLOAT, 32), (FLOAT, 64)]


@pytest.mark.parametrize("encoding,bits", FORMATS)
@pytest.mark.parametrize("channels", [1, 2, 3])
@pytest.mark.parametrize("extensible", [False, True])
def test_every_format_round_trips(tmp_path, encoding, bits, channels, extensible):
    values = tone_signal(257, channels)
    path = tmp_path / "x.wav"
    path.write_bytes(riff_wav(values, 8000, encoding, bits, extensible))
    samples, rate = read_wav(path)
    assert rate == 8000
    assert samples.dtype == torch.float32 and samples.shape == (channels, 257)
    tolerance = 1e-6 if encoding == FLOAT else 1.0 / 2 ** (bits - 1)
    np.testing.assert_allclose(samples.numpy(), values.T, atol=tolerance)


def test_24_bit_sign_and_extremes(tmp_path):
    values = np.array([[-1.0], [-0.5], [0.0], [0.5], [8388607 / 8388608]])
    path = tmp_path / "x.wav"
    path.write_bytes(riff_wav(values, 16000, PCM, 24))
    samples, _ = read_wav(path)
    np.testing.assert_array_equal(samples[0].numpy(), values[:, 0].astype(np.float32))


def test_stdlib_wave_file_and_write_wav_round_trip(tmp_path):
    stereo = tone_signal(1000, 2)
    path = tmp_path / "w.wav"
    with wave.open(str(path), "wb") as handle:  # written by the standard library, 16-bit
        handle.setnchannels(2)
        handle.setsampwidth(2)
        handle.setframerate(11025)
        handle.writeframes(encode_samples(stereo, PCM, 16))
    samples, rate = read_wav(path)
    assert rate == 11025
    np.testing.assert_allclose(samples.numpy(), stereo.T, atol=1 / 32768)
    again = tmp_path / "again.wav"
    write_wav(again, samples, rate)
    samples2, rate2 = read_wav(again)
    assert rate2 == 11025
    np.testing.assert_allclose(samples2.numpy(), samples.numpy(), atol=1.0 / 32767)


def test_load_audio_mixes_down_and_resamples(tmp_path):
    stereo = tone_signal(8000, 2)  # one second at 8 kHz
    path = tmp_path / "s.wav"
    path.write_bytes(riff_wav(stereo, 8000, FLOAT, 32))
    mono = load_audio(path, 8000)
    np.testing.assert_allclose(mono.numpy(), stereo.mean(axis=1), atol=1e-6)
    upsampled = load_audio(path, 16000)
    assert upsampled.shape == (16000,)
    np.testing.assert_allclose(upsampled[::2][200:-200].numpy(), stereo.mean(axis=1)[200:-200], atol=2e-3)


def bad_files():
    good = riff_wav(tone_signal(100, 1), 8000, PCM, 16)
    no_data = riff_wav(np.zeros((0, 1)), 8000, PCM, 16)
    alaw = bytearray(riff_wav(tone_signal(10, 1), 8000, PCM, 16))
    alaw[20:22] = struct.pack("<H", 6)  # WAVE_FORMAT_ALAW
    odd_bits = bytearray(good)
    odd_bits[34:36] = struct.pack("<H", 12)
    return {
        "empty": (b"", "empty"),
        "text": (b"hello, this is not audio at all", "not a WAV"),
        "truncated_header": (good[:30], "truncated"),
        "truncated_data": (good[:-50], "truncated"),
        "no_samples": (no_data, "no audio samples"),
        "alaw": (bytes(alaw), "unsupported WAV encoding 0x0006"),
        "odd_bits": (bytes(odd_bits), "unsupported PCM sample size of 12 bits"),
        "rifx": (b"RIFX" + good[4:], "big-endian"),
    }


@pytest.mark.parametrize("name", sorted(bad_files()))
def test_bad_files_raise_data_error_naming_the_file(tmp_path, name):
    content, reason = bad_files()[name]
    path = tmp_path / f"{name}.wav"
    path.write_bytes(content)
    with pytest.raises(DataError) as info:
        read_wav(path)
    assert str(path) in str(info.value)
    assert reason in str(info.value)


def test_missing_file_raises_data_error(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_audio(tmp_path / "absent.wav", 16000)
