"""Transformer building blocks shared by every model of the package (pre-norm residual blocks)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from paraformer_asr.models.attention import MultiHeadAttention

KeyValue = tuple[torch.Tensor, torch.Tensor]  # k, v [B, H, L, Dh]


class PositionalEncoding(nn.Module):
    """Adds sinusoidal positions: x [B, T, D] -> [B, T, D]; ``offset`` shifts the first position."""

    def __init__(self, d_model: int, max_len: int = 4096):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("table", self._table(max_len), persistent=False)

    def _table(self, length: int) -> torch.Tensor:
        position = torch.arange(length, dtype=torch.float32).unsqueeze(1)  # [L, 1]
        freq = torch.exp(torch.arange(0, self.d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / self.d_model))
        table = torch.zeros(length, self.d_model)
        table[:, 0::2] = torch.sin(position * freq)
        table[:, 1::2] = torch.cos(position * freq)
        return table  # [L, D]

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        needed = offset + x.shape[1]
        if needed > self.table.shape[0]:
            self.table = self._table(max(needed, 2 * self.table.shape[0])).to(self.table.device)
        return x + self.table[offset:needed].to(x.dtype).unsqueeze(0)


class FeedForward(nn.Module):
    """Linear -> ReLU -> dropout -> Linear: [B, T, D] -> [B, T, D]."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float = 0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, ffn_dim), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(ffn_dim, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class FsmnMemory(nn.Module):
    """SAN-M's memory block (the FSMN of FunASR's Paraformer decoder): a depthwise convolution of ``kernel_size``
    taps over the token axis, added to its input. Each token mixes with its (k - 1) / 2 neighbours on either side,
    channel by channel, for no projection at all where self-attention costs four D x D linears.

    forward(x [B, N, D], mask [B, N] bool True = valid) -> [B, N, D], zero at padded tokens. Padded tokens are zeroed
    before the convolution, so they read as its zero padding and change no valid output.
    """

    def __init__(self, d_model: int, kernel_size: int):
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"FSMN kernel_size must be odd and >= 1, got {kernel_size}")
        self.conv = nn.Conv1d(d_model, d_model, kernel_size, padding=kernel_size // 2, groups=d_model, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        valid = mask.unsqueeze(-1).to(x.dtype)  # [B, N, 1]
        x = x * valid  # [B, N, D]
        memory = self.conv(x.transpose(1, 2)).transpose(1, 2)  # [B, D, N] -> [B, N, D]
        return (x + memory) * valid


class EncoderBlock(nn.Module):
    """Self-attention (padding mask; a chunk mask in a streaming encoder) + feed-forward, pre-norm residuals.

    forward(x [B, T, D], mask [B, T] bool True = valid, attn_mask [T, T] bool | None) -> [B, T, D]
    forward_chunk(x [B, C, D], cached (k, v), ahead [B, R, D] | None) -> ([B, C, D], (k, v) of the chunk): the same
    computation for one chunk of a stream (models/streaming.py)
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float = 0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, ffn_dim, dropout)
        self.norm_attn = nn.LayerNorm(d_model)
        self.norm_ffn = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.norm_attn(x)
        x = x + self.dropout(self.self_attn(h, h, h, key_padding_mask=mask, attn_mask=attn_mask))
        return x + self.dropout(self.ffn(self.norm_ffn(x)))

    def forward_chunk(self, x: torch.Tensor, cached: KeyValue,
                      ahead: torch.Tensor | None = None) -> tuple[torch.Tensor, KeyValue]:
        """One chunk of a stream, every frame valid: what :meth:`forward` computes for these frames under a chunk mask.

        x [B, C, D] the chunk's frames; cached (k, v) [B, H, L, Dh] the keys and values of the L earlier frames its
        queries see; ``ahead`` [B, R, D] the look-ahead frames after it that they also see (their keys and values are
        projected here and not kept) -> (out [B, C, D], (k, v) [B, H, C, Dh] of the chunk, to cache for later chunks).
        """
        h = self.norm_attn(x)  # [B, C, D]
        k_new, v_new = self.self_attn.project_key_value(h, h)  # [B, H, C, Dh] each
        keys, values = [cached[0], k_new], [cached[1], v_new]
        if ahead is not None:
            h_ahead = self.norm_attn(ahead)  # [B, R, D]
            k_ahead, v_ahead = self.self_attn.project_key_value(h_ahead, h_ahead)  # [B, H, R, Dh] each
            keys.append(k_ahead)
            values.append(v_ahead)
        attended = self.self_attn.attend(self.self_attn.project_query(h), torch.cat(keys, dim=2),
                                         torch.cat(values, dim=2))  # [B, C, D]
        x = x + self.dropout(attended)
        return x + self.dropout(self.ffn(self.norm_ffn(x))), (k_new, v_new)


class DecoderBlock(nn.Module):
    """Self-attention (or an FSMN memory) + cross-attention to the encoder output + feed-forward, pre-norm residuals.

    forward(x [B, N, D], x_mask [B, N], memory [B, T, D], memory_mask [B, T],
            self_attn_mask [N, N] or [B, N, N] | None) -> [B, N, D]
    The non-autoregressive decoder passes no ``self_attn_mask``; an autoregressive decoder
    passes a causal one in training and decodes with :meth:`step` and a key/value cache.
    ``fsmn_kernel_size`` > 0 replaces the self-attention with :class:`FsmnMemory` (non-autoregressive use only:
    no ``self_attn_mask``, no :meth:`step`).
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float = 0.0, fsmn_kernel_size: int = 0):
        super().__init__()
        use_fsmn = fsmn_kernel_size > 0
        self.fsmn = FsmnMemory(d_model, fsmn_kernel_size) if use_fsmn else None
        self.self_attn = None if use_fsmn else MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, ffn_dim, dropout)
        self.norm_self = nn.LayerNorm(d_model)
        self.norm_cross = nn.LayerNorm(d_model)
        self.norm_ffn = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor,
                self_attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.forward_projected(x, x_mask, self.cross_attn.project_key_value(memory, memory), memory_mask,
                                      self_attn_mask)

    def forward_projected(self, x: torch.Tensor, x_mask: torch.Tensor, memory_kv: KeyValue, memory_mask: torch.Tensor,
                          self_attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`forward` with the memory's cross-attention keys and values already projected: memory_kv (k, v)
        [B, H, T, Dh] (``cross_attn.project_key_value(memory, memory)``; a stream appends each chunk's)."""
        h = self.norm_self(x)
        if self.fsmn is not None:
            if self_attn_mask is not None:
                raise ValueError("an FSMN decoder block has no self-attention mask (non-autoregressive use only)")
            x = x + self.dropout(self.fsmn(h, x_mask))
        else:
            x = x + self.dropout(self.self_attn(h, h, h, key_padding_mask=x_mask, attn_mask=self_attn_mask))
        h = self.norm_cross(x)
        x = x + self.dropout(self.cross_attn.attend(self.cross_attn.project_query(h), *memory_kv,
                                                    key_padding_mask=memory_mask))
        return x + self.dropout(self.ffn(self.norm_ffn(x)))

    def step(self, x: torch.Tensor, self_kv: KeyValue, cross_kv: KeyValue,
             memory_mask: torch.Tensor) -> tuple[torch.Tensor, KeyValue]:
        """One new position with cached keys/values: the computation of :meth:`forward` with a causal
        mask, for the last position only.

        x [B, 1, D]; self_kv (k, v) [B, H, L, Dh] of the L earlier positions; cross_kv (k, v) [B, H, T, Dh]
        projected once from the memory; memory_mask [B, T] -> (x [B, 1, D], self_kv [B, H, L + 1, Dh]).
        """
        h = self.norm_self(x)  # [B, 1, D]
        k_new, v_new = self.self_attn.project_key_value(h, h)  # [B, H, 1, Dh] each
        k = torch.cat([self_kv[0], k_new], dim=2)  # [B, H, L + 1, Dh]
        v = torch.cat([self_kv[1], v_new], dim=2)  # [B, H, L + 1, Dh]
        x = x + self.dropout(self.self_attn.attend(self.self_attn.project_query(h), k, v))
        h = self.norm_cross(x)
        x = x + self.dropout(self.cross_attn.attend(self.cross_attn.project_query(h), *cross_kv,
                                                    key_padding_mask=memory_mask))
        return x + self.dropout(self.ffn(self.norm_ffn(x))), (k, v)
