"""Speech encoder: convolutional subsampling (none / 2x / 4x) then transformer blocks.

Shared by the Paraformer and any other model of the package (e.g. an autoregressive baseline). With
``model.streaming.enabled`` its self-attention is restricted to chunks (:func:`chunk_attention_mask`): in training
each batch draws its chunk size from ``model.streaming.chunk_sizes`` (dynamic chunk training), outside training
``decode_chunk_size`` applies, and models/streaming.py computes the same outputs chunk by chunk as the audio arrives.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from paraformer_asr.checks import assert_shape, check_finite, check_padding_mask, lengths_to_mask
from paraformer_asr.config import MIN_INPUT_FRAMES, ModelConfig, StreamingConfig
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


def chunk_attention_mask(frames: int, chunk_size: int, left_chunks: int | None = None, right_frames: int = 0,
                         device: torch.device | None = None) -> torch.Tensor:
    """Which encoder frames each frame attends to when the sequence is cut into chunks of ``chunk_size`` frames.

    -> [T', T'] bool, True = query t may attend key s (``frames`` = T'): s lies in t's own chunk c = t // chunk_size
    or in the ``left_chunks`` chunks before it (every chunk before with None), or at most ``right_frames`` frames
    past the end of t's chunk (look-ahead). Batch padding is the attention's ``key_padding_mask``, which the
    attention combines with this mask.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 (full context is no chunk mask), got {chunk_size}")
    if left_chunks is not None and left_chunks < 0:
        raise ValueError(f"left_chunks must be >= 0 or None (every chunk before), got {left_chunks}")
    if right_frames < 0:
        raise ValueError(f"right_frames must be >= 0, got {right_frames}")
    positions = torch.arange(frames, device=device)  # [T']
    chunk_start = (positions // chunk_size * chunk_size).unsqueeze(1)  # [T', 1] first frame of each query's chunk
    allowed = positions.unsqueeze(0) < chunk_start + chunk_size + right_frames  # [T', T']
    if left_chunks is not None:
        allowed = allowed & (positions.unsqueeze(0) >= chunk_start - left_chunks * chunk_size)
    return allowed


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
    """forward(features [B, T, F] float, mask [B, T] bool True = valid, chunk_size int | None)
    -> (out [B, T', D], out_mask [B, T'])

    Padded output frames are zero. Raises ValueError if an utterance is shorter than
    ``config.MIN_INPUT_FRAMES[factor]``. ``streaming`` (an enabled ``model.streaming`` block) restricts the
    self-attention to chunks (:meth:`attention_chunk`); without it every pass has full context unless ``forward`` is
    given a ``chunk_size``.
    """

    def __init__(self, input_dim: int, d_model: int, num_heads: int, num_layers: int, ffn_dim: int,
                 dropout: float = 0.1, subsampling_factor: int = 4, subsampling_channels: int = 32,
                 activation_checkpointing: bool = False, streaming: StreamingConfig | None = None):
        super().__init__()
        self.input_dim = input_dim
        self.d_model = d_model
        self.subsampling_factor = subsampling_factor
        self.activation_checkpointing = activation_checkpointing
        self.streaming = streaming if streaming is not None and streaming.enabled else None
        self.left_chunks = self.streaming.left_chunks if self.streaming else None  # chunks of look-back (None: all)
        self.right_frames = self.streaming.right_frames if self.streaming else 0  # first block's look-ahead frames
        self.subsampling = ConvSubsampling(input_dim, d_model, subsampling_factor, subsampling_channels)
        self.positions = PositionalEncoding(d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(EncoderBlock(d_model, num_heads, ffn_dim, dropout) for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model)

    @classmethod
    def from_config(cls, cfg: ModelConfig, input_dim: int, subsampling_factor: int) -> Encoder:
        """The encoder every model type builds from the ``model`` config section."""
        return cls(input_dim, cfg.d_model, cfg.num_heads, cfg.encoder_layers, cfg.ffn_dim, cfg.dropout,
                   subsampling_factor, cfg.subsampling_channels, cfg.activation_checkpointing, cfg.streaming)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        return subsampled_lengths(lengths, self.subsampling_factor)

    def attention_chunk(self, chunk_size: int | None = None) -> int:
        """The chunk size of a pass in encoder frames (0: full context): ``chunk_size`` when given; else, with
        streaming, one of ``model.streaming.chunk_sizes`` drawn from torch's generator in training (dynamic chunk
        training: one model for every latency) and ``decode_chunk_size`` outside it; else 0."""
        if chunk_size is not None:
            return chunk_size
        if self.streaming is None:
            return 0
        if self.training:
            sizes = self.streaming.chunk_sizes
            return sizes[int(torch.randint(len(sizes), ()))]
        return self.streaming.decode_chunk_size

    def block_masks(self, frames: int, chunk_size: int,
                    device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The attention masks [T', T'] of the first block (with the look-ahead) and of the later ones (without) for
        chunks of ``chunk_size`` frames; (None, None) for chunk_size 0, full context."""
        if chunk_size == 0:
            return None, None
        later = chunk_attention_mask(frames, chunk_size, self.left_chunks, 0, device)
        if self.right_frames == 0:
            return later, later
        return chunk_attention_mask(frames, chunk_size, self.left_chunks, self.right_frames, device), later

    def forward(self, features: torch.Tensor, mask: torch.Tensor,
                chunk_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        dims = assert_shape(features, f"B,T,{self.input_dim}", "encoder features")
        check_padding_mask(mask, "encoder mask", (dims["B"], dims["T"]))
        check_finite(features, "encoder features")
        out_lengths = check_encodable(mask.sum(dim=1), self.subsampling_factor)  # [B]
        x = self.subsampling(features.masked_fill(~mask.unsqueeze(-1), 0.0))  # [B, T', D]
        out_mask = lengths_to_mask(out_lengths, x.shape[1])
        x = self.dropout(self.positions(x * math.sqrt(self.d_model)))
        first_mask, later_mask = self.block_masks(x.shape[1], self.attention_chunk(chunk_size), x.device)  # [T', T']
        for index, block in enumerate(self.blocks):
            attn_mask = first_mask if index == 0 else later_mask
            if self.activation_checkpointing and self.training:
                x = checkpoint(block, x, out_mask, attn_mask, use_reentrant=False)
            else:
                x = block(x, out_mask, attn_mask)
        x = self.final_norm(x).masked_fill(~out_mask.unsqueeze(-1), 0.0)
        return x, out_mask
