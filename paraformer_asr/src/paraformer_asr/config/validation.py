"""Checking a config's values: ranges and cross-field rules, each failure a ConfigError naming the key."""

from __future__ import annotations

import math
from typing import Any

from paraformer_asr.config.schema import (MIN_INPUT_FRAMES, NOISE_KINDS, AugmentConfig, Config, ModelConfig,
                                          ToyDataConfig)
from paraformer_asr.errors import ConfigError


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
    _require(model.decoder_positions or model.type == "paraformer", "model.decoder_positions",
             "true for the autoregressive model (its tokens have no other order)", model.decoder_positions)
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
    _require(0.0 <= train.ema_decay < 1.0, "train.ema_decay", "in [0, 1)", train.ema_decay)
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
    _require(0 <= decode.length_penalty < float("inf"), "decode.length_penalty", "a finite number >= 0",
             decode.length_penalty)
    missing = ctc_score_missing(model, decode.method, decode.length_candidates) if decode.ctc_score_weight else None
    _require(missing is None, "decode.ctc_score_weight", f"0 without {missing}", decode.ctc_score_weight)
    paraformer = model.type == "paraformer"
    _require(paraformer or decode.length_candidates == 0, "decode.length_candidates",
             "0 unless the model is a Paraformer", decode.length_candidates)
    _require(paraformer or not decode.tune, "decode.tune", "false unless the model is a Paraformer", decode.tune)
    _require(paraformer or not decode.phrase_candidates, "decode.phrase_candidates",
             "false unless the model is a Paraformer", decode.phrase_candidates)

    _require(data.vocab_size >= 1, "data.vocab_size", ">= 1", data.vocab_size)
    _require(data.word_units_max >= 0, "data.word_units_max", ">= 0", data.word_units_max)
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
