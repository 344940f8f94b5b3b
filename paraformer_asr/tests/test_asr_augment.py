"""Augmentation toward real recordings (data/augment.py): each stage against a plain reference (direct convolution,
a DFT matrix, the textbook mu-law, a circular convolution loop), the drawn SNR and room measured back, shapes and
dtypes kept, determinism, everything off leaving the waveform alone, and only training items augmented."""

import json
import math

import numpy as np
import pytest
import torch

from paraformer_asr.config import (AugmentConfig, LoudnessConfig, MicrophoneConfig, NoiseConfig, ReverbConfig,
                                   TelephoneConfig, config_from_dict)
from paraformer_asr.data.audio import write_audio
from paraformer_asr.data.augment import (NOISE, REVERB, RecordingAugment, add_noise, babble, band_pass, equalise,
                                         fft_convolve, mu_law_roundtrip, pink_noise, random_eq_db, reverberate,
                                         synthetic_room_impulse, telephone, white_noise)
from paraformer_asr.data.setup import build_data
from paraformer_asr.errors import ConfigError

from asr_helpers import speech_like, tiny_audio_config

RATE = 16000


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def snr_db(clean: torch.Tensor, noisy: torch.Tensor) -> float:
    noise = noisy.double() - clean.double()
    return 10 * math.log10(float(clean.double().pow(2).mean()) / float(noise.pow(2).mean()))


def tone(frequency: float, num_samples: int, rate: int = RATE) -> torch.Tensor:
    return 0.5 * torch.sin(2 * math.pi * frequency * torch.arange(num_samples) / rate)


# ----------------------------------------------------------------------------- room


def test_fft_convolve_is_the_head_of_numpy_convolve():
    signal, kernel = torch.randn(2, 301, generator=generator(1)), torch.randn(57, generator=generator(2))
    ours = fft_convolve(signal, kernel)
    assert ours.shape == (2, 301) and ours.dtype == torch.float32
    for row in range(2):
        reference = np.convolve(signal[row].double().numpy(), kernel.double().numpy())[:301]
        np.testing.assert_allclose(ours[row].numpy(), reference, atol=1e-4)


def test_room_impulse_has_the_drawn_direct_to_reverberant_ratio_and_decay():
    rt60, drr = 0.4, 6.0
    impulse = synthetic_room_impulse(RATE, rt60, drr, 4, generator(3))
    assert impulse.shape == (math.ceil(rt60 * RATE),) and impulse.dtype == torch.float32 and impulse[0] == 1.0
    reverberant_energy = float(impulse[1:].double().pow(2).sum())
    assert 10 * math.log10(1.0 / reverberant_energy) == pytest.approx(drr, abs=1e-4)
    # the tail's level falls 60 dB per rt60: compare two 50 ms windows 0.2 s apart (after the early echoes)
    window = round(0.05 * RATE)
    first, later = (float(impulse[start:start + window].double().pow(2).mean())
                    for start in (round(0.06 * RATE), round(0.26 * RATE)))
    assert 10 * math.log10(first / later) == pytest.approx(60 * 0.2 / rt60, abs=3.0)
    assert torch.equal(impulse, synthetic_room_impulse(RATE, rt60, drr, 4, generator(3)))
    assert not torch.equal(impulse, synthetic_room_impulse(RATE, rt60, drr, 4, generator(4)))


def test_early_reflections_are_discrete_echoes_within_50_ms():
    without = synthetic_room_impulse(RATE, 0.3, 0.0, 0, generator(5))
    echoes = synthetic_room_impulse(RATE, 0.3, 0.0, 3, generator(5))  # the same tail, then three echoes drawn
    tail_scale = float(echoes[1000:].double().norm() / without[1000:].double().norm())  # both scaled to the DRR
    moved = ((echoes[1:] - without[1:] * tail_scale).abs() > 1e-6).nonzero() + 1  # past the direct sound
    assert 1 <= moved.numel() <= 3
    assert round(0.001 * RATE) <= int(moved.min()) and int(moved.max()) <= round(0.05 * RATE)


