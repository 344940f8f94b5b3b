"""Acoustic front end: log-mel filterbank features, global mean/variance normalisation, SpecAugment.

Contracts:
    LogMelFrontend(...)(waveform [N])             -> log-mel features [T, n_mels], T = 1 + max(0, N - win) // hop
    mel_band_edges(n_mels, sample_rate)           -> edges [n_mels + 2] Hz (filter m: m, m + 1, m + 2)
    mel_filterbank(n_mels, n_fft, sample_rate)    -> filters [n_fft // 2 + 1, n_mels]
    FeatureNormalizer(mean [F], std [F])(x [..., F]) -> (x - mean) / std, same shape
    FeatureNormalizer(..., utterance_mean=True)(x [T, F]) -> the same after subtract_utterance_mean(x)
    subtract_utterance_mean(log_mel [T, F])      -> log_mel less its mean over the frames that are not digital silence
    SpecAugment(...)(features [T, F], generator)  -> masked copy [T, F]
    VoicePerturb(...)(log_mel [T, F], generator)  -> perturbed copy [T, F] (before normalisation)

Mel scale: HTK, ``mel(f) = 2595 * log10(1 + f / 700)``; triangular filters with peak 1, centres equally spaced in mel
between ``f_min`` and ``f_max``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import torch

from paraformer_asr.checks import assert_shape, check_finite
from paraformer_asr.errors import DataError

_LOG_FLOOR = 1e-10  # power floor before the log: log-mel values are >= log(1e-10) = -23.03
_DIGITAL_SILENCE_LOG = math.log(_LOG_FLOOR) + 1e-3  # a frame whose every channel is at most this holds exact zeros


def hz_to_mel(frequency: torch.Tensor) -> torch.Tensor:
    """HTK mel scale."""
    return 2595.0 * torch.log10(1.0 + frequency / 700.0)


def mel_to_hz(mel: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`hz_to_mel`."""
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


def mel_band_edges(n_mels: int, sample_rate: int, f_min: float = 0.0, f_max: float | None = None) -> torch.Tensor:
    """[n_mels + 2] float64 Hz, equally spaced in mel: filter m's lower edge, centre and upper edge are entries m,
    m + 1 and m + 2."""
    f_max = sample_rate / 2 if f_max is None else f_max
    if not 0.0 <= f_min < f_max <= sample_rate / 2:
        raise ValueError(f"need 0 <= f_min < f_max <= sample_rate / 2, got f_min={f_min}, f_max={f_max}")
    limits = hz_to_mel(torch.tensor([f_min, f_max], dtype=torch.float64))  # [2]
    return mel_to_hz(torch.linspace(float(limits[0]), float(limits[1]), n_mels + 2, dtype=torch.float64))


