"""Speech encoder: convolutional subsampling (none / 2x / 4x) then transformer blocks.

Shared by the Paraformer and any other model of the package (e.g. an autoregressive baseline).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from paraformer_asr.checks import assert_shape, check_finite, check_padding_mask, lengths_to_mask
from paraformer_asr.config import MIN_INPUT_FRAMES, ModelConfig
from paraformer_asr.models.layers import EncoderBlock, PositionalEncoding


def subsampled_lengths(lengths: torch.Tensor, factor: int) -> torch.Tensor:
    """Frames left after ``factor`` (1, 2 or 4) subsampling: each stride-2 3-tap conv maps L -> (L - 1) // 2."""
    for _ in range(int(math.log2(factor))):
        lengths = torch.div(lengths - 1, 2, rounding_mode="floor")
    return lengths


def check_encodable(lengths: torch.Tensor, factor: int) -> torch.Tensor:
    """lengths [B] input frames -> their subsampled lengths [B]; ValueError when an utterance is shorter than
    ``config.MIN_INPUT_FRAMES[factor]`` (the PyTorch encoder and the exported one give the same error)."""
    out_lengths = subsampled_lengths(lengths, factor)
    if bool((out_lengths < 1).any()):
        raise ValueError(f"an utterance of {int(lengths.min())} frames is too short for {factor}x "
                         f"subsampling (needs >= {MIN_INPUT_FRAMES[factor]} frames)")
    return out_lengths


class ConvSubsampling(nn.Module):
    """features [B, T, F] -> [B, T', D] with T' = subsampled_lengths(T, factor).

    factor 1: a linear projection. factor 2 / 4: one / two Conv2d(kernel 3, stride 2, no padding)
    + ReLU over (time, frequency), then a linear projection. Without padding every valid output
    frame sees only valid input frames, so the valid outputs do not depend on batch padding.
    """

    def __init__(self, input_dim: int, d_model: int, factor: int, channels: int = 32):
        super().__init__()
        if factor not in (1, 2, 4):
            raise ValueError(f"subsampling factor must be 1, 2 or 4, got {factor}")
        self.factor = factor
        self.input_dim = input_dim
        convs: list[nn.Module] = []
        freq, in_ch = input_dim, 1
        for _ in range(int(math.log2(factor))):
            convs += [nn.Conv2d(in_ch, channels, kernel_size=3, stride=2), nn.ReLU()]
            freq, in_ch = (freq - 1) // 2, channels
        if factor > 1 and freq < 1:
            raise ValueError(f"feature dim {input_dim} is too small for {factor}x subsampling")
        self.convs = nn.Sequential(*convs)
        self.proj = nn.Linear(in_ch * freq if factor > 1 else input_dim, d_model)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if self.factor == 1:
            return self.proj(features)
        x = self.convs(features.unsqueeze(1))  # [B, C, T', F']
        batch, channels, frames, freq = x.shape
        return self.proj(x.permute(0, 2, 1, 3).reshape(batch, frames, channels * freq))


class Encoder(nn.Module):
    """forward(features [B, T, F] float, mask [B, T] bool True = valid) -> (out [B, T', D], out_mask [B, T'])

    Padded output frames are zero. Raises ValueError if an utterance is shorter than
    ``config.MIN_INPUT_FRAMES[factor]``.
    """

    def __init__(self, input_dim: int, d_model: int, num_heads: int, num_layers: int, ffn_dim: int,
                 dropout: float = 0.1, subsampling_factor: int = 4, subsampling_channels: int = 32,
                 activation_checkpointing: bool = False):
        super().__init__()
        self.input_dim = input_dim
        self.d_model = d_model
        self.subsampling_factor = subsampling_factor
        self.activation_checkpointing = activation_checkpointing
        self.subsampling = ConvSubsampling(input_dim, d_model, subsampling_factor, subsampling_channels)
        self.positions = PositionalEncoding(d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(EncoderBlock(d_model, num_heads, ffn_dim, dropout) for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model)

    @classmethod
    def from_config(cls, cfg: ModelConfig, input_dim: int, subsampling_factor: int) -> Encoder:
        """The encoder every model type builds from the ``model`` config section."""
        return cls(input_dim, cfg.d_model, cfg.num_heads, cfg.encoder_layers, cfg.ffn_dim, cfg.dropout,
                   subsampling_factor, cfg.subsampling_channels, cfg.activation_checkpointing)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        return subsampled_lengths(lengths, self.subsampling_factor)

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dims = assert_shape(features, f"B,T,{self.input_dim}", "encoder features")
        check_padding_mask(mask, "encoder mask", (dims["B"], dims["T"]))
        check_finite(features, "encoder features")
        out_lengths = check_encodable(mask.sum(dim=1), self.subsampling_factor)  # [B]
        x = self.subsampling(features.masked_fill(~mask.unsqueeze(-1), 0.0))  # [B, T', D]
        out_mask = lengths_to_mask(out_lengths, x.shape[1])
        x = self.dropout(self.positions(x * math.sqrt(self.d_model)))
        for block in self.blocks:
            if self.activation_checkpointing and self.training:
                x = checkpoint(block, x, out_mask, use_reentrant=False)
            else:
                x = block(x, out_mask)
        x = self.final_norm(x).masked_fill(~out_mask.unsqueeze(-1), 0.0)
        return x, out_mask
