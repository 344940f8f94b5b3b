"""Non-autoregressive Paraformer decoder: all N tokens in one pass."""

from __future__ import annotations

import torch
import torch.nn as nn

from paraformer_asr.checks import assert_shape, check_padding_mask
from paraformer_asr.models.layers import DecoderBlock, KeyValue, PositionalEncoding


class NarDecoder(nn.Module):
    """forward(acoustic [B, N, D], token_mask [B, N], memory [B, T, D], memory_mask [B, T]) -> logits [B, N, V]

    Inputs are the CIF acoustic embeddings (or their glancing mix with target embeddings) plus sinusoidal
    positions (none with ``positions`` false: the order then comes only from the embeddings, which the CIF
    integrated from position-encoded encoder states); blocks use self-attention with a padding mask and no
    causal mask (or, with ``fsmn_kernel_size`` > 0, SAN-M's FSMN memory: a depthwise convolution over the tokens),
    cross-attention to the encoder output and a feed-forward layer. ``token_embedding`` [V, D]
    embeds target tokens for the glancing sampler. A stream projects its memory chunk by chunk
    (:meth:`project_memory`) and decodes with :meth:`forward_projected`.
    """

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, ffn_dim: int,
                 dropout: float = 0.1, fsmn_kernel_size: int = 0, positions: bool = True):
        super().__init__()
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.positions = PositionalEncoding(d_model) if positions else None
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(DecoderBlock(d_model, num_heads, ffn_dim, dropout, fsmn_kernel_size)
                                    for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model)
        self.output = nn.Linear(d_model, vocab_size)

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, N] long -> [B, N, D]"""
        return self.token_embedding(tokens)

    def forward(self, acoustic: torch.Tensor, token_mask: torch.Tensor, memory: torch.Tensor,
                memory_mask: torch.Tensor) -> torch.Tensor:
        dims = assert_shape(acoustic, f"B,N,{self.d_model}", "decoder input")
        assert_shape(memory, f"B,T,{self.d_model}", "decoder memory", dims)
        check_padding_mask(token_mask, "decoder token_mask", (dims["B"], dims["N"]), allow_empty_rows=True)
        check_padding_mask(memory_mask, "decoder memory_mask", (dims["B"], dims["T"]))
        return self.forward_projected(acoustic, token_mask, self.project_memory(memory), memory_mask)

    def project_memory(self, memory: torch.Tensor) -> list[KeyValue]:
        """memory [B, T, D] -> each block's cross-attention keys and values (k, v) [B, H, T, Dh]; those of consecutive
        stretches of the memory concatenate along dim 2."""
        return [block.cross_attn.project_key_value(memory, memory) for block in self.blocks]

    def forward_projected(self, acoustic: torch.Tensor, token_mask: torch.Tensor, memory_kv: list[KeyValue],
                          memory_mask: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` over a memory already projected by :meth:`project_memory`: acoustic [B, N, D], token_mask
        [B, N], memory_kv per block (k, v) [B, H, T, Dh], memory_mask [B, T] -> logits [B, N, V]."""
        x = self.dropout(acoustic if self.positions is None else self.positions(acoustic))
        for block, kv in zip(self.blocks, memory_kv):
            x = block.forward_projected(x, token_mask, kv, memory_mask)
        return self.output(self.final_norm(x))  # [B, N, V]
