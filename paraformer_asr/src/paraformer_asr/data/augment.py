"""Waveform augmentation toward real recordings: rooms, noise, microphones, loudness, telephones.

Synthetic voices are clean, close, full-band and evenly loud; real recordings are none of these. Each stage below
makes a training utterance sound more like one recorded somewhere, by a random amount, with a probability of its
own (``data.augment.<stage>.p``), in the order sound travels: the room's reverberation, the noise around the talker,
the microphone's colouring, the recording level (gain, clipping), a telephone line. The stages work on the waveform
of one utterance (after speed perturbation and edge pads, before the log-mel front end: data/manifest.py); the
heavy work is vectorised over samples (FFT convolution, frequency-domain EQ and band limits). The length of the
waveform never changes, so the frame counts the batch sampler sees stay right.

Randomness: stage ``s`` of an item draws from its own generator, seeded by ``(seed, index, epoch, 4, s)``
(``ManifestDataset._generator``), so the draws are a pure function of (seed, item, epoch) and switching one stage on
leaves the other stages' draws as they were. With every probability 0 the waveform comes back unchanged.

Contracts (waveforms are float [..., N] unless said otherwise; each function keeps the input's shape and dtype):
    synthetic_room_impulse(sample_rate, rt60_s, drr_db, early_reflections, generator) -> impulse [L] float32,
                                                               L = max(2, ceil(rt60_s * sample_rate)), impulse[0] = 1
    fft_convolve(signal [..., N], kernel [L])         -> [..., N], the first N samples of the linear convolution
    reverberate(waveform [N], impulse [L])            -> [N] at the input's RMS
    white_noise(num_samples, generator)               -> [N] float32, unit variance
    pink_noise(num_samples, generator)                -> [N] float32, power spectrum proportional to 1 / f, unit RMS
    babble(voices: list of [N_i], num_samples, generator) -> [N] float32, the voices at equal RMS, summed
    add_noise(waveform [N], noise [N], snr_db)        -> waveform + noise scaled to that signal-to-noise ratio
    band_pass(waveform [..., N], sample_rate, low_hz, high_hz) -> [..., N], rfft bins outside [low, high] zeroed
    mu_law_roundtrip(waveform [..., N], bits=8)       -> [..., N], encoded to 2**bits mu-law codes and decoded
    telephone(waveform [..., N], sample_rate, mu_law=True) -> [..., N] through an 8 kHz, 300-3400 Hz channel
    random_eq_db(frequencies_hz [F], bands, max_db, generator) -> gain curve [F] float64, dB
    equalise(waveform [..., N], gain_db [N // 2 + 1]) -> [..., N], zero-phase (circular) filter
    RecordingAugment(cfg: AugmentConfig, sample_rate)(waveform [N], generator_of, other_voices) -> [N]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from paraformer_asr.config import AugmentConfig
from paraformer_asr.data.resample import resample

DECAY_60_DB = 3.0 * math.log(10.0)  # amplitude exp(-DECAY_60_DB * t / rt60) is 60 dB down at t = rt60
EARLY_REFLECTION_MS = (1.0, 50.0)  # discrete echoes arrive this many ms after the direct sound
TELEPHONE_RATE = 8000  # Hz, narrowband telephony (G.711)
TELEPHONE_BAND_HZ = (300.0, 3400.0)
EQ_BAND_OCTAVES = (0.25, 1.0)  # a peaking band's width (standard deviation on the log2-frequency axis)
EQ_SHELF_SLOPE_OCTAVES = 0.2  # how sharply a shelf turns (logistic scale on the log2-frequency axis)
EQ_LOW_SHELF_HZ = (100.0, 400.0)  # corner frequency range of the low shelf
EQ_HIGH_SHELF_HZ = (2000.0, 6000.0)  # ... of the high shelf (capped below Nyquist)

# Stage numbers: the last entry of each stage's generator seed (fixed, so that adding a stage moves no draws).
REVERB, NOISE, MICROPHONE, LOUDNESS, TELEPHONE = range(5)


def _uniform(low: float, high: float, generator: torch.Generator) -> float:
    return low + (high - low) * float(torch.rand((), generator=generator, dtype=torch.float64))


def _rms(waveform: torch.Tensor) -> float:
    return float(waveform.double().pow(2).mean().sqrt()) if waveform.numel() else 0.0


# ----------------------------------------------------------------------------- room


def synthetic_room_impulse(sample_rate: int, rt60_s: float, drr_db: float, early_reflections: int,
                           generator: torch.Generator) -> torch.Tensor:
    """The impulse response of a random room: the direct sound (1 at sample 0), ``early_reflections`` discrete echoes
    1-50 ms later (random signs, amplitudes in [0.2, 0.8] of the decay envelope), and a diffuse tail of Gaussian noise
    under the envelope ``exp(-DECAY_60_DB * t / rt60_s)`` (60 dB down after ``rt60_s``). Echoes and tail together
    are scaled so that the direct-to-reverberant energy ratio is ``drr_db``. -> [max(2, ceil(rt60_s * sr))] float32."""
    length = max(2, math.ceil(rt60_s * sample_rate))
    t = torch.arange(length, dtype=torch.float64) / sample_rate  # [L] s
    envelope = torch.exp(-DECAY_60_DB * t / rt60_s)  # [L]
    reverberant = torch.randn(length, generator=generator, dtype=torch.float64) * envelope  # [L] the diffuse tail
    if early_reflections > 0:
        first, last = (min(length - 1, max(1, round(ms * sample_rate / 1000))) for ms in EARLY_REFLECTION_MS)
        delays = torch.randint(first, last + 1, (early_reflections,), generator=generator)  # [K] samples
        sizes = 0.2 + 0.6 * torch.rand(early_reflections, generator=generator, dtype=torch.float64)  # [K]
        signs = torch.randint(0, 2, (early_reflections,), generator=generator).double() * 2 - 1  # [K]
        reverberant.index_add_(0, delays, signs * sizes * envelope[delays])
    reverberant[0] = 0.0  # the direct sound's own sample
    energy = float(reverberant.pow(2).sum())
    if energy > 0:
        reverberant = reverberant * math.sqrt(10.0 ** (-drr_db / 10.0) / energy)
    reverberant[0] = 1.0
    return reverberant.float()


def fft_convolve(signal: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """signal [..., N] * kernel [L] -> [..., N]: the first N samples of the full linear convolution (the tail that
    rings on after the signal's end is cut), through one zero-padded real FFT of a power-of-two size."""
    num_samples = signal.shape[-1]
    size = 1 << (num_samples + kernel.shape[-1] - 2).bit_length()  # a power of two >= N + L - 1
    spectrum = torch.fft.rfft(signal, size) * torch.fft.rfft(kernel.to(signal.dtype), size)  # [..., size // 2 + 1]
    return torch.fft.irfft(spectrum, size)[..., :num_samples]


def reverberate(waveform: torch.Tensor, impulse: torch.Tensor) -> torch.Tensor:
    """waveform [N] played in the room of ``impulse`` [L] -> [N], rescaled to the dry waveform's RMS (the room
    changes the sound, the loudness stage its level)."""
    wet = fft_convolve(waveform, impulse)  # [N]
    wet_rms = _rms(wet)
    return wet * (_rms(waveform) / wet_rms) if wet_rms > 0 else wet


# ----------------------------------------------------------------------------- noise


def white_noise(num_samples: int, generator: torch.Generator) -> torch.Tensor:
    """[num_samples] float32, independent standard normal samples (a flat spectrum)."""
    return torch.randn(num_samples, generator=generator)


def pink_noise(num_samples: int, generator: torch.Generator) -> torch.Tensor:
    """[num_samples] float32 with a power spectrum proportional to 1 / f (3 dB less per octave; no DC), unit RMS:
    white noise whose rfft bin k is scaled by 1 / sqrt(k)."""
    spectrum = torch.fft.rfft(white_noise(num_samples, generator))  # [N // 2 + 1]
    bins = torch.arange(spectrum.shape[0], dtype=torch.float32)  # [N // 2 + 1]
    shaping = torch.where(bins > 0, bins.clamp(min=1).rsqrt(), torch.zeros(()))  # [N // 2 + 1], 0 at DC
    noise = torch.fft.irfft(spectrum * shaping, num_samples)  # [N]
    rms = _rms(noise)
    return noise / rms if rms > 0 else noise


def babble(voices: list[torch.Tensor], num_samples: int, generator: torch.Generator) -> torch.Tensor:
    """Several people talking at once: each of ``voices`` ([N_i] waveforms, other utterances) read from a random
    start, cyclically to fill ``num_samples``, scaled to unit RMS, all summed. -> [num_samples] float32."""
    total = torch.zeros(num_samples)
    positions = torch.arange(num_samples)  # [N]
    for voice in voices:  # a handful of voices, each vectorised over its samples
        start = int(torch.randint(0, voice.shape[0], (), generator=generator))
        part = voice.float()[(start + positions) % voice.shape[0]]  # [N]
        rms = _rms(part)
        total += part / rms if rms > 0 else part
    return total


def add_noise(waveform: torch.Tensor, noise: torch.Tensor, snr_db: float) -> torch.Tensor:
    """waveform [N] + noise [N] scaled so that mean(waveform^2) / mean(scaled noise^2) = 10^(snr_db / 10). Silent
    noise adds nothing; a silent waveform gets silent noise."""
    noise_power = float(noise.double().pow(2).mean())
    if noise_power == 0:
        return waveform
    signal_power = float(waveform.double().pow(2).mean())
    scale = math.sqrt(signal_power / (noise_power * 10.0 ** (snr_db / 10.0)))
    return waveform + (noise * scale).to(waveform.dtype)


# ----------------------------------------------------------------------------- telephone


def band_pass(waveform: torch.Tensor, sample_rate: int, low_hz: float, high_hz: float) -> torch.Tensor:
    """waveform [..., N] with every rfft bin outside [low_hz, high_hz] zeroed -> [..., N] (an ideal band-pass of the
    whole signal, circular)."""
    num_samples = waveform.shape[-1]
    frequencies = torch.fft.rfftfreq(num_samples, 1.0 / sample_rate)  # [N // 2 + 1] Hz
    keep = ((frequencies >= low_hz) & (frequencies <= high_hz)).to(waveform.dtype)  # [N // 2 + 1]
    return torch.fft.irfft(torch.fft.rfft(waveform) * keep, num_samples)


def mu_law_roundtrip(waveform: torch.Tensor, bits: int = 8) -> torch.Tensor:
    """waveform [..., N] (clipped to [-1, 1]) through a mu-law codec of ``bits`` bits, mu = 2^bits - 1 (ITU G.711's
    law at 8 bits): ``y = sign(x) ln(1 + mu |x|) / ln(1 + mu)`` quantised to the code ``floor((y + 1) / 2 * mu +
    0.5)`` in 0..mu, then decoded, ``y' = 2 code / mu - 1``, ``x' = sign(y') ((1 + mu)^|y'| - 1) / mu``. Quiet
    samples keep fine steps, loud ones coarse. -> [..., N], the input's dtype."""
    mu = 2 ** bits - 1
    x = waveform.double().clamp(-1.0, 1.0)
    compressed = torch.sign(x) * torch.log1p(mu * x.abs()) / math.log1p(mu)  # [..., N] in [-1, 1]
    codes = torch.floor((compressed + 1.0) / 2.0 * mu + 0.5)  # [..., N] integers 0..mu
    decoded = 2.0 * codes / mu - 1.0
    return (torch.sign(decoded) * torch.expm1(decoded.abs() * math.log1p(mu)) / mu).to(waveform.dtype)


def telephone(waveform: torch.Tensor, sample_rate: int, mu_law: bool = True) -> torch.Tensor:
    """waveform [..., N] at ``sample_rate`` through a narrowband telephone line: resampled to 8 kHz (nothing above
    4 kHz survives), band-passed to 300-3400 Hz, optionally 8-bit mu-law coded, resampled back. -> [..., N]."""
    num_samples = waveform.shape[-1]
    narrow = resample(waveform, sample_rate, TELEPHONE_RATE)  # [..., ceil(N * 8000 / sr)]
    narrow = band_pass(narrow, TELEPHONE_RATE, *TELEPHONE_BAND_HZ)
    if mu_law:
        narrow = mu_law_roundtrip(narrow)
    return resample(narrow, TELEPHONE_RATE, sample_rate)[..., :num_samples]  # back to >= N samples, cut to N


# ----------------------------------------------------------------------------- microphone


def random_eq_db(frequencies_hz: torch.Tensor, bands: int, max_db: float, generator: torch.Generator) -> torch.Tensor:
    """A smooth random microphone response over ``frequencies_hz`` [F] -> gain [F] float64 dB: ``bands`` peaking
    bands (Gaussian bumps on the log-frequency axis, centres between 100 Hz and 0.9 x the top frequency, widths
    0.25-1 octave) plus a low shelf (corner 100-400 Hz) and a high shelf (corner 2-6 kHz, below 0.9 x the top
    frequency), each with a gain drawn in [-max_db, max_db]."""
    octaves = torch.log2(frequencies_hz.double().clamp(min=20.0) / 1000.0)  # [F] octaves from 1 kHz
    top_hz = 0.9 * float(frequencies_hz.max())
    low, high = math.log2(100.0 / 1000.0), math.log2(top_hz / 1000.0)
    centres = low + (high - low) * torch.rand(bands, generator=generator, dtype=torch.float64)  # [K] octaves
    widths = EQ_BAND_OCTAVES[0] + (EQ_BAND_OCTAVES[1] - EQ_BAND_OCTAVES[0]) * torch.rand(
        bands, generator=generator, dtype=torch.float64)  # [K] octaves
    gains = max_db * (2.0 * torch.rand(bands + 2, generator=generator, dtype=torch.float64) - 1.0)  # [K + 2] dB
    peaks = gains[:bands, None] * torch.exp(-0.5 * ((octaves[None, :] - centres[:, None]) / widths[:, None]) ** 2)
    low_corner = math.log2(_uniform(*EQ_LOW_SHELF_HZ, generator) / 1000.0)
    high_corner = math.log2(min(_uniform(*EQ_HIGH_SHELF_HZ, generator), top_hz) / 1000.0)
    low_shelf = gains[bands] * torch.sigmoid((low_corner - octaves) / EQ_SHELF_SLOPE_OCTAVES)  # [F]
    high_shelf = gains[bands + 1] * torch.sigmoid((octaves - high_corner) / EQ_SHELF_SLOPE_OCTAVES)  # [F]
    return peaks.sum(dim=0) + low_shelf + high_shelf


def equalise(waveform: torch.Tensor, gain_db: torch.Tensor) -> torch.Tensor:
    """waveform [..., N] with rfft bin k scaled by ``10^(gain_db[k] / 20)`` (gain_db [N // 2 + 1]) -> [..., N]: a
    zero-phase filter, circular over the utterance (its impulse response is short for a smooth curve)."""
    gain = torch.pow(10.0, gain_db / 20.0).to(waveform.dtype)  # [N // 2 + 1]
    return torch.fft.irfft(torch.fft.rfft(waveform) * gain, waveform.shape[-1])


# ----------------------------------------------------------------------------- all stages


class RecordingAugment:
    """The stages of ``cfg`` (config.AugmentConfig) for waveforms at ``sample_rate``: each applied with its
    probability, drawing from ``generator_of(stage)`` (stage: REVERB, NOISE, MICROPHONE, LOUDNESS, TELEPHONE).
    Babble reads other utterances through ``other_voices(count, generator) -> list of [N_i] waveforms``.

    - reverb: ``synthetic_room_impulse`` with RT60 and DRR drawn uniformly in their ranges, then ``reverberate``;
    - noise: a kind drawn uniformly from ``kinds`` (white, pink, babble of ``babble_voices`` other utterances) at an
      SNR drawn uniformly in ``snr_db``;
    - microphone: ``equalise`` by ``random_eq_db``;
    - loudness: with probability ``p`` a gain drawn in ``gain_db`` dB, then with probability ``clip_p`` hard
      clipping at a level drawn in ``clip_level`` x the peak;
    - telephone: ``telephone`` (with ``mu_law`` coding when set).
    """

    def __init__(self, cfg: AugmentConfig, sample_rate: int) -> None:
        self.cfg = cfg
        self.sample_rate = int(sample_rate)

    @property
    def enabled(self) -> bool:
        return self.cfg.enabled

    def __call__(self, waveform: torch.Tensor, generator_of: Callable[[int], torch.Generator],
                 other_voices: Callable[[int, torch.Generator], list[torch.Tensor]] | None = None) -> torch.Tensor:
        cfg = self.cfg
        if cfg.reverb.p > 0:
            waveform = self.reverb(waveform, generator_of(REVERB))
        if cfg.noise.p > 0:
            waveform = self.noise(waveform, generator_of(NOISE), other_voices)
        if cfg.microphone.p > 0:
            waveform = self.microphone(waveform, generator_of(MICROPHONE))
        if cfg.loudness.p > 0 or cfg.loudness.clip_p > 0:
            waveform = self.loudness(waveform, generator_of(LOUDNESS))
        if cfg.telephone.p > 0:
            waveform = self.telephone(waveform, generator_of(TELEPHONE))
        return waveform

    def reverb(self, waveform: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        cfg = self.cfg.reverb
        if _uniform(0.0, 1.0, generator) >= cfg.p:
            return waveform
        rt60_s, drr_db = _uniform(*cfg.rt60_s, generator), _uniform(*cfg.drr_db, generator)
        impulse = synthetic_room_impulse(self.sample_rate, rt60_s, drr_db, cfg.early_reflections, generator)
        return reverberate(waveform, impulse)

    def noise(self, waveform: torch.Tensor, generator: torch.Generator,
              other_voices: Callable[[int, torch.Generator], list[torch.Tensor]] | None) -> torch.Tensor:
        cfg = self.cfg.noise
        if _uniform(0.0, 1.0, generator) >= cfg.p:
            return waveform
        kind = cfg.kinds[int(torch.randint(0, len(cfg.kinds), (), generator=generator))]
        snr_db = _uniform(*cfg.snr_db, generator)
        num_samples = waveform.shape[-1]
        if kind == "white":
            noise = white_noise(num_samples, generator)
        elif kind == "pink":
            noise = pink_noise(num_samples, generator)
        else:
            if other_voices is None:
                raise ValueError("babble noise needs other utterances (other_voices)")
            noise = babble(other_voices(cfg.babble_voices, generator), num_samples, generator)
        return add_noise(waveform, noise, snr_db)

    def microphone(self, waveform: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        cfg = self.cfg.microphone
        if _uniform(0.0, 1.0, generator) >= cfg.p:
            return waveform
        frequencies = torch.fft.rfftfreq(waveform.shape[-1], 1.0 / self.sample_rate, dtype=torch.float64)
        return equalise(waveform, random_eq_db(frequencies, cfg.bands, cfg.max_db, generator))

    def loudness(self, waveform: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        cfg = self.cfg.loudness
        gains, clips = _uniform(0.0, 1.0, generator) < cfg.p, _uniform(0.0, 1.0, generator) < cfg.clip_p
        if gains:
            waveform = waveform * 10.0 ** (_uniform(*cfg.gain_db, generator) / 20.0)
        if clips:
            level = _uniform(*cfg.clip_level, generator) * float(waveform.abs().max())
            waveform = waveform.clamp(-level, level)
        return waveform

    def telephone(self, waveform: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        cfg = self.cfg.telephone
        if _uniform(0.0, 1.0, generator) >= cfg.p:
            return waveform
        return telephone(waveform, self.sample_rate, cfg.mu_law)
