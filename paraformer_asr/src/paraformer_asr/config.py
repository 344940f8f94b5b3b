"""Experiment configuration: YAML -> nested dataclasses with strict validation.

Sections: ``run``, ``data``, ``model``, ``train``, ``decode`` (how eval.py, infer.py and serve.py decode the trained
model unless their flags say otherwise). Unknown keys, wrong types and impossible values
raise :class:`ConfigError` naming the key, before anything is trained. ``--set section.key=value``
overrides (value parsed as YAML) are applied to the raw mapping before parsing, so they get the
same checks. Paths in a config are relative to the current working directory.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from paraformer_asr.errors import ConfigError

SUBSAMPLING_FACTORS = {"none": 1, "2x": 2, "4x": 4}


def min_input_frames(factor: int) -> int:
    """The shortest input that still leaves one frame after ``factor`` subsampling: each stride-2 3-tap conv maps
    L -> (L - 1) // 2 (models/encoder.py, ``subsampled_lengths``), so one frame out of a conv needs 2 L + 1 in."""
    frames = 1
    for _ in range(int(math.log2(factor))):
        frames = 2 * frames + 1
    return frames


MIN_INPUT_FRAMES = {factor: min_input_frames(factor) for factor in SUBSAMPLING_FACTORS.values()}
MODEL_TYPES = ("paraformer", "transformer_ar")
CTC_COMBINATIONS = ("add", "interpolate")
CTC_NORMALIZATIONS = ("token", "utterance")
PREDICTORS = ("cif", "ctc")
CTC_QUERIES = ("states", "posteriors")
DECODE_METHODS = ("greedy", "beam")


def _choices(*values: str) -> dict:
    return {"choices": values}


@dataclass
class RunConfig:
    name: str = "paraformer"
    output_dir: str = "runs"
    seed: int = 0
    device: str = field(default="auto", metadata=_choices("auto", "cpu", "cuda"))
    num_threads: int = 0  # CPU threads for torch; 0 = torch's default. 1 is fastest on a busy shared CPU.


@dataclass
class ToyDataConfig:
    """Synthetic 'speech-like' task (see data/toy.py)."""

    alphabet: str = "abcdefghijklmnopqrst"
    feature_dim: int = 40
    num_train: int = 4000
    num_val: int = 300
    num_test: int = 300
    min_tokens: int = 4
    max_tokens: int = 12
    min_frames_per_token: int = 6
    max_frames_per_token: int = 12
    transition_frames: int = 2
    noise_std: float = 0.15
    seed: int = 1234


@dataclass
class SpecAugmentConfig:
    """Frequency/time masking for real speech, training only; all zeros = off."""

    freq_masks: int = 0
    freq_width: int = 0
    time_masks: int = 0
    time_width: int = 0


@dataclass
class VoicePerturbConfig:
    """Random voice differences on the log-mel features, training only (data/frontend.py, VoicePerturb); all
    zeros = off."""

    max_warp: float = 0.0  # frequency warp alpha ~ U(1 - max_warp, 1 + max_warp), e.g. 0.1
    envelope_terms: int = 0  # cosine terms of the random spectral envelope (0 level, 1 tilt, ...), e.g. 4
    envelope_max_db: float = 0.0  # largest amplitude of each term in dB, e.g. 6


NOISE_KINDS = ("white", "pink", "babble")


@dataclass
class ReverbConfig:
    """A synthetic room: the waveform convolved with a random impulse response (data/augment.py)."""

    p: float = 0.0  # probability per training item and epoch; 0 = off
    rt60_s: list[float] = field(default_factory=lambda: [0.2, 0.8])  # reverberation time drawn in [low, high] s
    drr_db: list[float] = field(default_factory=lambda: [0.0, 12.0])  # direct-to-reverberant ratio in [low, high] dB
    early_reflections: int = 4  # discrete echoes 1-50 ms after the direct sound


@dataclass
class NoiseConfig:
    """Additive noise at a random signal-to-noise ratio (data/augment.py)."""

    p: float = 0.0  # probability per training item and epoch; 0 = off
    snr_db: list[float] = field(default_factory=lambda: [5.0, 30.0])  # SNR drawn in [low, high] dB
    kinds: list[str] = field(default_factory=lambda: list(NOISE_KINDS))  # one drawn uniformly: white, pink, babble
    babble_voices: int = 3  # babble: this many other training utterances summed


