"""Log-mel front end, global normalisation, SpecAugment and the voice perturbation."""

import math

import pytest
import torch

from paraformer_asr.data.frontend import (
    FeatureNormalizer,
    LogMelFrontend,
    SpecAugment,
    VoicePerturb,
    hz_to_mel,
    mel_filterbank,
    mel_to_hz,
    subtract_utterance_mean,
)
from paraformer_asr.errors import DataError


def tone(frequency: float, num_samples: int, rate: int = 16000) -> torch.Tensor:
    return torch.sin(2 * math.pi * frequency * torch.arange(num_samples, dtype=torch.float64) / rate).float()


@pytest.mark.parametrize("num_samples", [1, 399, 400, 401, 559, 560, 16000, 16001])
def test_frame_count_formula(num_samples):
    frontend = LogMelFrontend()
    features = frontend(torch.randn(num_samples))
    expected = 1 + max(0, num_samples - 400) // 160  # 25 ms window, 10 ms hop at 16 kHz
    assert features.shape == (expected, 80) and features.dtype == torch.float32
    assert frontend.num_frames(num_samples) == expected
    assert torch.isfinite(features).all()


def test_frame_matches_direct_windowed_rfft_reference():
    frontend = LogMelFrontend(sample_rate=8000, n_mels=20, win_ms=25, hop_ms=10)
    waveform = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    features = frontend(waveform)
    win, hop, n_fft = frontend.win_length, frontend.hop_length, frontend.n_fft
    window = torch.hann_window(win, periodic=True)
    for t in range(features.shape[0]):  # plain loop reference, frame by frame
        frame = waveform[t * hop : t * hop + win] * window
        power = torch.fft.rfft(frame, n=n_fft).abs().square()
        expected = torch.log(torch.clamp(power @ frontend.filters, min=1e-10))
        torch.testing.assert_close(features[t], expected, rtol=1e-4, atol=1e-4)


def test_mel_scale_is_htk_and_invertible():
    assert hz_to_mel(torch.tensor(700.0)).item() == pytest.approx(2595 * math.log10(2))
    frequencies = torch.linspace(0, 8000, 17, dtype=torch.float64)
    torch.testing.assert_close(mel_to_hz(hz_to_mel(frequencies)), frequencies)


