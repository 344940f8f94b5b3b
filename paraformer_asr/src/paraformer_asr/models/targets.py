"""Decoder targets built from a batch's tokens (shared by both model types)."""

from __future__ import annotations

import torch

from paraformer_asr.checks import assert_shape


def append_eos(tokens: torch.Tensor, lengths: torch.Tensor, eos_id: int,
               pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens [B, S] long (pad after each length), lengths [B] -> (tokens [B, S+1] with ``eos_id`` at position
    ``lengths[b]`` of row b and ``pad_id`` after it, lengths + 1)."""
    dims = assert_shape(tokens, "B,S", "target tokens")
    assert_shape(lengths, "B", "token_lengths", dims)
    pad = tokens.new_full((dims["B"], 1), pad_id)
    with_eos = torch.cat([tokens, pad], dim=1).scatter(1, lengths.long().unsqueeze(1), eos_id)  # [B, S+1]
    return with_eos, lengths + 1