@dataclass
class TelephoneConfig:
    """A telephone channel: 8 kHz, 300-3400 Hz, 8-bit mu-law (data/augment.py)."""

    p: float = 0.0  # probability per training item and epoch; 0 = off
    mu_law: bool = True  # also encode and decode with 8-bit mu-law companding at 8 kHz


@dataclass
class MicrophoneConfig:
    """Microphone colouring: a smooth random EQ curve (data/augment.py)."""

    p: float = 0.0  # probability per training item and epoch; 0 = off
    bands: int = 3  # random peaking bands, besides a low and a high shelf
    max_db: float = 6.0  # each band's and shelf's gain drawn in [-max_db, max_db]


@dataclass
class LoudnessConfig:
    """Recording level: a random gain and occasional clipping (data/augment.py)."""

    p: float = 0.0  # probability of a random gain per training item and epoch; 0 = off
    gain_db: list[float] = field(default_factory=lambda: [-12.0, 6.0])  # gain drawn in [low, high] dB
    clip_p: float = 0.0  # probability of hard clipping (after the gain); 0 = off
    clip_level: list[float] = field(default_factory=lambda: [0.3, 0.9])  # clipping level in [low, high] x the peak


@dataclass
class AugmentConfig:
    """Waveform augmentation toward real recordings, training only, in this order: room, noise, microphone,
    loudness, telephone (data/augment.py); every p 0 (the default) = off."""

    reverb: ReverbConfig = field(default_factory=ReverbConfig)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    microphone: MicrophoneConfig = field(default_factory=MicrophoneConfig)
    loudness: LoudnessConfig = field(default_factory=LoudnessConfig)
    telephone: TelephoneConfig = field(default_factory=TelephoneConfig)

    def probabilities(self) -> dict[str, float]:
        """Every stage's probability by its key below ``data.augment`` ('reverb.p', ..., 'loudness.clip_p')."""
        stages = {name: getattr(self, name) for name in ("reverb", "noise", "microphone", "loudness", "telephone")}
        return {**{f"{name}.p": stage.p for name, stage in stages.items()}, "loudness.clip_p": self.loudness.clip_p}

    @property
    def enabled(self) -> bool:
        return any(p > 0 for p in self.probabilities().values())


@dataclass
class DataConfig:
    kind: str = field(default="toy", metadata=_choices("toy", "manifest"))
    toy: ToyDataConfig = field(default_factory=ToyDataConfig)
    train_manifest: Optional[str] = None
    val_manifest: Optional[str] = None
    test_manifest: Optional[str] = None
    sample_rate: int = 16000
    n_mels: int = 80
    skip_bad_files: bool = False
    spec_augment: SpecAugmentConfig = field(default_factory=SpecAugmentConfig)
    tokenizer: str = field(default="char", metadata=_choices("char", "bpe", "unigram"))
    vocab_size: int = 256  # bpe / unigram: most token ids, specials included (a soft limit)
    speed_perturb: Optional[list[float]] = None  # e.g. [0.9, 1.0, 1.1]: one factor per training item and epoch
    edge_pad_ms: float = 0.0  # training only: 0 .. this much quiet added before and after each item, drawn per epoch
    voice_perturb: VoicePerturbConfig = field(default_factory=VoicePerturbConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)  # training only: rooms, noise, microphones, ...
    utterance_mean: bool = False  # subtract each utterance's mean log-mel before the global normalisation


@dataclass
class StreamingConfig:
    """A chunked encoder that can be decoded while the audio arrives (models/streaming.py); off by default. Chunk
    sizes count encoder frames (40 ms each with 4x subsampling of 10 ms features)."""

    enabled: bool = False  # chunk attention masks in the encoder (and decoding as a stream possible)
    chunk_sizes: list[int] = field(default_factory=lambda: [4, 8, 16, 0])  # training: one drawn per batch; 0 = full
    left_chunks: Optional[int] = None  # chunks before its own that a frame attends to; null = all of them
    right_frames: int = 0  # look-ahead: frames past its chunk's end the first encoder layer attends to
    decode_chunk_size: int = 16  # the chunk outside training (validation, eval.py, streams); 0 = full context
    two_pass: bool = False  # a stream's final transcript from one full-context pass over the whole utterance


