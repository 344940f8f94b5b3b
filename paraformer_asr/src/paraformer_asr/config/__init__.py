"""Experiment configuration: YAML -> nested dataclasses with strict validation.

Sections: ``run``, ``data``, ``model``, ``train``, ``decode`` (how eval.py, infer.py and serve.py decode the trained
model unless their flags say otherwise). Unknown keys, wrong types and impossible values
raise :class:`ConfigError` naming the key, before anything is trained. ``--set section.key=value``
overrides (value parsed as YAML) are applied to the raw mapping before parsing, so they get the
same checks. A config file may start from another (``base: FILE``, relative to the file naming it): the base's
keys are merged under its own. Paths in a config's values are relative to the current working directory.

The package's modules: schema.py (the sections as dataclasses, their defaults and allowed values), loading.py
(YAML files and their bases, mappings -> Config, ``--set`` overrides, type checks), validation.py (value ranges
and cross-field rules). Everything a caller needs is importable from the package itself.
"""

from paraformer_asr.config.loading import (config_from_dict, load_config, parse_override, read_config_mapping,
                                           save_config)
from paraformer_asr.config.schema import (CTC_COMBINATIONS, CTC_NORMALIZATIONS, CTC_QUERIES, DECODE_METHODS,
                                          MIN_INPUT_FRAMES, MODEL_TYPES, NOISE_KINDS, PREDICTORS,
                                          SUBSAMPLING_FACTORS, AugmentConfig, Config, DataConfig, DecodeConfig,
                                          LoudnessConfig, MicrophoneConfig, ModelConfig, NoiseConfig, ReverbConfig,
                                          RunConfig, SpecAugmentConfig, StreamingConfig, TelephoneConfig,
                                          ToyDataConfig, TrainConfig, VoicePerturbConfig, min_input_frames)
from paraformer_asr.config.validation import ctc_score_missing, validate

__all__ = ["CTC_COMBINATIONS", "CTC_NORMALIZATIONS", "CTC_QUERIES", "DECODE_METHODS", "MIN_INPUT_FRAMES",
           "MODEL_TYPES", "NOISE_KINDS", "PREDICTORS", "SUBSAMPLING_FACTORS", "AugmentConfig", "Config", "DataConfig",
           "DecodeConfig", "LoudnessConfig", "MicrophoneConfig", "ModelConfig", "NoiseConfig", "ReverbConfig",
           "RunConfig", "SpecAugmentConfig", "StreamingConfig", "TelephoneConfig", "ToyDataConfig", "TrainConfig",
           "VoicePerturbConfig", "config_from_dict", "ctc_score_missing", "load_config", "min_input_frames",
           "parse_override", "read_config_mapping", "save_config", "validate"]