def mel_filterbank(
    n_mels: int, n_fft: int, sample_rate: int, f_min: float = 0.0, f_max: float | None = None
) -> torch.Tensor:
    """Triangular HTK-mel filters over the rfft bins. Returns [n_fft // 2 + 1, n_mels] float32, peak value <= 1."""
    bin_hz = torch.linspace(0.0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)  # [n_freqs]
    edges_hz = mel_band_edges(n_mels, sample_rate, f_min, f_max)  # [n_mels + 2]
    lower, centre, upper = edges_hz[:-2], edges_hz[1:-1], edges_hz[2:]  # [n_mels] each
    rising = (bin_hz[:, None] - lower[None, :]) / (centre - lower)[None, :]  # [n_freqs, n_mels]
    falling = (upper[None, :] - bin_hz[:, None]) / (upper - centre)[None, :]
    filters = torch.clamp(torch.minimum(rising, falling), min=0.0)
    empty = (filters.sum(dim=0) == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(
            f"mel filters {empty} cover no FFT bin: use fewer mels ({n_mels}) or a larger n_fft ({n_fft})"
        )
    return filters.float()


class LogMelFrontend:
    """Waveform [N] at ``sample_rate`` -> log-mel features [T, n_mels].

    Frames of ``win_ms`` (rounded to samples) every ``hop_ms``, no centring padding: frame t covers samples
    ``t * hop .. t * hop + win - 1``, so ``T = 1 + (N - win) // hop`` (a signal shorter than one window is zero-padded
    to one frame). Each frame is multiplied by a periodic Hann window of ``win`` samples, zero-padded to ``n_fft``
    (default: the next power of two >= win), and its power spectrum |rfft|^2 goes through the mel filters;
    the result is ``log(max(mel_power, 1e-10))``.
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        n_mels: int = 80,
        win_ms: float = 25.0,
        hop_ms: float = 10.0,
        n_fft: int | None = None,
        f_min: float = 0.0,
        f_max: float | None = None,
    ) -> None:
        self.sample_rate = int(sample_rate)
        self.n_mels = int(n_mels)
        self.win_length = round(self.sample_rate * win_ms / 1000.0)
        self.hop_length = round(self.sample_rate * hop_ms / 1000.0)
        if self.win_length < 2 or self.hop_length < 1:
            raise ValueError(f"window ({win_ms} ms) and hop ({hop_ms} ms) are too short at {sample_rate} Hz")
        self.n_fft = 1 << (self.win_length - 1).bit_length() if n_fft is None else int(n_fft)
        if self.n_fft < self.win_length:
            raise ValueError(f"n_fft ({self.n_fft}) must be >= the window length ({self.win_length} samples)")
        window = torch.hann_window(self.win_length, periodic=True, dtype=torch.float32)
        self.window = torch.nn.functional.pad(window, (0, self.n_fft - self.win_length))  # [n_fft]
        self.filters = mel_filterbank(self.n_mels, self.n_fft, self.sample_rate, f_min, f_max)  # [n_freqs, n_mels]
        self.centres_hz = mel_band_edges(self.n_mels, self.sample_rate, f_min, f_max)[1:-1]  # [n_mels] filter peaks

    def num_frames(self, num_samples: int) -> int:
        """Frame count T for a waveform of ``num_samples`` samples."""
        return 1 + max(0, num_samples - self.win_length) // self.hop_length

    def __call__(self, waveform: torch.Tensor) -> torch.Tensor:
        if waveform.dim() != 1 or waveform.numel() == 0:
            raise ValueError(f"LogMelFrontend expects a non-empty waveform [N], got shape {tuple(waveform.shape)}")
        waveform = waveform.float()
        num_frames = self.num_frames(waveform.numel())
        needed = (num_frames - 1) * self.hop_length + self.n_fft  # samples covered by the n_fft-long stft frames
        if waveform.numel() < needed:  # the last frame's zero-padded tail (and signals shorter than one window)
            waveform = torch.nn.functional.pad(waveform, (0, needed - waveform.numel()))
        spectrum = torch.stft(
            waveform[:needed],
            n_fft=self.n_fft,
            hop_length=self.hop_length,
            win_length=self.n_fft,
            window=self.window,
            center=False,
            return_complex=True,
        )  # [n_freqs, T]
        power = spectrum.real.square() + spectrum.imag.square()  # [n_freqs, T]
        mel_power = power.transpose(0, 1) @ self.filters  # [T, n_mels]
        features = torch.log(torch.clamp(mel_power, min=_LOG_FLOOR))
        assert_shape(features, f"{num_frames},{self.n_mels}", name="log-mel features")
        check_finite(features, "log-mel features")
        return features


def subtract_utterance_mean(log_mel: torch.Tensor) -> torch.Tensor:
    """Cepstral-style mean normalisation of one utterance: log_mel [T, F] -> [T, F] less its mean per channel.

    A stationary spectral envelope (a voice's or a channel's long-term spectrum: level, tilt, formant ranges) adds the
    same vector to every log-mel frame; subtracting the utterance's mean removes it. The mean is taken over the frames
    that are not digital silence (every channel at the front end's floor): exact zeros before or after a clip would
    otherwise pull it 20 dB down by their length alone. An utterance of digital silence only keeps all its frames.
    """
    assert_shape(log_mel, "T,F", "log-mel features for the utterance mean")
    active = log_mel.amax(dim=1) > _DIGITAL_SILENCE_LOG  # [T]
    frames = log_mel[active] if bool(active.any()) else log_mel  # [T_active, F]
    return log_mel - frames.mean(dim=0)


class FeatureNormalizer:
    """Per-dimension standardisation with training-set statistics: x [..., F] -> (x - mean) / std.

    ``utterance_mean``: each utterance's own mean is subtracted first (:func:`subtract_utterance_mean`, x [T, F]),
    and the global statistics are those of the mean-subtracted training features (``data.utterance_mean``).
    """

    MIN_STD = 1e-5

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, utterance_mean: bool = False) -> None:
        mean = torch.as_tensor(mean, dtype=torch.float32)
        std = torch.as_tensor(std, dtype=torch.float32)
        if mean.dim() != 1 or mean.shape != std.shape:
            raise ValueError(f"mean and std must both be [F], got {tuple(mean.shape)} and {tuple(std.shape)}")
        if not (torch.isfinite(mean).all() and torch.isfinite(std).all() and (std > 0).all()):
            raise ValueError("normalizer statistics must be finite with std > 0")
        self.mean = mean  # [F]
        self.std = std  # [F]
        self.utterance_mean = utterance_mean

    @classmethod
    def fit(cls, features: Iterable[torch.Tensor], utterance_mean: bool = False) -> FeatureNormalizer:
        """Mean and standard deviation over all frames of all utterances ([T_i, F] each; with ``utterance_mean``,
        of each utterance less its own mean).

        Per-utterance moments are merged with Chan et al.'s parallel update in float64, so large offsets and
        many frames do not lose precision. ``std`` is floored at ``MIN_STD`` (constant dimensions).
        """
        count = 0
        mean: torch.Tensor | None = None
        sum_sq_dev: torch.Tensor | None = None  # sum of squared deviations from the running mean, [F]
        for item in features:
            if item.dim() != 2 or item.shape[0] == 0:
                raise ValueError(f"FeatureNormalizer.fit expects features [T, F] with T > 0, got {tuple(item.shape)}")
            frames = item.detach().to(torch.float64)
            if utterance_mean:
                frames = subtract_utterance_mean(frames)
            n = frames.shape[0]
            item_mean = frames.mean(dim=0)  # [F]
            item_sum_sq_dev = (frames - item_mean).square().sum(dim=0)  # [F]
            if mean is None:
                count, mean, sum_sq_dev = n, item_mean, item_sum_sq_dev
                continue
            if item_mean.shape != mean.shape:
                raise ValueError(f"feature dimension changed from {mean.shape[0]} to {item_mean.shape[0]}")
            total = count + n
            delta = item_mean - mean
            mean = mean + delta * (n / total)
            sum_sq_dev = sum_sq_dev + item_sum_sq_dev + delta.square() * (count * n / total)
            count = total
        if mean is None:
            raise DataError("cannot fit feature normalisation statistics: no features given")
        std = torch.sqrt(sum_sq_dev / count).clamp(min=cls.MIN_STD)
        return cls(mean.float(), std.float(), utterance_mean)

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        if features.shape[-1] != self.mean.shape[0]:
            raise ValueError(f"features have {features.shape[-1]} dims, normalizer has {self.mean.shape[0]}")
        if self.utterance_mean:
            features = subtract_utterance_mean(features)
        return (features - self.mean) / self.std

    def to_dict(self) -> dict[str, list[float] | bool]:
        """Plain lists and a flag, safe for ``torch.load(weights_only=True)``."""
        return {"mean": self.mean.tolist(), "std": self.std.tolist(), "utterance_mean": self.utterance_mean}

    @classmethod
    def from_dict(cls, state: Mapping[str, list[float] | bool]) -> FeatureNormalizer:
        """The inverse of :meth:`to_dict`; statistics saved before ``utterance_mean`` existed read as without it."""
        try:
            return cls(torch.tensor(state["mean"]), torch.tensor(state["std"]),
                       bool(state.get("utterance_mean", False)))
        except (KeyError, TypeError, ValueError) as err:
            raise DataError(f"invalid feature normalizer statistics: {err}") from None


class SpecAugment:
    """Frequency and time masking (Park et al., 2019) on one utterance's features [T, F].

    Each of ``freq_masks`` masks zeroes ``w ~ U{0..freq_width}`` consecutive feature channels starting at
    ``s ~ U{0..F - w}``; likewise ``time_masks`` masks of up to ``time_width`` frames (capped at T). Zero is the mean
    after normalisation, so apply it to normalised features. All randomness comes from the given generator.
    """

    def __init__(self, freq_masks: int = 2, freq_width: int = 27, time_masks: int = 2, time_width: int = 40) -> None:
        for name, value in (
            ("freq_masks", freq_masks),
            ("freq_width", freq_width),
            ("time_masks", time_masks),
            ("time_width", time_width),
        ):
            if value < 0:
                raise ValueError(f"SpecAugment {name} must be >= 0, got {value}")
        self.freq_masks = freq_masks
        self.freq_width = freq_width
        self.time_masks = time_masks
        self.time_width = time_width

    @property
    def enabled(self) -> bool:
        return (self.freq_masks > 0 and self.freq_width > 0) or (self.time_masks > 0 and self.time_width > 0)

    def __call__(self, features: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        assert_shape(features, "T,F", name="SpecAugment input")
        if not self.enabled:
            return features
        num_frames, num_dims = features.shape
        freq_mask = _band_mask(num_dims, self.freq_masks, self.freq_width, generator)  # [F]
        time_mask = _band_mask(num_frames, self.time_masks, self.time_width, generator)  # [T]
        masked = time_mask[:, None] | freq_mask[None, :]  # [T, F]
        return features.masked_fill(masked, 0.0)


def _band_mask(size: int, count: int, max_width: int, generator: torch.Generator) -> torch.Tensor:
    """Union of ``count`` random bands of width U{0..min(max_width, size)} over ``size`` positions -> bool [size]."""
    if count == 0 or max_width == 0:
        return torch.zeros(size, dtype=torch.bool)
    max_width = min(max_width, size)
    widths = torch.randint(0, max_width + 1, (count,), generator=generator)  # [count]
    # start uniform in [0, size - width]: scale a uniform draw by the number of valid starts
    starts = (torch.rand(count, generator=generator) * (size - widths + 1)).long()  # [count]
    positions = torch.arange(size)  # [size]
    inside = (positions[None, :] >= starts[:, None]) & (positions[None, :] < (starts + widths)[:, None])
    return inside.any(dim=0)


class VoicePerturb:
    """What differs between two voices (or microphones) saying the same words, drawn at random for one utterance's
    log-mel features [T, F] (before normalisation; training only).

    - **Frequency warp** (vocal-tract length perturbation): every frequency scaled by ``alpha ~ U(1 - max_warp,
      1 + max_warp)``, so formants and harmonics move together; channel j, centred at ``f_j`` Hz, takes the value the
      spectrum had at ``f_j / alpha``, linearly interpolated between channels on the mel axis (clamped at the
      edges). Unlike speed perturbation it leaves the tempo alone.
    - **Spectral envelope**: a smooth gain added across the channels, ``sum_k a_k cos(pi k (j + 0.5) / F)`` for
      k = 0 .. ``envelope_terms`` - 1 (k = 0 a level, 1 a tilt, higher ones broad coloration), each amplitude
      ``a_k ~ U(-envelope_max_db, envelope_max_db)`` dB, converted to the log-mel's natural-log units.

    All randomness comes from the given generator; with nothing enabled the features come back unchanged.
    """

    def __init__(self, centres_hz: torch.Tensor, max_warp: float = 0.0, envelope_terms: int = 0,
                 envelope_max_db: float = 0.0) -> None:
        if not 0.0 <= max_warp < 1.0:
            raise ValueError(f"VoicePerturb max_warp must be in [0, 1), got {max_warp}")
        if envelope_terms < 0 or envelope_max_db < 0:
            raise ValueError(f"VoicePerturb envelope_terms and envelope_max_db must be >= 0, "
                             f"got {envelope_terms} and {envelope_max_db}")
        self.centres_mel = hz_to_mel(torch.as_tensor(centres_hz, dtype=torch.float64))  # [F]
        self.max_warp = float(max_warp)
        self.envelope_terms = int(envelope_terms)
        self.envelope_max_db = float(envelope_max_db)

    @classmethod
    def for_frontend(cls, frontend: LogMelFrontend, max_warp: float = 0.0, envelope_terms: int = 0,
                     envelope_max_db: float = 0.0) -> VoicePerturb:
        """The perturbation of ``frontend``'s features: channel centres where its filters peak."""
        return cls(frontend.centres_hz, max_warp, envelope_terms, envelope_max_db)

    @property
    def enabled(self) -> bool:
        return self.max_warp > 0 or (self.envelope_terms > 0 and self.envelope_max_db > 0)

    def __call__(self, features: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        assert_shape(features, f"T,{self.centres_mel.shape[0]}", name="VoicePerturb input")
        if self.max_warp > 0:
            alpha = 1.0 + self.max_warp * (2.0 * torch.rand((), generator=generator, dtype=torch.float64) - 1.0)
            features = self.warp(features, alpha)
        if self.envelope_terms > 0 and self.envelope_max_db > 0:
            amplitudes_db = self.envelope_max_db * (2.0 * torch.rand(self.envelope_terms, generator=generator) - 1.0)
            features = features + self.envelope(amplitudes_db, features.shape[1])[None, :]
        return features

    def warp(self, features: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
        """features [T, F] -> [T, F] with every frequency scaled by ``alpha`` (see the class)."""
        centres = self.centres_mel  # [F], equally spaced
        step = centres[1] - centres[0]
        source_hz = mel_to_hz(centres) / alpha  # [F]: where each channel reads the unwarped spectrum
        position = ((hz_to_mel(source_hz) - centres[0]) / step).clamp(0, centres.shape[0] - 1)  # [F] channel index
        lower = position.floor().long().clamp(max=centres.shape[0] - 2)  # [F]
        weight = (position - lower).to(features.dtype)  # [F] in [0, 1]
        return features[:, lower] * (1 - weight) + features[:, lower + 1] * weight

    @staticmethod
    def envelope(amplitudes_db: torch.Tensor, num_channels: int) -> torch.Tensor:
        """amplitudes [K] dB -> the gain curve [num_channels] in natural-log power units."""
        orders = torch.arange(amplitudes_db.shape[0], dtype=torch.float32)  # [K]
        channels = torch.arange(num_channels, dtype=torch.float32) + 0.5  # [F]
        cosines = torch.cos(torch.pi * orders[:, None] * channels[None, :] / num_channels)  # [K, F]
        return (amplitudes_db.float() @ cosines) * (torch.log(torch.tensor(10.0)) / 10.0)