def test_reverberate_is_direct_convolution_at_the_dry_level():
    dry = speech_like(0.3, seed=1)
    impulse = synthetic_room_impulse(RATE, 0.2, 3.0, 4, generator(6))
    wet = reverberate(dry, impulse)
    reference = np.convolve(dry.double().numpy(), impulse.double().numpy())[:dry.shape[0]]
    reference *= np.sqrt(np.mean(dry.double().numpy() ** 2) / np.mean(reference ** 2))
    assert wet.shape == dry.shape and wet.dtype == dry.dtype
    np.testing.assert_allclose(wet.numpy(), reference, atol=2e-5)


# ----------------------------------------------------------------------------- noise


def test_add_noise_reaches_the_asked_snr_and_leaves_silence_alone():
    clean = speech_like(0.5, seed=2)
    for level in (-5.0, 0.0, 17.5):
        noisy = add_noise(clean, white_noise(clean.shape[0], generator(7)), level)
        assert noisy.shape == clean.shape and noisy.dtype == clean.dtype
        assert snr_db(clean, noisy) == pytest.approx(level, abs=1e-3)
    assert torch.equal(add_noise(clean, torch.zeros_like(clean), 10.0), clean)
    assert torch.equal(add_noise(torch.zeros(100), torch.randn(100), 10.0), torch.zeros(100))


def spectral_slope(noise: torch.Tensor) -> float:
    """The slope of log10(power) against log10(frequency) over 100 Hz - 6 kHz, from numpy's periodogram averaged over
    16 segments."""
    segments = noise.double().numpy().reshape(16, -1)
    power = (np.abs(np.fft.rfft(segments, axis=1)) ** 2).mean(axis=0)
    frequencies = np.fft.rfftfreq(segments.shape[1], 1.0 / RATE)
    band = (frequencies >= 100) & (frequencies <= 6000)
    return float(np.polyfit(np.log10(frequencies[band]), np.log10(power[band]), 1)[0])


def test_pink_noise_falls_3_db_per_octave_and_white_noise_is_flat():
    pink = pink_noise(16 * 4096, generator(8))
    assert pink.shape == (16 * 4096,) and pink.dtype == torch.float32
    assert float(pink.pow(2).mean()) == pytest.approx(1.0, rel=1e-4)
    assert spectral_slope(pink) == pytest.approx(-1.0, abs=0.1)
    assert spectral_slope(white_noise(16 * 4096, generator(8))) == pytest.approx(0.0, abs=0.1)
    assert torch.equal(pink, pink_noise(16 * 4096, generator(8)))


def test_babble_reads_each_voice_cyclically_from_its_drawn_start():
    voices = [torch.randn(700, generator=generator(9)), 0.1 * torch.randn(300, generator=generator(10))]
    mixed = babble(voices, 1000, generator(11))
    assert mixed.shape == (1000,) and mixed.dtype == torch.float32
    draws, reference = generator(11), np.zeros(1000)
    for voice in voices:  # sample by sample
        start = int(torch.randint(0, voice.shape[0], (), generator=draws))
        part = np.array([float(voice[(start + n) % voice.shape[0]]) for n in range(1000)])
        reference += part / np.sqrt(np.mean(part ** 2))
    np.testing.assert_allclose(mixed.numpy(), reference, atol=1e-5)


# ----------------------------------------------------------------------------- telephone


def test_band_pass_matches_a_dft_matrix():
    rate, num_samples = 8000, 203
    signal = torch.randn(num_samples, generator=generator(12), dtype=torch.float64)
    n = np.arange(num_samples)
    dft = np.exp(-2j * np.pi * np.outer(n, n) / num_samples)  # [N, N]
    spectrum = dft @ signal.numpy()
    frequencies = np.minimum(n, num_samples - n) * rate / num_samples  # each bin's |frequency|
    spectrum[(frequencies < 300) | (frequencies > 3400)] = 0
    reference = (dft.conj() @ spectrum).real / num_samples
    np.testing.assert_allclose(band_pass(signal, rate, 300, 3400).numpy(), reference, atol=1e-10)


