"""Autoregressive transformer baseline: the Paraformer's encoder + a causal transformer decoder.

The decoder reads ``<bos> y_1 .. y_S`` and predicts ``y_1 .. y_S <eos>`` (teacher forcing in
training). Decoding runs one token at a time through :meth:`TransformerAR.decode_step`, which keeps
a key/value cache: each step projects only the newest token's query/key/value in self-attention
and reuses the cross-attention keys/values projected once from the encoder output, so a step costs
O(current length) instead of a recompute of the prefix.

The network and its losses only: its searches are decode/ar_search.py, whose ``ArRecognizer`` (this model with
those searches) offers the model interface of models/interface.py (loss terms 'ce' and, with model.ctc_weight > 0,
'ctc').
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from paraformer_asr.checks import assert_shape, check_finite, check_padding_mask, lengths_to_mask
from paraformer_asr.config import ModelConfig
from paraformer_asr.data.batching import Batch
from paraformer_asr.losses import hybrid_loss_weights, label_smoothed_cross_entropy
from paraformer_asr.models.ctc import optional_ctc_head
from paraformer_asr.models.encoder import Encoder
from paraformer_asr.models.interface import LossOutput
from paraformer_asr.models.layers import DecoderBlock, KeyValue, PositionalEncoding
from paraformer_asr.models.targets import append_eos

def causal_mask(length: int, device: torch.device) -> torch.Tensor:
    """[L, L] bool, True where query i may attend to key j (j <= i)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


@dataclass
class DecoderCache:
    """Key/value cache of the autoregressive decoder for a batch of B rows.

    memory_mask [B, T] bool; cross_kv: per layer the cross-attention (k, v) [B, H, T, Dh], projected
    once from the encoder output; self_kv: per layer the self-attention (k, v) [B, H, L, Dh] of the
    L tokens fed so far (L = ``length``).
    """

    memory_mask: torch.Tensor
    cross_kv: list[KeyValue]
    self_kv: list[KeyValue]

    @property
    def length(self) -> int:
        return self.self_kv[0][0].shape[2] if self.self_kv else 0

    def reorder_rows(self, rows: torch.Tensor) -> "DecoderCache":
        """Self-attention entries of row ``rows[i]`` move to row i (beam search). rows [B] long.

        The cross-attention entries are kept: ``rows`` must map every row to a row of the same
        utterance (same encoder output), as beam search does.
        """
        return DecoderCache(self.memory_mask, self.cross_kv,
                            [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.self_kv])


