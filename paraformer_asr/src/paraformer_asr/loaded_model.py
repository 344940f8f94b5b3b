"""What every backend loads (a checkpoint into PyTorch: inference.py; an export folder into onnxruntime:
deploy/runtime.py), and what decoding, evaluation and the service take: the model with its config, tokenizer and
feature normaliser, and how a waveform becomes its features (:func:`features_from_waveform`). Here, below both
backends and long-form decoding, so that none of them imports another for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from paraformer_asr.config import Config
from paraformer_asr.data.setup import make_frontend
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


def features_from_waveform(waveform: torch.Tensor, loaded: LoadedModel) -> torch.Tensor:
    """Mono samples [N] at the checkpoint's ``data.sample_rate`` -> features [T, F] through the checkpoint's
    front end and normaliser (what training computed)."""
    features = make_frontend(loaded.cfg)(waveform)
    return loaded.normalizer(features) if loaded.normalizer is not None else features
