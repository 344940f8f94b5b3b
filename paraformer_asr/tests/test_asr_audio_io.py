"""Audio files through soundfile: every WAV sample format, FLAC and OGG, segments read by frames, bad files raise
DataError naming the file."""

import io
import math
import struct
import wave

import numpy as np
import pytest
import soundfile
import torch

from paraformer_asr.data.audio import AudioInfo, audio_info, load_audio, read_audio, write_audio
from paraformer_asr.data.frontend import LogMelFrontend
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
    """A complete WAV file, byte by byte, with an extra LIST chunk (odd size, padded) before the data."""
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
def test_every_wav_format_round_trips(tmp_path, encoding, bits, channels, extensible):
    values = tone_signal(257, channels)
    path = tmp_path / "x.wav"
    path.write_bytes(riff_wav(values, 8000, encoding, bits, extensible))
    samples, rate = read_audio(path)
    assert rate == 8000
    assert samples.dtype == torch.float32 and samples.shape == (channels, 257)
    tolerance = 1e-6 if encoding == FLOAT else 1.0 / 2 ** (bits - 1)
    np.testing.assert_allclose(samples.numpy(), values.T, atol=tolerance)
    assert audio_info(path) == AudioInfo(8000, 257, channels, "WAVEX" if extensible else "WAV")


def test_24_bit_sign_and_extremes(tmp_path):
    values = np.array([[-1.0], [-0.5], [0.0], [0.5], [8388607 / 8388608]])
    path = tmp_path / "x.wav"
    path.write_bytes(riff_wav(values, 16000, PCM, 24))
    samples, _ = read_audio(path)
    np.testing.assert_array_equal(samples[0].numpy(), values[:, 0].astype(np.float32))


def test_float_samples_beyond_full_scale_are_clipped(tmp_path):
    path = tmp_path / "loud.wav"
    path.write_bytes(riff_wav(np.array([[1.5], [-2.0], [0.25]]), 8000, FLOAT, 32))
    np.testing.assert_array_equal(read_audio(path)[0][0].numpy(), np.array([1.0, -1.0, 0.25], dtype=np.float32))


def test_stdlib_wave_file_and_write_audio_round_trip(tmp_path):
    stereo = tone_signal(1000, 2)
    path = tmp_path / "w.wav"
    with wave.open(str(path), "wb") as handle:  # written by the standard library, 16-bit
        handle.setnchannels(2)
        handle.setsampwidth(2)
        handle.setframerate(11025)
        handle.writeframes(encode_samples(stereo, PCM, 16))
    samples, rate = read_audio(path)
    assert rate == 11025
    np.testing.assert_allclose(samples.numpy(), stereo.T, atol=1 / 32768)
    again = tmp_path / "again.wav"
    write_audio(again, samples, rate)
    assert soundfile.info(str(again)).subtype == "PCM_16"
    samples2, rate2 = read_audio(again)
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


def test_flac_and_wav_of_the_same_samples_give_identical_features(tmp_path):
    noise = torch.randn(12_000, generator=torch.Generator().manual_seed(0)) * 0.2
    write_audio(tmp_path / "a.wav", noise, 16000)
    write_audio(tmp_path / "a.flac", noise, 16000)
    assert audio_info(tmp_path / "a.flac").format == "FLAC"
    wav, flac = load_audio(tmp_path / "a.wav", 16000), load_audio(tmp_path / "a.flac", 16000)
    assert torch.equal(wav, flac)
    frontend = LogMelFrontend()
    assert torch.equal(frontend(wav), frontend(flac))


def test_ogg_vorbis_and_alaw_wav_are_read(tmp_path):
    tone = torch.from_numpy(tone_signal(16000, 1)[:, 0]).float() * 0.5
    write_audio(tmp_path / "a.ogg", tone, 16000)
    ogg = load_audio(tmp_path / "a.ogg", 16000)
    assert abs(ogg.numel() - 16000) <= 1024 and 0.3 < float(ogg.abs().max()) < 0.7  # lossy, same level
    write_audio(tmp_path / "alaw.wav", tone, 8000, subtype="ALAW")
    np.testing.assert_allclose(load_audio(tmp_path / "alaw.wav", 8000).numpy(), tone.numpy(), atol=0.02)