def test_mel_filter_properties():
    filters = mel_filterbank(80, 512, 16000)  # [257, 80]
    assert filters.shape == (257, 80)
    assert (filters >= 0).all() and (filters <= 1 + 1e-6).all()
    assert (filters.sum(dim=0) > 0).all()  # no empty filter
    bin_hz = torch.linspace(0, 8000, 257)
    centroids = (filters * bin_hz[:, None]).sum(0) / filters.sum(0)
    assert (centroids[1:] > centroids[:-1]).all()  # ordered by frequency
    widths = (filters > 0).sum(dim=0)
    assert widths[-1] > widths[len(widths) // 2] > widths[0]  # wider at high frequency (mel spacing)
    for m in range(80):  # each triangle is one rise then one fall: a single contiguous support
        support = (filters[:, m] > 0).nonzero().flatten()
        assert support[-1] - support[0] + 1 == support.numel()


def test_too_many_mels_for_the_fft_is_rejected():
    with pytest.raises(ValueError, match="cover no FFT bin"):
        mel_filterbank(128, 64, 16000)


@pytest.mark.parametrize("frequency", [300.0, 1000.0, 2500.0, 6000.0])
def test_tone_energy_lands_in_its_mel_band(frequency):
    frontend = LogMelFrontend()
    features = frontend(tone(frequency, 8000))  # [T, 80]
    loudest = features.mean(dim=0).argmax().item()
    edges = mel_to_hz(torch.linspace(0, hz_to_mel(torch.tensor(8000.0)).item(), 82))
    # the filter whose triangle contains the tone with the largest weight: the centre closest to the tone
    expected = (edges[1:-1] - frequency).abs().argmin().item()
    assert abs(loudest - expected) <= 1
    assert features.mean(dim=0)[loudest] - features.mean(dim=0).median() > 20  # far above the other bands


def test_normalizer_fit_gives_zero_mean_unit_variance_and_round_trips():
    generator = torch.Generator().manual_seed(0)
    utterances = [torch.randn(int(n), 6, generator=generator) * 3 + 1000.0 for n in (5, 17, 40, 1)]
    normalizer = FeatureNormalizer.fit(iter(utterances))
    normalised = normalizer(torch.cat(utterances))
    torch.testing.assert_close(normalised.mean(dim=0), torch.zeros(6), atol=1e-4, rtol=0)
    torch.testing.assert_close(normalised.std(dim=0, unbiased=False), torch.ones(6), atol=1e-4, rtol=0)
    state = normalizer.to_dict()
    assert all(type(value) is float for value in state["mean"] + state["std"])
    restored = FeatureNormalizer.from_dict(state)
    torch.testing.assert_close(restored.mean, normalizer.mean)
    torch.testing.assert_close(restored.std, normalizer.std)


def test_normalizer_constant_dimension_and_errors():
    normalizer = FeatureNormalizer.fit([torch.ones(10, 2)])
    assert torch.isfinite(normalizer(torch.ones(3, 2))).all()
    with pytest.raises(DataError, match="no features"):
        FeatureNormalizer.fit([])
    with pytest.raises(DataError, match="invalid feature normalizer"):
        FeatureNormalizer.from_dict({"mean": [0.0]})


def test_utterance_mean_removes_a_stationary_envelope_and_ignores_digital_silence():
    frontend = LogMelFrontend()
    speech = torch.randn(8000, generator=torch.Generator().manual_seed(0))  # [N]
    plain = subtract_utterance_mean(frontend(speech))  # [T, F]
    # A gain is the same vector (log of the gain squared) on every log-mel frame: removed exactly.
    torch.testing.assert_close(subtract_utterance_mean(frontend(3.0 * speech)), plain, atol=1e-4, rtol=0)
    envelope = torch.linspace(-6.0, 6.0, 80)  # [F] any stationary spectral shape
    torch.testing.assert_close(subtract_utterance_mean(frontend(speech) + envelope), plain, atol=1e-4, rtol=0)
    # Exact zeros around the clip give floor frames: they do not move the mean of the speech frames.
    padded = frontend(torch.cat([torch.zeros(4000), speech, torch.zeros(8000)]))  # [T', F]
    active = padded.amax(dim=1) > math.log(1e-10) + 1e-3
    assert (~active).sum() >= 60  # the silence is there, as floor frames
    speech_frames = padded[active]
    torch.testing.assert_close(subtract_utterance_mean(padded)[active], speech_frames - speech_frames.mean(0))
    silent = frontend(torch.zeros(4000))
    assert torch.equal(subtract_utterance_mean(silent), torch.zeros_like(silent))  # only floor frames: no NaN


def test_normalizer_with_utterance_mean_fits_round_trips_and_reads_old_statistics():
    generator = torch.Generator().manual_seed(1)
    offsets = [torch.full((6,), float(offset)) for offset in (-20.0, 0.0, 35.0)]  # one level per utterance
    utterances = [torch.randn(int(n), 6, generator=generator) + offset for n, offset in zip((9, 30, 14), offsets)]
    normalizer = FeatureNormalizer.fit(utterances, utterance_mean=True)
    assert normalizer.utterance_mean
    torch.testing.assert_close(normalizer.mean, torch.zeros(6), atol=1e-5, rtol=0)  # every level removed
    assert normalizer.std.max() < 1.5  # the spread within utterances, not the 55-unit spread between them
    torch.testing.assert_close(normalizer(utterances[2]), normalizer(utterances[2] - offsets[2] + 100.0),
                               atol=1e-4, rtol=0)
    restored = FeatureNormalizer.from_dict(normalizer.to_dict())
    assert restored.utterance_mean
    torch.testing.assert_close(restored(utterances[0]), normalizer(utterances[0]))
    old = FeatureNormalizer.from_dict({"mean": normalizer.mean.tolist(), "std": normalizer.std.tolist()})
    assert not old.utterance_mean  # statistics saved before the flag existed: global normalisation only


def mask_runs(masked: torch.Tensor) -> list[int]:
    """Lengths of the runs of True in a bool vector."""
    runs, current = [], 0
    for value in masked.tolist() + [False]:
        if value:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs


def test_spec_augment_masks_at_most_the_requested_widths():
    augment = SpecAugment(freq_masks=1, freq_width=7, time_masks=1, time_width=11)
    features = torch.randn(60, 30) + 10.0  # never zero by chance
    longest_freq, longest_time = 0, 0
    for seed in range(200):
        out = augment(features, torch.Generator().manual_seed(seed))
        zero = out == 0
        freq_masked, time_masked = zero.all(dim=0), zero.all(dim=1)  # [F], [T]
        assert (zero == (freq_masked[None, :] | time_masked[:, None])).all()  # only whole rows/columns
        assert torch.equal(out[~zero], features[~zero])  # everything else untouched
        freq_runs, time_runs = mask_runs(freq_masked), mask_runs(time_masked)
        assert len(freq_runs) <= 1 and len(time_runs) <= 1
        longest_freq = max([longest_freq] + freq_runs)
        longest_time = max([longest_time] + time_runs)
    assert longest_freq == 7 and longest_time == 11  # the full width is reached, never exceeded


def test_spec_augment_deterministic_per_generator_and_disabled_is_identity():
    augment = SpecAugment(freq_masks=2, freq_width=10, time_masks=2, time_width=20)
    features = torch.randn(100, 80)
    first = augment(features, torch.Generator().manual_seed(5))
    assert torch.equal(first, augment(features, torch.Generator().manual_seed(5)))
    assert not torch.equal(first, augment(features, torch.Generator().manual_seed(6)))
    disabled = SpecAugment(freq_masks=0, freq_width=10, time_masks=2, time_width=0)
    assert not disabled.enabled
    assert disabled(features, torch.Generator().manual_seed(5)) is features


def test_spec_augment_time_width_capped_by_short_utterances():
    """time_width 50 on 8 frames: a band's width is drawn from U{0..8} (the cap at T), so each of 0..8 masked frames
    comes about equally often (100 of 900 draws); uncapped, a width above 8 would start before the first frame and
    mask the whole utterance in most draws."""
    augment = SpecAugment(freq_masks=0, freq_width=0, time_masks=1, time_width=50)
    masked_frames = []
    for seed in range(900):
        out = augment(torch.ones(8, 4), torch.Generator().manual_seed(seed))
        assert out.shape == (8, 4)
        masked = (out == 0).all(dim=1)  # [T]
        assert bool((masked | (out == 1).all(dim=1)).all()) and len(mask_runs(masked)) <= 1  # one band of frames
        masked_frames.append(int(masked.sum()))
    counts = [masked_frames.count(width) for width in range(9)]
    assert sum(counts) == 900 and all(60 <= count <= 140 for count in counts), counts


def reference_warp(features: torch.Tensor, centres_hz: torch.Tensor, alpha: float) -> torch.Tensor:
    """Plain loop over channels: channel j reads the spectrum at centres_hz[j] / alpha, interpolated linearly in mel
    between the two channels around it (the first or last channel outside their range)."""
    centres_mel = [float(hz_to_mel(torch.tensor(float(f), dtype=torch.float64))) for f in centres_hz]
    out = torch.empty_like(features)
    for j in range(features.shape[1]):
        wanted = float(hz_to_mel(torch.tensor(float(centres_hz[j]) / alpha, dtype=torch.float64)))
        if wanted <= centres_mel[0]:
            out[:, j] = features[:, 0]
        elif wanted >= centres_mel[-1]:
            out[:, j] = features[:, -1]
        else:
            k = max(i for i in range(len(centres_mel)) if centres_mel[i] <= wanted)
            weight = (wanted - centres_mel[k]) / (centres_mel[k + 1] - centres_mel[k])
            out[:, j] = features[:, k] * (1 - weight) + features[:, k + 1] * weight
    return out


@pytest.mark.parametrize("alpha", [0.87, 0.95, 1.0, 1.06, 1.12])
def test_frequency_warp_matches_a_per_channel_loop(alpha):
    frontend = LogMelFrontend(n_mels=40)
    features = torch.randn(7, 40, generator=torch.Generator().manual_seed(0))
    perturb = VoicePerturb.for_frontend(frontend, max_warp=0.2)
    torch.testing.assert_close(perturb.warp(features, alpha), reference_warp(features, frontend.centres_hz, alpha),
                               rtol=0, atol=1e-5)


def test_frequency_warp_moves_a_tone_as_a_higher_voice_would():
    frontend = LogMelFrontend()
    perturb = VoicePerturb.for_frontend(frontend, max_warp=0.2)
    low = frontend(tone(1000.0, 16000)).mean(dim=0)  # [80]
    high = frontend(tone(1150.0, 16000)).mean(dim=0)
    warped = perturb.warp(frontend(tone(1000.0, 16000)), 1.15).mean(dim=0)
    assert low.argmax() < high.argmax()
    assert abs(int(warped.argmax()) - int(high.argmax())) <= 1
    peaks_hz = mel_filterbank(80, 512, 16000).argmax(dim=0).double() * 16000 / 512  # each filter's peak FFT bin
    assert (peaks_hz - frontend.centres_hz).abs().max() <= 16000 / 512  # within one FFT bin of the centres


def test_envelope_level_term_is_a_gain_in_decibels():
    frontend = LogMelFrontend()
    waveform = tone(440.0, 8000) + 0.1 * torch.randn(8000, generator=torch.Generator().manual_seed(1))
    gain_db = 20 * math.log10(2.0)  # twice the amplitude
    level = VoicePerturb.envelope(torch.tensor([gain_db]), 80)  # [80]
    torch.testing.assert_close(frontend(waveform) + level, frontend(2 * waveform), rtol=0, atol=1e-4)
    tilt = VoicePerturb.envelope(torch.tensor([0.0, 6.0]), 80)  # a tilt: +6 dB at the low end, -6 dB at the top
    assert (tilt[1:] < tilt[:-1]).all() and tilt[0] == pytest.approx(-tilt[-1])
    assert float(tilt[0]) < 6.0 * math.log(10) / 10  # within the amplitude


def test_voice_perturb_draws_within_bounds_deterministic_and_disabled_is_identity():
    frontend = LogMelFrontend()
    features = frontend(tone(700.0, 4000))
    level_only = VoicePerturb.for_frontend(frontend, envelope_terms=1, envelope_max_db=6.0)
    bound = 6.0 * math.log(10) / 10
    shifts = [float((level_only(features, torch.Generator().manual_seed(s)) - features).mean()) for s in range(50)]
    assert max(abs(x) for x in shifts) <= bound + 1e-5 and max(shifts) > bound / 2 and min(shifts) < -bound / 2
    both = VoicePerturb.for_frontend(frontend, max_warp=0.1, envelope_terms=4, envelope_max_db=6.0)
    first = both(features, torch.Generator().manual_seed(3))
    assert first.shape == features.shape
    assert torch.equal(first, both(features, torch.Generator().manual_seed(3)))
    assert not torch.equal(first, both(features, torch.Generator().manual_seed(4)))
    off = VoicePerturb.for_frontend(frontend)
    assert not off.enabled and off(features, torch.Generator().manual_seed(3)) is features
    with pytest.raises(ValueError, match="max_warp"):
        VoicePerturb.for_frontend(frontend, max_warp=1.0)