def textbook_mu_law(value: float, mu: int = 255) -> float:
    value = min(1.0, max(-1.0, value))
    compressed = math.copysign(math.log(1 + mu * abs(value)) / math.log(1 + mu), value)
    code = math.floor((compressed + 1) / 2 * mu + 0.5)
    decoded = 2 * code / mu - 1
    return math.copysign(((1 + mu) ** abs(decoded) - 1) / mu, decoded)


def test_mu_law_matches_the_textbook_formula_sample_by_sample():
    signal = torch.cat([torch.linspace(-1.2, 1.2, 801), 0.01 * torch.randn(200, generator=generator(13))])
    ours = mu_law_roundtrip(signal)
    assert ours.shape == signal.shape and ours.dtype == torch.float32
    np.testing.assert_allclose(ours.numpy(), [textbook_mu_law(float(v)) for v in signal.double()], atol=1e-6)
    assert len(torch.unique(ours)) <= 256
    quiet, loud = torch.linspace(0.009, 0.011, 101), torch.linspace(0.85, 0.95, 101)
    assert float((mu_law_roundtrip(quiet) - quiet).abs().max()) < 5e-4  # fine steps near zero...
    assert float((mu_law_roundtrip(loud) - loud).abs().max()) > 5e-3  # ... coarse ones near full scale


@pytest.mark.parametrize("mu_law", [False, True])
def test_telephone_keeps_the_voice_band_and_removes_the_rest(mu_law):
    num_samples = 8001  # odd: the length survives the trip to 8 kHz and back
    middle = slice(1000, 7000)

    def kept(frequency):
        out = telephone(tone(frequency, num_samples), RATE, mu_law)
        assert out.shape == (num_samples,) and out.dtype == torch.float32
        return float(out[middle].pow(2).mean().sqrt() / tone(frequency, num_samples)[middle].pow(2).mean().sqrt())

    assert kept(1000) == pytest.approx(1.0, abs=0.03)
    for frequency in (100, 5000, 7000):
        assert kept(frequency) < 0.03


# ----------------------------------------------------------------------------- microphone


def test_equalise_is_a_circular_convolution_with_the_curves_impulse_response():
    num_samples = 64
    signal = torch.randn(num_samples, generator=generator(14), dtype=torch.float64)
    gain_db = random_eq_db(torch.fft.rfftfreq(num_samples, 1 / RATE, dtype=torch.float64), 3, 6.0, generator(15))
    kernel = np.fft.irfft(10 ** (gain_db.numpy() / 20), num_samples)  # the filter's (zero-phase) impulse response
    reference = [sum(float(signal[m]) * kernel[(n - m) % num_samples] for m in range(num_samples))
                 for n in range(num_samples)]
    np.testing.assert_allclose(equalise(signal, gain_db).numpy(), reference, atol=1e-10)


def test_random_eq_is_bounded_smooth_and_seeded():
    frequencies = torch.fft.rfftfreq(16384, 1 / RATE, dtype=torch.float64)
    curves = [random_eq_db(frequencies, 3, 6.0, generator(seed)) for seed in range(20)]
    for curve in curves:
        assert curve.shape == frequencies.shape and curve.dtype == torch.float64
        assert float(curve.abs().max()) <= 5 * 6.0  # three bands and two shelves, each within +-6 dB
        assert float(curve.diff().abs().max()) < 0.5  # smooth: under 0.5 dB between neighbouring 1 Hz bins
    assert float(torch.stack(curves).std(dim=0).mean()) > 1.0  # and really random
    assert torch.equal(curves[0], random_eq_db(frequencies, 3, 6.0, generator(0)))
    assert torch.equal(random_eq_db(frequencies, 3, 0.0, generator(0)), torch.zeros_like(frequencies))


# ----------------------------------------------------------------------------- all stages


def everything_on() -> AugmentConfig:
    return AugmentConfig(reverb=ReverbConfig(p=1.0), noise=NoiseConfig(p=1.0), microphone=MicrophoneConfig(p=1.0),
                         loudness=LoudnessConfig(p=1.0, clip_p=1.0), telephone=TelephoneConfig(p=1.0))


def seeded_stages(seed: int):
    return lambda stage: generator(1000 * seed + stage)


def other_voices(count, draws):
    return [speech_like(0.4, seed=int(torch.randint(0, 100, (), generator=draws))) for _ in range(count)]


