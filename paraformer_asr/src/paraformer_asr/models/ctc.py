"""CTC head on the encoder output (optional auxiliary loss, usable by any model of the package)."""

from __future__ import annotations

import torch
import torch.nn as nn


class CtcHead(nn.Module):
    """encoder_out [B, T, D] -> log-probabilities [B, T, V] (blank included in V)."""

    def __init__(self, d_model: int, vocab_size: int):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, encoder_out: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.proj(encoder_out).float(), dim=-1)
