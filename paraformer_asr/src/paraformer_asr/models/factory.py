"""Model factory: ``build_model(cfg, input_dim, tokenizer)`` dispatches on ``model.type``.

Each entry of ``MODEL_BUILDERS`` names a module and a function ``(cfg, input_dim, tokenizer) ->
nn.Module``; the module is imported only when that type is asked for. A model must offer the
interface described in models/paraformer.py (compute_loss, greedy_decode, beam_search).
"""

from __future__ import annotations

import importlib

import torch.nn as nn

from paraformer_asr.config import Config
from paraformer_asr.data.tokenizer import Tokenizer
from paraformer_asr.errors import ConfigError

MODEL_BUILDERS = {
    "paraformer": ("paraformer_asr.models.factory", "build_paraformer"),
    "transformer_ar": ("paraformer_asr.models.ar_model", "build_transformer_ar"),
}


def build_paraformer(cfg: Config, input_dim: int, tokenizer: Tokenizer) -> nn.Module:
    from paraformer_asr.models.paraformer import Paraformer

    return Paraformer(cfg.model, input_dim=input_dim, vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                      eos_id=tokenizer.eos_id, blank_id=tokenizer.blank_id,
                      subsampling_factor=cfg.subsampling_factor)


def build_model(cfg: Config, input_dim: int, tokenizer: Tokenizer) -> nn.Module:
    if cfg.model.type not in MODEL_BUILDERS:
        raise ConfigError(f"config key 'model.type' must be one of {sorted(MODEL_BUILDERS)}, got {cfg.model.type!r}")
    module_name, function_name = MODEL_BUILDERS[cfg.model.type]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise ConfigError(f"config key 'model.type': '{cfg.model.type}' is not available in this installation "
                          f"(module {module_name} is missing)") from exc
    return getattr(module, function_name)(cfg, input_dim, tokenizer)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