def test_every_stage_keeps_shape_and_dtype_and_is_deterministic_per_seed():
    clean = speech_like(0.7, seed=3)
    augment = RecordingAugment(everything_on(), RATE)
    first = augment(clean, seeded_stages(1), other_voices)
    assert first.shape == clean.shape and first.dtype == torch.float32 and bool(torch.isfinite(first).all())
    assert torch.equal(first, augment(clean, seeded_stages(1), other_voices))
    assert not torch.equal(first, augment(clean, seeded_stages(2), other_voices))
    for section in ("reverb", "noise", "microphone", "loudness", "telephone"):
        one = AugmentConfig(**{section: type(getattr(everything_on(), section))(p=1.0)})
        out = RecordingAugment(one, RATE)(clean, seeded_stages(1), other_voices)
        assert out.shape == clean.shape and out.dtype == torch.float32, section
        assert not torch.equal(out, clean), section


def test_everything_off_returns_the_waveform_untouched():
    clean = speech_like(0.3, seed=4)
    off = RecordingAugment(AugmentConfig(), RATE)
    assert not off.enabled
    assert off(clean, seeded_stages(1)) is clean
    never = everything_on()
    for section in ("reverb", "noise", "microphone", "loudness", "telephone"):
        getattr(never, section).p = 0.0
    never.loudness.clip_p = 0.0
    assert RecordingAugment(never, RATE)(clean, seeded_stages(1)) is clean


@pytest.mark.parametrize("kind", ["white", "pink", "babble"])
def test_added_noise_has_the_drawn_snr(kind):
    clean = speech_like(0.5, seed=5)
    fixed = RecordingAugment(AugmentConfig(noise=NoiseConfig(p=1.0, snr_db=[12.0, 12.0], kinds=[kind])), RATE)
    assert snr_db(clean, fixed(clean, seeded_stages(1), other_voices)) == pytest.approx(12.0, abs=1e-3)
    ranged = RecordingAugment(AugmentConfig(noise=NoiseConfig(p=1.0, snr_db=[5.0, 20.0], kinds=[kind])), RATE)
    levels = [snr_db(clean, ranged(clean, seeded_stages(seed), other_voices)) for seed in range(8)]
    assert all(5.0 - 1e-3 <= level <= 20.0 + 1e-3 for level in levels) and max(levels) - min(levels) > 2.0


def test_loudness_gain_and_clipping():
    clean = speech_like(0.3, seed=6)
    louder = RecordingAugment(AugmentConfig(loudness=LoudnessConfig(p=1.0, gain_db=[6.0, 6.0])), RATE)
    torch.testing.assert_close(louder(clean, seeded_stages(1)), clean * 10 ** (6 / 20))
    clipped = RecordingAugment(AugmentConfig(loudness=LoudnessConfig(clip_p=1.0, clip_level=[0.5, 0.5])), RATE)
    out = clipped(clean, seeded_stages(1))
    peak = float(clean.abs().max())
    assert float(out.abs().max()) == pytest.approx(0.5 * peak)
    quiet = clean.abs() <= 0.5 * peak
    assert torch.equal(out[quiet], clean[quiet])


def test_probability_is_the_share_of_items_a_stage_changes():
    clean = speech_like(0.2, seed=7)
    half = RecordingAugment(AugmentConfig(reverb=ReverbConfig(p=0.5)), RATE)
    changed = [not torch.equal(half(clean, seeded_stages(seed)), clean) for seed in range(200)]
    assert 0.4 < sum(changed) / 200 < 0.6


def test_a_stage_draws_from_its_own_generator():
    clean = speech_like(0.3, seed=8)
    reverb_only = AugmentConfig(reverb=ReverbConfig(p=1.0))
    both = AugmentConfig(reverb=ReverbConfig(p=1.0), noise=NoiseConfig(p=1.0, kinds=["white"]))
    room = RecordingAugment(reverb_only, RATE)(clean, seeded_stages(1))
    used = []
    out = RecordingAugment(both, RATE)(clean, lambda stage: used.append(stage) or generator(1000 + stage))
    assert used == [REVERB, NOISE]
    assert 5.0 - 1e-3 <= snr_db(room, out) <= 30.0 + 1e-3  # the same room as without noise, plus noise at its SNR