@dataclass
class ModelConfig:
    type: str = field(default="paraformer", metadata=_choices(*MODEL_TYPES))
    d_model: int = 128
    num_heads: int = 4
    encoder_layers: int = 3
    decoder_layers: int = 2
    # Paraformer decoder only. 0: self-attention over the tokens; k > 0 (odd): SAN-M's FSMN memory in its place, a
    # depthwise convolution of k taps over the token axis (FunASR's Paraformer decoder; 11 there)
    decoder_fsmn_kernel: int = 0
    ffn_dim: int = 512
    dropout: float = 0.1
    subsampling: str = field(default="4x", metadata=_choices(*SUBSAMPLING_FACTORS))
    subsampling_channels: int = 32
    cif_kernel_size: int = 3
    cif_threshold: float = 1.0
    cif_tail_threshold: float = 0.5
    glancing_ratio: float = 0.5
    label_smoothing: float = 0.1
    quantity_weight: float = 1.0
    ctc_weight: float = 0.0
    # add: ce + ctc_weight * ctc; interpolate: (1 - ctc_weight) * ce + ctc_weight * ctc (FunASR's); both model types
    ctc_combination: str = field(default="add", metadata=_choices(*CTC_COMBINATIONS))
    # token: the CTC loss summed over the batch divided by its target tokens; utterance: by its utterances (FunASR's)
    ctc_normalization: str = field(default="token", metadata=_choices(*CTC_NORMALIZATIONS))
    # false: CE mean per token, quantity loss mean per utterance; true: both divided by the target tokens (FunASR's)
    length_normalized_loss: bool = False
    # Paraformer token extraction: cif (integrate-and-fire) or ctc (the CTC path, Paraformer-v2; needs ctc_weight > 0)
    predictor: str = field(default="cif", metadata=_choices(*PREDICTORS))
    # ctc extractor's queries: states (mean encoder state per token) or posteriors (mean CTC posterior, projected)
    ctc_queries: str = field(default="states", metadata=_choices(*CTC_QUERIES))
    predictor_bias: int = 0  # 1: the CIF also fires for an <eos> after the last token (FunASR's predictor_bias)
    activation_checkpointing: bool = False
    streaming: StreamingConfig = field(default_factory=StreamingConfig)


@dataclass
class TrainConfig:
    epochs: int = 10
    max_steps: Optional[int] = None
    batch_size: int = 32
    eval_batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 100
    grad_clip: float = 5.0
    amp: bool = False
    accumulate_steps: int = 1
    num_workers: int = 0
    log_every: int = 20
    checkpoint_every: int = 0
    max_bad_batches: int = 5
    compile: bool = False
    compile_backend: str = field(default="inductor", metadata=_choices("inductor", "aot_eager", "eager"))
    plot_utterances: int = 3
    keep_best: int = 1  # N > 1: also keep checkpoints/best_epoch{E}.pt of the N best epochs by validation CER
    calibrate_cif: bool = True  # Paraformer: refit the CIF's inference alpha scale on the validation set each epoch
    # the first N optimiser steps weight the decoder's loss 0: the CTC head (and the CIF's quantity loss) train first
    ctc_warmup_steps: int = 0
    freeze_encoder_steps: int = 0  # the first N optimiser steps leave the encoder's weights as they are (fine-tuning)


@dataclass
class DecodeConfig:
    """The checkpoint's default decoding (decode/options.py; a flag of eval.py, infer.py or serve.py overrides it)."""

    method: str = field(default="greedy", metadata=_choices(*DECODE_METHODS))
    beam_size: int = 4
    lm_order: int = 0  # with method beam: a token n-gram LM of this order from the training transcripts (0: none)
    lm_weight: float = 0.3
    # Paraformer with the CIF: also decode the token counts N +- 1..k and keep the best per token (0: off) ...
    length_candidates: int = 0
    # ... less count_prior x its distance to the CIF's expected count (0: the scores alone pick the count)
    count_prior: float = 0.0
    # ... plus ctc_score_weight x each hypothesis's CTC log-likelihood per token (a model with a CTC head; 0: none;
    # the autoregressive baseline ranks its beams again with it)
    ctc_score_weight: float = 0.0
    lexicon: bool = False  # Paraformer: only sentences of the training transcripts' words (decode/lexicon.py)
    # at the end of training, choose method, lm_weight, length_candidates, count_prior and ctc_score_weight on the
    # validation set
    # (training/tuning.py) and store the choice in best.pt
    tune: bool = False


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def subsampling_factor(self) -> int:
        return SUBSAMPLING_FACTORS[self.model.subsampling]


