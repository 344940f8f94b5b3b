"""Transformer parts for the bottleneck, written out by hand.

Shapes: B batch, T query tokens, S key tokens, D model width, h heads, d = D / h per-head width.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..checks import assert_shape
from ..choices import ATTENTION_KINDS, check_choice


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention with separate Q, K, V projections.

    `impl="explicit"` computes softmax(Q K^T / sqrt(d)) V step by step; `impl="sdpa"` hands the same Q, K, V to
    `torch.nn.functional.scaled_dot_product_attention`. Both give the same result (tested). Every query attends to
    every key: the bottleneck's tokens are one whole feature map, so there is nothing to mask.
    """

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0, impl: str = "explicit"):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        check_choice(impl, ATTENTION_KINDS, "attention impl")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.dropout = dropout
        self.impl = impl
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)  # [B, h, L, d]

    def forward(
        self,
        query: torch.Tensor,
        key: Optional[torch.Tensor] = None,
        value: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        key = query if key is None else key
        value = key if value is None else value
        dims = assert_shape(query, "B,T,D", name="attention query")
        assert_shape(key, "B,S,D", name="attention key", dims=dims)
        assert_shape(value, "B,S,D", name="attention value", dims=dims)
        q = self._split_heads(self.q_proj(query))  # [B, h, T, d]
        k = self._split_heads(self.k_proj(key))  # [B, h, S, d]
        v = self._split_heads(self.v_proj(value))  # [B, h, S, d]
        dropout_p = self.dropout if self.training else 0.0
        if self.impl == "sdpa":
            context = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)  # [B, h, T, d]
        else:
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # [B, h, T, S]
            weights = F.dropout(torch.softmax(scores, dim=-1), p=dropout_p, training=self.training)  # [B, h, T, S]
            context = torch.matmul(weights, v)  # [B, h, T, d]
        batch, _, length, _ = context.shape
        context = context.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_dim)  # [B, T, D]
        return self.out_proj(context)  # [B, T, D]


class FeedForward(nn.Module):
    """Position-wise Linear(D, rD) -> GELU -> dropout -> Linear(rD, D); [B, T, D] -> [B, T, D]."""

    def __init__(self, dim: int, mlp_ratio: float, dropout: float):
        super().__init__()
        hidden = max(1, int(round(dim * mlp_ratio)))
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # [B, T, D] -> [B, T, rD] -> [B, T, D]


class TransformerBlock(nn.Module):
    """Pre-norm block: x + Attn(LN(x)), then x + FFN(LN(x)); [B, T, D] -> [B, T, D]."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, dropout: float, attention: str):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, num_heads, dropout, attention)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, mlp_ratio, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x)))  # [B, T, D]
        return x + self.drop(self.ffn(self.norm2(x)))  # [B, T, D]


def positional_encoding_2d(height: int, width: int, dim: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """Fixed sinusoidal 2D encoding, [height * width, dim] in row-major token order.

    The first dim/2 channels encode the row, the last dim/2 the column; each half is sin/cos pairs at dim/4
    frequencies 1 / 10000^(2i/(dim/2)). dim must be divisible by 4.
    """
    if dim % 4:
        raise ValueError(f"2D positional encoding needs dim divisible by 4, got {dim}")
    quarter = dim // 4
    freqs = torch.exp(-math.log(10000.0) * torch.arange(quarter, device=device, dtype=torch.float32) * 2 / (dim // 2))
    rows = torch.arange(height, device=device, dtype=torch.float32)[:, None] * freqs  # [h, dim/4]
    cols = torch.arange(width, device=device, dtype=torch.float32)[:, None] * freqs  # [w, dim/4]
    row_code = torch.cat([rows.sin(), rows.cos()], dim=1)  # [h, dim/2]
    col_code = torch.cat([cols.sin(), cols.cos()], dim=1)  # [w, dim/2]
    grid = torch.cat(
        [row_code[:, None, :].expand(height, width, -1), col_code[None, :, :].expand(height, width, -1)], dim=-1
    )  # [h, w, dim]
    return grid.reshape(height * width, dim).to(dtype)


class TransformerBottleneck(nn.Module):
    """[B, C, h, w] -> tokens [B, h*w, C] (+ 2D positional encoding) -> L blocks -> LayerNorm -> [B, C, h, w]."""

    def __init__(
        self,
        channels: int,
        num_layers: int,
        num_heads: int,
        mlp_ratio: float,
        dropout: float,
        attention: str = "explicit",
        activation_checkpointing: bool = False,
    ):
        super().__init__()
        self.blocks = nn.ModuleList(
            TransformerBlock(channels, num_heads, mlp_ratio, dropout, attention) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(channels)
        self.activation_checkpointing = activation_checkpointing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        tokens = x.flatten(2).transpose(1, 2)  # [B, h*w, C]
        tokens = tokens + positional_encoding_2d(height, width, channels, x.device, x.dtype)  # [B, h*w, C]
        for block in self.blocks:
            if self.activation_checkpointing and self.training and torch.is_grad_enabled():
                tokens = checkpoint(block, tokens, use_reentrant=False)  # [B, h*w, C]
            else:
                tokens = block(tokens)  # [B, h*w, C]
        tokens = self.norm(tokens)  # [B, h*w, C]
        return tokens.transpose(1, 2).reshape(batch, channels, height, width)  # [B, C, h, w]
