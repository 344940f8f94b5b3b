"""The one multi-head attention of the package (hand-written scaled dot-product attention).

Masks are bool with True = "may attend". ``key_padding_mask`` [B, S] marks valid keys;
``attn_mask`` [Tq, S] or [B, Tq, S] restricts query/key pairs further (e.g. a causal mask).
A query row whose keys are all masked gets a zero output instead of NaN.

Key/value caching (autoregressive decoding) uses the split API: ``project_key_value`` once per
new key chunk, concatenate along the time axis (dim 2) of the [B, H, S, Dh] tensors, and call
``attend(project_query(q), k, v, ...)``. ``forward`` is exactly ``attend(project_query(q),
*project_key_value(k, v))``.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from paraformer_asr.checks import assert_shape


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, L, D] -> [B, H, L, Dh]"""
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

    def project_query(self, query: torch.Tensor) -> torch.Tensor:
        """query [B, Tq, D] -> q [B, H, Tq, Dh]"""
        assert_shape(query, f"B,Tq,{self.d_model}", "attention query")
        return self._split_heads(self.q_proj(query))

    def project_key_value(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """key, value [B, S, D] -> k, v [B, H, S, Dh] (cache these for incremental decoding)."""
        dims = assert_shape(key, f"B,S,{self.d_model}", "attention key")
        assert_shape(value, f"B,S,{self.d_model}", "attention value", dims)
        return self._split_heads(self.k_proj(key)), self._split_heads(self.v_proj(value))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               key_padding_mask: torch.Tensor | None = None,
               attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """q [B, H, Tq, Dh], k/v [B, H, S, Dh], masks bool (True = attend) -> [B, Tq, D]"""
        batch, _, tq, _ = q.shape
        s = k.shape[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # [B, H, Tq, S]
        allowed = self._allowed(batch, tq, s, key_padding_mask, attn_mask, q.device)  # [B, 1, Tq, S] or None
        if allowed is not None:
            scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1)
        if allowed is not None:
            weights = weights.masked_fill(~allowed, 0.0)  # rows with no allowed key -> zero output
        weights = self.dropout(weights)
        context = torch.matmul(weights, v)  # [B, H, Tq, Dh]
        context = context.transpose(1, 2).reshape(batch, tq, self.d_model)
        return self.out_proj(context)

    @staticmethod
    def _allowed(batch: int, tq: int, s: int, key_padding_mask: torch.Tensor | None,
                 attn_mask: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
        allowed = None
        if key_padding_mask is not None:
            if key_padding_mask.dtype != torch.bool:
                raise ValueError(f"key_padding_mask must be bool (True = valid), got {key_padding_mask.dtype}")
            assert_shape(key_padding_mask, f"{batch},{s}", "key_padding_mask")
            allowed = key_padding_mask[:, None, None, :]  # [B, 1, 1, S]
        if attn_mask is not None:
            if attn_mask.dtype != torch.bool:
                raise ValueError(f"attn_mask must be bool (True = may attend), got {attn_mask.dtype}")
            if attn_mask.dim() == 2:
                assert_shape(attn_mask, f"{tq},{s}", "attn_mask")
                extra = attn_mask[None, None]
            else:
                assert_shape(attn_mask, f"{batch},{tq},{s}", "attn_mask")
                extra = attn_mask[:, None]
            allowed = extra if allowed is None else allowed & extra
        return allowed

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """query [B, Tq, D], key/value [B, S, D] -> [B, Tq, D]"""
        k, v = self.project_key_value(key, value)
        return self.attend(self.project_query(query), k, v, key_padding_mask, attn_mask)