# ----------------------------------------------------------------------------- parsing


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (ints are accepted for floats)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], key)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"config key '{key}' must be a list, got {value!r}")
        (item_type,) = typing.get_args(tp)
        return [_coerce(item, item_type, f"{key}[{index}]") for index, item in enumerate(value)]
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' must be a mapping, got {value!r}")
        return _build(tp, value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{key}' must be {_type_name(bool)}, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key '{key}' must be {_type_name(int)}, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str) and _looks_like_number(value):
            value = float(value)  # YAML 1.1 reads '1e-3' as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"config key '{key}' must be a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"config key '{key}' must be {_type_name(str)}, got {value!r}")
        return value
    raise TypeError(f"unsupported config annotation {tp!r} for '{key}'")


def _build(cls: type, data: dict, prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            full = f"{prefix}.{key}" if prefix else str(key)
            raise ConfigError(f"unknown config key '{full}' (known keys: {', '.join(sorted(known))})")
    kwargs = {}
    for name, f in known.items():
        if name not in data:
            continue
        full = f"{prefix}.{name}" if prefix else name
        value = _coerce(data[name], hints[name], full)
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            raise ConfigError(f"config key '{full}' must be one of {list(choices)}, got {value!r}")
        kwargs[name] = value
    return cls(**kwargs)


def _require(condition: bool, key: str, rule: str, value: Any) -> None:
    if not condition:
        raise ConfigError(f"config key '{key}' must be {rule}, got {value!r}")


def ctc_score_missing(model: ModelConfig, method: str, length_candidates: int) -> str | None:
    """What a CTC score of hypotheses lacks with this model and decoding, in words (None: nothing): a CTC head, and
    hypotheses to rank (a Paraformer's length candidates, the autoregressive baseline's beams). The config check
    and the command lines' (decode/options.py) both ask it."""
    if model.ctc_weight <= 0:
        return f"a model trained with a CTC head (this one: model.ctc_weight {model.ctc_weight:g})"
    if model.type == "paraformer" and length_candidates == 0:
        return "length candidates to rank (a Paraformer: decode.length_candidates / --length-candidates > 0)"
    if model.type == "transformer_ar" and method != "beam":
        return "beams to rank (the autoregressive baseline: decode.method 'beam' / --decode beam)"
    return None


def validate(cfg: Config) -> Config:
    """Check value ranges and cross-field rules; raise ConfigError naming the key."""
    train, model, data = cfg.train, cfg.model, cfg.data
    _require(cfg.run.num_threads >= 0, "run.num_threads", ">= 0", cfg.run.num_threads)
    _require(cfg.run.seed >= 0, "run.seed", ">= 0", cfg.run.seed)
    _require(bool(cfg.run.name) and "/" not in cfg.run.name, "run.name", "a non-empty name without '/'",
             cfg.run.name)
    for key in ("epochs", "batch_size", "eval_batch_size", "accumulate_steps", "log_every", "max_bad_batches",
                "keep_best"):
        _require(getattr(train, key) >= 1, f"train.{key}", ">= 1", getattr(train, key))
    for key in ("warmup_steps", "num_workers", "checkpoint_every", "plot_utterances"):
        _require(getattr(train, key) >= 0, f"train.{key}", ">= 0", getattr(train, key))
    _require(train.max_steps is None or train.max_steps >= 1, "train.max_steps", ">= 1 or null", train.max_steps)
    _require(train.lr > 0, "train.lr", "> 0", train.lr)
    _require(train.weight_decay >= 0, "train.weight_decay", ">= 0", train.weight_decay)
    _require(train.grad_clip > 0, "train.grad_clip", "> 0", train.grad_clip)

    for key in ("d_model", "num_heads", "encoder_layers", "decoder_layers", "ffn_dim", "subsampling_channels",
                "cif_kernel_size"):
        _require(getattr(model, key) >= 1, f"model.{key}", ">= 1", getattr(model, key))
    _require(model.d_model % model.num_heads == 0, "model.d_model", f"divisible by model.num_heads ({model.num_heads})",
             model.d_model)
    _require(model.d_model % 2 == 0, "model.d_model", "even (sinusoidal positions)", model.d_model)
    _require(model.cif_kernel_size % 2 == 1, "model.cif_kernel_size", "odd", model.cif_kernel_size)
    fsmn_kernel = model.decoder_fsmn_kernel
    _require(fsmn_kernel == 0 or (fsmn_kernel > 0 and fsmn_kernel % 2 == 1), "model.decoder_fsmn_kernel",
             "0 (self-attention) or odd", fsmn_kernel)
    _require(fsmn_kernel == 0 or model.type == "paraformer", "model.decoder_fsmn_kernel",
             "0 for the autoregressive model (its decoder attends causally)", fsmn_kernel)
    _require(0 <= model.dropout < 1, "model.dropout", "in [0, 1)", model.dropout)
    _require(model.cif_threshold > 0, "model.cif_threshold", "> 0", model.cif_threshold)
    _require(0 < model.cif_tail_threshold < model.cif_threshold, "model.cif_tail_threshold",
             "in (0, model.cif_threshold)", model.cif_tail_threshold)
    _require(0 <= model.glancing_ratio <= 1, "model.glancing_ratio", "in [0, 1]", model.glancing_ratio)
    _require(0 <= model.label_smoothing < 1, "model.label_smoothing", "in [0, 1)", model.label_smoothing)
    _require(model.quantity_weight >= 0, "model.quantity_weight", ">= 0", model.quantity_weight)
    _require(model.ctc_weight >= 0, "model.ctc_weight", ">= 0", model.ctc_weight)
    _require(cfg.train.ctc_warmup_steps >= 0, "train.ctc_warmup_steps", ">= 0", cfg.train.ctc_warmup_steps)
    _require(train.freeze_encoder_steps >= 0, "train.freeze_encoder_steps", ">= 0", train.freeze_encoder_steps)
    _require(cfg.train.ctc_warmup_steps == 0 or model.ctc_weight > 0, "train.ctc_warmup_steps",
             "0 unless the model has a CTC head (model.ctc_weight > 0)", cfg.train.ctc_warmup_steps)
    if model.ctc_combination == "interpolate":
        _require(model.ctc_weight < 1, "model.ctc_weight", "< 1 with model.ctc_combination 'interpolate' (the decoder "
                 "loss would get no weight)", model.ctc_weight)
    _require(model.predictor_bias in (0, 1), "model.predictor_bias", "0 or 1", model.predictor_bias)
    _require(model.ctc_queries == "states" or model.predictor == "ctc", "model.ctc_queries",
             "'states' unless model.predictor is 'ctc' (only the CTC extractor reads them)", model.ctc_queries)
    if model.type == "paraformer" and model.predictor == "ctc":
        _require(model.ctc_weight > 0, "model.ctc_weight", "> 0 with model.predictor 'ctc' (the CTC head places the "
                 "tokens)", model.ctc_weight)
        _require(model.predictor_bias == 0, "model.predictor_bias", "0 with model.predictor 'ctc' (no end-of-sentence "
                 "fire)", model.predictor_bias)

    _validate_streaming(cfg)

    decode = cfg.decode
    _require(decode.beam_size >= 1, "decode.beam_size", ">= 1", decode.beam_size)
    _require(decode.lm_order >= 0, "decode.lm_order", ">= 0", decode.lm_order)
    _require(decode.lm_weight >= 0, "decode.lm_weight", ">= 0", decode.lm_weight)
    _require(decode.lm_order == 0 or decode.method == "beam", "decode.lm_order", "0 unless decode.method is 'beam'",
             decode.lm_order)
    _require(decode.length_candidates >= 0, "decode.length_candidates", ">= 0", decode.length_candidates)
    _require(decode.count_prior >= 0, "decode.count_prior", ">= 0", decode.count_prior)
    _require(decode.ctc_score_weight >= 0, "decode.ctc_score_weight", ">= 0", decode.ctc_score_weight)
    missing = ctc_score_missing(model, decode.method, decode.length_candidates) if decode.ctc_score_weight else None
    _require(missing is None, "decode.ctc_score_weight", f"0 without {missing}", decode.ctc_score_weight)
    paraformer = model.type == "paraformer"
    _require(paraformer or decode.length_candidates == 0, "decode.length_candidates",
             "0 unless the model is a Paraformer", decode.length_candidates)
    _require(paraformer or not decode.tune, "decode.tune", "false unless the model is a Paraformer", decode.tune)

    _require(data.vocab_size >= 1, "data.vocab_size", ">= 1", data.vocab_size)
    for factor in data.speed_perturb or []:
        _require(0 < factor <= 2, "data.speed_perturb", "a list of speed factors in (0, 2]", data.speed_perturb)
    _require(data.edge_pad_ms >= 0, "data.edge_pad_ms", ">= 0", data.edge_pad_ms)
    voice = data.voice_perturb
    _require(0 <= voice.max_warp < 1, "data.voice_perturb.max_warp", "in [0, 1)", voice.max_warp)
    _require(voice.envelope_terms >= 0, "data.voice_perturb.envelope_terms", ">= 0", voice.envelope_terms)
    _require(voice.envelope_max_db >= 0, "data.voice_perturb.envelope_max_db", ">= 0", voice.envelope_max_db)
    _validate_augment(data.augment)
    _require(data.sample_rate >= 8000, "data.sample_rate", ">= 8000", data.sample_rate)
    _require(data.n_mels >= 1, "data.n_mels", ">= 1", data.n_mels)
    for key in ("freq_masks", "freq_width", "time_masks", "time_width"):
        value = getattr(data.spec_augment, key)
        _require(value >= 0, f"data.spec_augment.{key}", ">= 0", value)
    _validate_toy(data.toy)  # also when unused: a section given must make sense
    if data.kind == "toy":
        _require(not data.speed_perturb, "data.speed_perturb", "null for toy data (it resamples audio)",
                 data.speed_perturb)
        _require(data.edge_pad_ms == 0, "data.edge_pad_ms", "0 for toy data (it pads audio)", data.edge_pad_ms)
        _require(voice.max_warp == 0 and voice.envelope_terms * voice.envelope_max_db == 0,
                 "data.voice_perturb", "off (zeros) for toy data (it perturbs log-mel features)", voice)
        _require(not data.augment.enabled, "data.augment", "off (every p 0) for toy data (it augments audio)",
                 {key: p for key, p in data.augment.probabilities().items() if p > 0})
        toy = data.toy
        min_frames = toy.min_tokens * toy.min_frames_per_token
        needed = MIN_INPUT_FRAMES[cfg.subsampling_factor]
        _require(min_frames >= needed, "data.toy.min_frames_per_token",
                 f"large enough that every utterance has >= {needed} frames for {model.subsampling} subsampling",
                 toy.min_frames_per_token)
    else:
        _require(bool(data.train_manifest), "data.train_manifest", "set when data.kind is 'manifest'",
                 data.train_manifest)
        _require(bool(data.val_manifest), "data.val_manifest", "set when data.kind is 'manifest'", data.val_manifest)
    return cfg


def _require_range(values: list[float], key: str, low: float = -math.inf, high: float = math.inf) -> None:
    """``values`` must be two numbers ``[a, b]`` with ``low <= a <= b <= high``."""
    bounds = f", within [{low:g}, {high:g}]" if math.isfinite(low) or math.isfinite(high) else ""
    _require(len(values) == 2 and low <= values[0] <= values[1] <= high, key,
             f"two numbers [low, high] with low <= high{bounds}", values)


def _validate_augment(augment: AugmentConfig) -> None:
    for key, p in augment.probabilities().items():
        _require(0 <= p <= 1, f"data.augment.{key}", "in [0, 1]", p)
    reverb, noise, loudness = augment.reverb, augment.noise, augment.loudness
    _require_range(reverb.rt60_s, "data.augment.reverb.rt60_s", 0.01, 5.0)
    _require_range(reverb.drr_db, "data.augment.reverb.drr_db")
    _require(reverb.early_reflections >= 0, "data.augment.reverb.early_reflections", ">= 0",
             reverb.early_reflections)
    _require_range(noise.snr_db, "data.augment.noise.snr_db")
    _require(bool(noise.kinds) and set(noise.kinds) <= set(NOISE_KINDS), "data.augment.noise.kinds",
             f"a non-empty list of {list(NOISE_KINDS)}", noise.kinds)
    _require(noise.babble_voices >= 1, "data.augment.noise.babble_voices", ">= 1", noise.babble_voices)
    _require(augment.microphone.bands >= 0, "data.augment.microphone.bands", ">= 0", augment.microphone.bands)
    _require(augment.microphone.max_db >= 0, "data.augment.microphone.max_db", ">= 0", augment.microphone.max_db)
    _require_range(loudness.gain_db, "data.augment.loudness.gain_db")
    _require_range(loudness.clip_level, "data.augment.loudness.clip_level", 0.01, 1.0)


def _validate_streaming(cfg: Config) -> None:
    """The ``model.streaming`` block: its values always (a block given must make sense), and what streaming needs of
    the rest of the config when it is on."""
    streaming, model = cfg.model.streaming, cfg.model
    sizes = streaming.chunk_sizes
    _require(len(sizes) > 0 and all(size >= 0 for size in sizes), "model.streaming.chunk_sizes",
             "a non-empty list of chunk sizes >= 0 (0: full context)", sizes)
    _require(streaming.left_chunks is None or streaming.left_chunks >= 0, "model.streaming.left_chunks",
             ">= 0 or null (all chunks before)", streaming.left_chunks)
    _require(streaming.right_frames >= 0, "model.streaming.right_frames", ">= 0", streaming.right_frames)
    _require(streaming.decode_chunk_size >= 0, "model.streaming.decode_chunk_size", ">= 0 (0: full context)",
             streaming.decode_chunk_size)
    if streaming.enabled:
        _require(model.type == "paraformer" and model.predictor == "cif", "model.streaming.enabled",
                 "false unless model.type is 'paraformer' with model.predictor 'cif' (the CIF integrates a stream)",
                 streaming.enabled)
        _require(not cfg.data.utterance_mean, "data.utterance_mean",
                 "false with model.streaming.enabled (a stream has no utterance mean to subtract)",
                 cfg.data.utterance_mean)


def _validate_toy(toy: ToyDataConfig) -> None:
    _require(len(toy.alphabet) >= 2, "data.toy.alphabet", "at least 2 characters", toy.alphabet)
    _require(len(set(toy.alphabet)) == len(toy.alphabet), "data.toy.alphabet", "free of repeated characters",
             toy.alphabet)
    for key in ("feature_dim", "num_train", "num_val", "num_test", "min_tokens", "min_frames_per_token"):
        _require(getattr(toy, key) >= 1, f"data.toy.{key}", ">= 1", getattr(toy, key))
    _require(toy.max_tokens >= toy.min_tokens, "data.toy.max_tokens", f">= data.toy.min_tokens ({toy.min_tokens})",
             toy.max_tokens)
    _require(toy.max_frames_per_token >= toy.min_frames_per_token, "data.toy.max_frames_per_token",
             f">= data.toy.min_frames_per_token ({toy.min_frames_per_token})", toy.max_frames_per_token)
    _require(0 <= toy.transition_frames < toy.min_frames_per_token, "data.toy.transition_frames",
             f"in [0, data.toy.min_frames_per_token ({toy.min_frames_per_token}))", toy.transition_frames)
    _require(toy.noise_std >= 0, "data.toy.noise_std", ">= 0", toy.noise_std)
    _require(toy.seed >= 0, "data.toy.seed", ">= 0", toy.seed)


def parse_override(text: str) -> tuple[list[str], Any]:
    """'train.lr=3e-4' -> (['train', 'lr'], 0.0003); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set expects section.key=value, got {text!r}")
    key, raw = text.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if len(parts) < 2:
        raise ConfigError(f"--set key must look like section.key, got {key!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc})") from exc
    return parts, value


def _looks_like_number(text: str) -> bool:
    """True for strings such as '1e-3' (which YAML 1.1 leaves as strings)."""
    try:
        float(text)
    except ValueError:
        return False
    return any(c.isdigit() for c in text)


def _apply_override(raw: dict, parts: list[str], value: Any) -> None:
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {'.'.join(parts)}: '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def config_from_dict(raw: dict, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Build and validate a Config from a plain mapping plus ``section.key=value`` overrides."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config must be a mapping of sections, got {type(raw).__name__}")
    raw = copy.deepcopy(raw)
    for text in overrides:
        _apply_override(raw, *parse_override(text))
    return validate(_build(Config, raw, ""))


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config file, apply overrides, validate. Raises ConfigError naming file or key."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    return config_from_dict(raw or {}, overrides)


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8")
