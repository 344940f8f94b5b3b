"""CTC head on the encoder output (optional auxiliary loss, usable by any model of the package)."""

from __future__ import annotations

import torch
import torch.nn as nn

from paraformer_asr.losses import ctc_loss


class CtcHead(nn.Module):
    """encoder_out [B, T, D] -> log-probabilities [B, T, V] (blank included in V)."""

    def __init__(self, d_model: int, vocab_size: int):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, encoder_out: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.proj(encoder_out).float(), dim=-1)

    def loss(self, encoder_out: torch.Tensor, enc_mask: torch.Tensor, tokens: torch.Tensor,
             token_lengths: torch.Tensor, blank_id: int) -> torch.Tensor:
        """encoder_out [B, T, D], enc_mask [B, T] bool, tokens [B, S], token_lengths [B] -> scalar CTC loss."""
        return ctc_loss(self(encoder_out), enc_mask.sum(1), tokens, token_lengths, blank_id)


def optional_ctc_head(d_model: int, vocab_size: int, ctc_weight: float, blank_id: int | None) -> CtcHead | None:
    """The auxiliary CTC head when ``ctc_weight > 0`` (the tokenizer must then have a blank), else None."""
    if ctc_weight <= 0:
        return None
    if blank_id is None:
        raise ValueError("ctc_weight > 0 needs a tokenizer with a blank token")
    return CtcHead(d_model, vocab_size)