# ----------------------------------------------------------------------------- in the data pipeline


@pytest.fixture
def audio_corpus(tmp_path):
    lines = []
    for index in range(6):
        write_audio(tmp_path / f"u{index}.wav", speech_like(0.5 + 0.1 * index, 20 + index), RATE)
        lines.append(json.dumps({"audio": f"u{index}.wav", "text": ["12", "3 4", "56"][index % 3]}))
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path / "m.jsonl"


def audio_data(manifest, augment: dict | None = None):
    raw = tiny_audio_config(manifest, manifest.parent / "runs", "augment", epochs=1)
    if augment is not None:
        raw["data"]["augment"] = augment
    return build_data(config_from_dict(raw))


def test_only_training_items_are_augmented(audio_corpus):
    plain = audio_data(audio_corpus)
    loud = {"reverb": {"p": 1.0}, "noise": {"p": 1.0}, "microphone": {"p": 1.0}, "telephone": {"p": 1.0}}
    augmented = audio_data(audio_corpus, loud)
    again = audio_data(audio_corpus, loud)
    assert augmented.train.frame_counts(0) == plain.train.frame_counts(0)
    for index in range(len(plain.train)):
        ours, theirs = augmented.train[index], plain.train[index]
        assert ours["features"].shape == theirs["features"].shape and ours["duration_s"] == theirs["duration_s"]
        assert not torch.equal(ours["features"], theirs["features"])
        assert torch.equal(ours["features"], again.train[index]["features"])  # a function of (seed, item, epoch)
        assert torch.equal(augmented.val[index]["features"], plain.val[index]["features"])
    first = augmented.train[0]["features"]
    augmented.train.set_epoch(1)
    assert not torch.equal(first, augmented.train[0]["features"])


def test_an_augment_block_that_is_off_changes_nothing(audio_corpus):
    plain = audio_data(audio_corpus)
    off = audio_data(audio_corpus, {"reverb": {"p": 0.0, "rt60_s": [0.5, 1.0]}, "noise": {"kinds": ["pink"]}})
    for index in range(len(plain.train)):
        assert torch.equal(off.train[index]["features"], plain.train[index]["features"])


@pytest.mark.parametrize("augment, message", [
    ({"reverb": {"p": 1.5}}, "config key 'data.augment.reverb.p' must be in [0, 1]"),
    ({"reverb": {"rt60_s": [0.8, 0.2]}}, "config key 'data.augment.reverb.rt60_s' must be two numbers"),
    ({"reverb": {"rt60_s": [0.0, 0.5]}}, "config key 'data.augment.reverb.rt60_s' must be two numbers"),
    ({"noise": {"snr_db": [10.0]}}, "config key 'data.augment.noise.snr_db' must be two numbers"),
    ({"noise": {"kinds": ["brown"]}}, "config key 'data.augment.noise.kinds' must be a non-empty list"),
    ({"noise": {"kinds": []}}, "config key 'data.augment.noise.kinds' must be a non-empty list"),
    ({"noise": {"babble_voices": 0}}, "config key 'data.augment.noise.babble_voices' must be >= 1"),
    ({"microphone": {"max_db": -1.0}}, "config key 'data.augment.microphone.max_db' must be >= 0"),
    ({"loudness": {"clip_level": [0.5, 1.5]}}, "config key 'data.augment.loudness.clip_level' must be two numbers"),
    ({"telephone": {"codec": "gsm"}}, "unknown config key 'data.augment.telephone.codec'"),
])
def test_bad_augment_settings_name_the_key(tmp_path, augment, message):
    raw = tiny_audio_config(tmp_path / "m.jsonl", tmp_path, "bad", epochs=1)
    raw["data"]["augment"] = augment
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config_from_dict(raw)


def test_toy_data_refuses_audio_augmentation():
    from asr_helpers import tiny_raw_config

    raw = tiny_raw_config()
    raw["data"]["augment"] = {"noise": {"p": 0.5}}
    with pytest.raises(ConfigError, match="config key 'data.augment' must be off"):
        config_from_dict(raw)