class ArDecoder(nn.Module):
    """Causal transformer decoder built from the package's DecoderBlock.

    forward(tokens [B, L] long, token_mask [B, L], memory [B, T, D], memory_mask [B, T]) -> logits [B, L, V]
    Token embeddings (initialised N(0, 1/D), then scaled by sqrt(D): the same magnitude as the
    positions) get sinusoidal positions; self-attention uses the padding mask and a causal mask, so
    logits at position i depend on tokens 0..i only.
    """

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, ffn_dim: int,
                 dropout: float = 0.1):
        super().__init__()
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.num_heads = num_heads
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.token_embedding.weight, std=d_model ** -0.5)
        self.positions = PositionalEncoding(d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(DecoderBlock(d_model, num_heads, ffn_dim, dropout) for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model)
        self.output = nn.Linear(d_model, vocab_size)

    def _embed(self, tokens: torch.Tensor, offset: int) -> torch.Tensor:
        """tokens [B, L] -> [B, L, D] (scaled embeddings + positions offset .. offset + L - 1)."""
        return self.dropout(self.positions(self.token_embedding(tokens) * math.sqrt(self.d_model), offset))

    def forward(self, tokens: torch.Tensor, token_mask: torch.Tensor, memory: torch.Tensor,
                memory_mask: torch.Tensor) -> torch.Tensor:
        dims = assert_shape(tokens, "B,L", "decoder tokens")
        assert_shape(memory, f"B,T,{self.d_model}", "decoder memory", dims)
        check_padding_mask(token_mask, "decoder token_mask", (dims["B"], dims["L"]))
        check_padding_mask(memory_mask, "decoder memory_mask", (dims["B"], dims["T"]))
        x = self._embed(tokens, 0)  # [B, L, D]
        causal = causal_mask(dims["L"], tokens.device)  # [L, L]
        for block in self.blocks:
            x = block(x, token_mask, memory, memory_mask, self_attn_mask=causal)
        return self.output(self.final_norm(x))  # [B, L, V]

    def start_cache(self, memory: torch.Tensor, memory_mask: torch.Tensor) -> DecoderCache:
        """memory [B, T, D], memory_mask [B, T] -> empty cache with the cross-attention keys/values."""
        dims = assert_shape(memory, f"B,T,{self.d_model}", "decoder memory")
        check_padding_mask(memory_mask, "decoder memory_mask", (dims["B"], dims["T"]))
        head_dim = self.d_model // self.num_heads
        empty = memory.new_zeros(dims["B"], self.num_heads, 0, head_dim)  # [B, H, 0, Dh]
        cross = [block.cross_attn.project_key_value(memory, memory) for block in self.blocks]
        return DecoderCache(memory_mask, cross, [(empty, empty) for _ in self.blocks])

    def step(self, token: torch.Tensor, cache: DecoderCache) -> tuple[torch.Tensor, DecoderCache]:
        """token [B, 1] long at position ``cache.length`` -> (logits [B, V], cache one token longer)."""
        assert_shape(token, f"{cache.memory_mask.shape[0]},1", "decoder step token")
        x = self._embed(token, cache.length)  # [B, 1, D]
        grown = []
        for block, self_kv, cross_kv in zip(self.blocks, cache.self_kv, cache.cross_kv):
            x, self_kv = block.step(x, self_kv, cross_kv, cache.memory_mask)  # [B, 1, D], L + 1 entries
            grown.append(self_kv)
        logits = self.output(self.final_norm(x))[:, 0]  # [B, V]
        return logits, DecoderCache(cache.memory_mask, cache.cross_kv, grown)


class TransformerAR(nn.Module):
    """Encoder (shared with the Paraformer) + autoregressive decoder (+ optional CTC head on the encoder)."""

    calibrates_cif = False  # no CIF: nothing to calibrate

    def __init__(self, cfg: ModelConfig, input_dim: int, vocab_size: int, pad_id: int, bos_id: int, eos_id: int,
                 blank_id: int | None, subsampling_factor: int):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.pad_id, self.bos_id, self.eos_id, self.blank_id = pad_id, bos_id, eos_id, blank_id
        self.never_emitted = [pad_id, bos_id] + ([blank_id] if blank_id is not None else [])
        self.encoder = Encoder.from_config(cfg, input_dim, subsampling_factor)
        self.decoder = ArDecoder(vocab_size, cfg.d_model, cfg.num_heads, cfg.decoder_layers, cfg.ffn_dim,
                                 cfg.dropout)
        self.ctc = optional_ctc_head(cfg.d_model, vocab_size, cfg.ctc_weight, blank_id)

    def ctc_log_probs(self, encoder_out: torch.Tensor) -> torch.Tensor | None:
        """encoder_out [B, T', D] -> the CTC head's log-probs [B, T', V], or None without a CTC head."""
        return self.ctc(encoder_out) if self.ctc is not None else None

    def encode(self, features: torch.Tensor, feat_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features [B, T, F], feat_mask [B, T] -> (encoder_out [B, T', D], enc_mask [B, T'])"""
        return self.encoder(features, feat_mask)

    def teacher_forcing_io(self, tokens: torch.Tensor,
                           token_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """tokens [B, S] (pad after each length), token_lengths [B] -> (decoder_in [B, S+1] = bos y_1..y_S,
        targets [B, S+1] = y_1..y_S eos, mask [B, S+1] True on the first length+1 positions)."""
        targets, target_lengths = append_eos(tokens, token_lengths, self.eos_id, self.pad_id)  # [B, S+1], [B]
        decoder_in = torch.cat([tokens.new_full((tokens.shape[0], 1), self.bos_id), tokens], dim=1)  # [B, S+1]
        return decoder_in, targets, lengths_to_mask(target_lengths, targets.shape[1])

    def forward(self, features: torch.Tensor, feat_mask: torch.Tensor, tokens: torch.Tensor,
                token_lengths: torch.Tensor) -> torch.Tensor:
        """Teacher-forced pass: -> logits [B, S+1, V] predicting y_1 .. y_S eos."""
        encoder_out, enc_mask = self.encode(features, feat_mask)  # [B, T', D], [B, T']
        decoder_in, _, mask = self.teacher_forcing_io(tokens, token_lengths)  # [B, S+1], [B, S+1]
        return self.decoder(decoder_in, mask, encoder_out, enc_mask)  # [B, S+1, V]

    def compute_loss(self, batch: Batch, decoder_scale: float = 1.0) -> LossOutput:
        """Label-smoothed CE over the valid targets (eos included), a mean per target token, combined with the
        CTC loss on the encoder by ``model.ctc_combination`` (see ``hybrid_loss_weights``); ``decoder_scale``
        multiplies the CE's weight (0 during ``train.ctc_warmup_steps``)."""
        encoder_out, enc_mask = self.encode(batch.features, batch.feat_mask)  # [B, T', D], [B, T']
        decoder_in, targets, mask = self.teacher_forcing_io(batch.tokens, batch.token_lengths)  # 3 x [B, S+1]
        logits = self.decoder(decoder_in, mask, encoder_out, enc_mask)  # [B, S+1, V]
        ce = label_smoothed_cross_entropy(logits, targets, mask, self.cfg.label_smoothing)  # scalar
        decoder_weight, ctc_weight = hybrid_loss_weights(self.cfg.ctc_weight if self.ctc is not None else 0.0,
                                                         self.cfg.ctc_combination)
        total, terms = decoder_scale * decoder_weight * ce, {"ce": ce.detach()}
        if self.ctc is not None:
            ctc = self.ctc.loss(encoder_out, enc_mask, batch.tokens, batch.token_lengths, self.blank_id,
                                self.cfg.ctc_normalization)  # scalar
            total = total + ctc_weight * ctc
            terms["ctc"] = ctc.detach()
        return LossOutput(total=total, terms=terms, logits=logits, cif=None)

    def decode_step(self, encoder_out: torch.Tensor, prev_tokens: torch.Tensor, step: int,
                    cache: DecoderCache | None = None,
                    enc_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, DecoderCache]:
        """One decoding step with a key/value cache.

        encoder_out [B, T', D]; prev_tokens [B, step + 1] long (bos first; only the newest token,
        ``prev_tokens[:, step]``, is fed); cache: None at step 0 (built from ``encoder_out`` and
        ``enc_mask`` [B, T'], all valid when None), else the cache returned by the previous step
        (it then holds ``step`` tokens and replaces ``encoder_out``/``enc_mask``).
        -> (log_probs [B, V] float32 of the token after the prefix, cache holding step + 1 tokens)
        """
        dims = assert_shape(prev_tokens, f"B,{step + 1}", "decode_step prev_tokens")
        if cache is None:
            assert_shape(encoder_out, f"B,T,{self.cfg.d_model}", "decode_step encoder_out", dims)
            if enc_mask is None:
                enc_mask = torch.ones(encoder_out.shape[:2], dtype=torch.bool, device=encoder_out.device)  # [B, T']
            cache = self.decoder.start_cache(encoder_out, enc_mask)
        if cache.length != step:
            raise ValueError(f"decode_step: the cache holds {cache.length} tokens but step is {step}")
        logits, cache = self.decoder.step(prev_tokens[:, step:], cache)  # [B, V]
        log_probs = torch.log_softmax(logits.float(), dim=-1)  # [B, V]
        check_finite(log_probs, "decoder step log_probs")
        return log_probs, cache
