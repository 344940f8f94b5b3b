"""Model factory: ``build_model(cfg, input_dim, tokenizer)`` builds the model ``model.type`` names, the network
(models/) with its search (decode/): ``ParaformerRecognizer`` or ``ArRecognizer``.

Every model it builds offers the interface of models/interface.py.
"""

from __future__ import annotations

import torch.nn as nn

from paraformer_asr.config import Config
from paraformer_asr.data.tokenizer import Tokenizer
from paraformer_asr.decode.ar_search import ArRecognizer
from paraformer_asr.decode.paraformer_search import ParaformerRecognizer
from paraformer_asr.errors import ConfigError


def build_model(cfg: Config, input_dim: int, tokenizer: Tokenizer) -> nn.Module:
    special = {"vocab_size": tokenizer.vocab_size, "pad_id": tokenizer.pad_id, "eos_id": tokenizer.eos_id,
               "blank_id": tokenizer.blank_id, "subsampling_factor": cfg.subsampling_factor}
    if cfg.model.type == "paraformer":
        return ParaformerRecognizer(cfg.model, input_dim=input_dim, **special)
    if cfg.model.type == "transformer_ar":
        return ArRecognizer(cfg.model, input_dim=input_dim, bos_id=tokenizer.bos_id, **special)
    raise ConfigError(f"config key 'model.type' must be 'paraformer' or 'transformer_ar', got {cfg.model.type!r}")


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
