"""What every backend loads (a checkpoint into PyTorch: inference.py; an export folder into onnxruntime:
deploy/runtime.py), and what decoding, evaluation and the service take: the model with its config, tokenizer and
feature normaliser. Here, below both backends, so that neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.nn as nn

from paraformer_asr.config import Config
from paraformer_asr.data.tokenizer import Tokenizer


@dataclass
class LoadedModel:
    model: nn.Module
    cfg: Config
    tokenizer: Tokenizer
    normalizer: Any
    input_dim: int
    path: Path
    calibrated_on: str | None = None  # the data set the CIF's alpha_scale was fitted on (training/calibration.py)