def test_a_segment_is_read_by_frames_and_equals_the_slice(tmp_path, monkeypatch):
    signal = torch.linspace(-0.5, 0.5, 16000)
    write_audio(tmp_path / "long.flac", signal, 16000)
    whole, _ = read_audio(tmp_path / "long.flac")
    requested = []
    original_read = soundfile.SoundFile.read
    monkeypatch.setattr(soundfile.SoundFile, "read",
                        lambda self, frames=-1, **kw: requested.append(frames) or original_read(self, frames, **kw))
    part, rate = read_audio(tmp_path / "long.flac", start_s=0.25, end_s=0.5)
    assert requested == [4000]  # only the segment's frames are decoded
    assert torch.equal(part, whole[:, 4000:8000]) and rate == 16000
    assert torch.equal(read_audio(tmp_path / "long.flac", start_s=0.75)[0], whole[:, 12000:])
    assert torch.equal(read_audio(tmp_path / "long.flac", end_s=9.0)[0], whole)  # cut at the file's end
    with pytest.raises(DataError, match="segment starts at 2 s but the file is only 1.000 s long"):
        read_audio(tmp_path / "long.flac", start_s=2.0)


@pytest.mark.parametrize("cut, present", [(60, 4), (-50, 150), (56, 0)])  # 8 + 4 bytes of LIST before the data
def test_a_wav_cut_short_in_its_data_chunk_is_refused_naming_the_declared_and_present_bytes(tmp_path, cut, present):
    """A valid WAV of 100 16-bit samples (200 data bytes from byte 56) cut to 60 bytes, 50 bytes before its end, or
    right after the data chunk's header: libsndfile would read what is left as if whole."""
    content = riff_wav(tone_signal(100, 1), 8000, PCM, 16)[:cut]
    path = tmp_path / "cut.wav"
    path.write_bytes(content)
    reason = f"truncated WAV file: its data chunk declares 200 bytes but only {present} are present"
    for read in (read_audio, audio_info, lambda source: load_audio(source, 16000)):
        with pytest.raises(DataError) as info:
            read(path)
        assert str(info.value).startswith(f"{path}: {reason}")
    upload = io.BytesIO(content)
    with pytest.raises(DataError) as info:
        read_audio(upload, name="uploaded file")
    assert str(info.value).startswith(f"uploaded file: {reason}") and upload.tell() == 0


def test_complete_short_wavs_and_an_unknown_data_size_still_load(tmp_path):
    """A whole WAV of 1 or 3 samples, one whose odd-sized data chunk is followed by a pad byte and another chunk, and
    one whose data size is a streaming writer's 0xFFFFFFFF (read to the end) are whole files."""
    for num_frames in (1, 3):
        values = tone_signal(num_frames, 1)
        path = tmp_path / f"short{num_frames}.wav"
        path.write_bytes(riff_wav(values, 8000, PCM, 16))
        samples, rate = read_audio(path)
        assert rate == 8000 and samples.shape == (1, num_frames)
        np.testing.assert_allclose(samples[0].numpy(), values[:, 0], atol=1 / 32768)
    odd = riff_wav(tone_signal(3, 1), 8000, PCM, 8) + b"\x00" + b"LIST" + struct.pack("<I", 2) + b"ab"  # 3 data bytes
    assert read_audio(io.BytesIO(odd))[0].shape == (1, 3)
    whole = riff_wav(tone_signal(10, 1), 8000, PCM, 16)
    streamed = whole.replace(b"data" + struct.pack("<I", 20), b"data" + struct.pack("<I", 0xFFFFFFFF))
    assert read_audio(io.BytesIO(streamed))[0].shape == (1, 10)


def bad_files():
    good = riff_wav(tone_signal(100, 1), 8000, PCM, 16)
    return {
        "empty": (b"", "file is empty"),
        "text": (b"hello, this is not audio at all", "not a readable audio file (Format not recognised"),
        "truncated_header": (good[:30], "not a readable audio file"),
        "no_samples": (riff_wav(np.zeros((0, 1)), 8000, PCM, 16), "no audio samples"),
        "nan": (riff_wav(np.array([[0.1], [np.nan], [0.2]]), 8000, FLOAT, 32), "NaN or Inf"),
        "bad_rifx": (b"RIFX" + good[4:], "not a readable audio file"),
    }


@pytest.mark.parametrize("name", sorted(bad_files()))
def test_bad_files_raise_data_error_naming_the_file(tmp_path, name):
    content, reason = bad_files()[name]
    path = tmp_path / f"{name}.wav"
    path.write_bytes(content)
    with pytest.raises(DataError) as info:
        read_audio(path)
    assert str(info.value).startswith(f"{path}: ") and reason in str(info.value)
    with pytest.raises(DataError) as info:  # the same from memory, under the name given
        read_audio(io.BytesIO(content), name="uploaded file")
    assert str(info.value).startswith("uploaded file: ") and reason in str(info.value)


def test_missing_file_raises_data_error(tmp_path):
    with pytest.raises(DataError, match="absent.wav: audio file not found"):
        load_audio(tmp_path / "absent.wav", 16000)
    with pytest.raises(DataError, match="audio file not found"):
        audio_info(tmp_path / "absent.flac")
