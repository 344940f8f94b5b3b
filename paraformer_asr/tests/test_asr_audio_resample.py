"""Windowed-sinc resampler: tones keep their frequency, content above the new Nyquist is removed, loop reference."""

import math

import numpy as np
import pytest
import torch

import paraformer_asr.data.resample as resample_module
from paraformer_asr.data.resample import StreamingResampler, resample


def tone(frequency: float, rate: int, seconds: float = 0.5) -> torch.Tensor:
    t = torch.arange(int(rate * seconds), dtype=torch.float64) / rate
    return torch.sin(2 * math.pi * frequency * t).float()


def peak_frequency(signal: torch.Tensor, rate: int) -> float:
    windowed = signal.double().numpy() * np.hanning(signal.numel())
    spectrum = np.abs(np.fft.rfft(windowed))
    return float(np.argmax(spectrum)) * rate / signal.numel()


def level_db(signal: torch.Tensor) -> float:
    """RMS of the middle half relative to a full-scale sine, in dB."""
    middle = signal[signal.numel() // 4 : 3 * signal.numel() // 4].double()
    return 20 * math.log10(middle.square().mean().sqrt().item() * math.sqrt(2) + 1e-300)


def bessel_i0(x: float) -> float:
    total, term, k = 1.0, 1.0, 1
    while term > 1e-17 * total:
        term *= (x / (2 * k)) ** 2
        total += term
        k += 1
    return total


def loop_resample(x, orig, new, zero_crossings=16, rolloff=0.945, beta=8.0):
    """Direct definition: y[j] = sum_i x[i] h(i - j * orig / new), h a Kaiser-windowed sinc, one sample at a time."""
    cutoff = min(orig, new) * rolloff / orig  # relative to the input rate, times two
    num_out = math.ceil(len(x) * new / orig)
    out = []
    for j in range(num_out):
        position = j * orig / new
        total = 0.0
        for i, value in enumerate(x):
            scaled = (i - position) * cutoff
            if abs(scaled) >= zero_crossings:
                continue
            sinc = 1.0 if scaled == 0 else math.sin(math.pi * scaled) / (math.pi * scaled)
            window = bessel_i0(beta * math.sqrt(1 - (scaled / zero_crossings) ** 2)) / bessel_i0(beta)
            total += value * cutoff * sinc * window
        out.append(total)
    return out


@pytest.mark.parametrize(
    "orig,new", [(22050, 16000), (16000, 22050), (48000, 16000), (8000, 16000), (7, 5), (16001, 16000), (16000, 44101)]
)
def test_matches_plain_loop_reference(orig, new):
    x = torch.randn(60, generator=torch.Generator().manual_seed(orig + new), dtype=torch.float64)
    expected = loop_resample(x.tolist(), orig, new)
    got = resample(x, orig, new)
    assert got.dtype == torch.float64 and got.shape == (len(expected),)
    np.testing.assert_allclose(got.numpy(), np.array(expected), atol=1e-9)


@pytest.mark.parametrize("orig,new", [(44100, 16000), (16000, 8000), (11025, 16000)])
def test_polyphase_and_gather_paths_agree(monkeypatch, orig, new):
    x = torch.randn(2, 3000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    polyphase = resample(x, orig, new)
    monkeypatch.setattr(resample_module, "_MAX_POLYPHASE_WEIGHTS", 0)  # force the gather path
    torch.testing.assert_close(resample(x, orig, new), polyphase, atol=1e-12, rtol=0)


def test_equal_rates_is_identity():
    x = torch.randn(3, 100)
    assert resample(x, 16000, 16000) is x


@pytest.mark.parametrize("orig,new", [(44100, 16000), (22050, 16000), (8000, 16000), (48000, 16000), (16000, 44101)])
@pytest.mark.parametrize("frequency", [440.0, 3000.0])
def test_tone_keeps_its_frequency_and_level(orig, new, frequency):
    y = resample(tone(frequency, orig), orig, new)
    assert y.numel() == math.ceil(tone(frequency, orig).numel() * new / orig)
    assert abs(peak_frequency(y, new) - frequency) <= new / y.numel()  # within one FFT bin
    assert abs(level_db(y)) < 0.1


@pytest.mark.parametrize("orig,frequency", [(48000, 12000.0), (44100, 9000.0), (22050, 10000.0), (32000, 14000.0)])
def test_content_above_new_nyquist_is_suppressed(orig, frequency):
    y = resample(tone(frequency, orig), orig, 16000)
    assert level_db(y) < -40.0


def test_batched_channels_match_single_channel():
    x = torch.randn(3, 500)
    batched = resample(x, 22050, 16000)
    for channel in range(3):
        torch.testing.assert_close(batched[channel], resample(x[channel], 22050, 16000))


def test_hann_window_also_band_limits():
    assert level_db(resample(tone(12000.0, 48000), 48000, 16000, window="hann")) < -40.0
    assert abs(level_db(resample(tone(1000.0, 48000), 48000, 16000, window="hann"))) < 0.1


def test_invalid_rates_rejected():
    with pytest.raises(ValueError, match="orig_sample_rate"):
        resample(torch.zeros(10), 0, 16000)
    with pytest.raises(ValueError, match="new_sample_rate"):
        resample(torch.zeros(10), 16000, 16000.5)


@pytest.mark.parametrize("orig, new", [(44100, 16000), (48000, 16000), (8000, 16000), (22050, 16000),
                                       (16001, 16000), (16000, 16000)])
def test_streaming_resampler_equals_resampling_the_whole_signal(orig, new):
    """Pieces of every size (one sample, under and over a period of the reduced ratio) give the whole signal's
    samples; 16001 -> 16000 takes the gather path."""
    signal = torch.randn(9000, generator=torch.Generator().manual_seed(orig))
    stream, outputs, start = StreamingResampler(orig, new), [], 0
    for size in (1, 7, 480, 3000, 13, 2205, 160) * 3:
        outputs.append(stream.accept(signal[start:start + size]))
        start += size
    outputs += [stream.accept(signal[start:]), stream.finish()]
    torch.testing.assert_close(torch.cat(outputs), resample(signal, orig, new), atol=2e-6, rtol=0)
    if orig != new:
        assert outputs[1].numel() == 0  # 8 samples in: nothing complete yet
        assert stream.buffer.numel() < 2 * (stream.reach + stream.down)  # only the kernel's reach is kept

