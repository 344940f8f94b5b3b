"""U-Net and the U-Net with a transformer bottleneck.

Input sizes: H and W must be multiples of 2**depth (each level halves them). Other sizes raise ShapeError (a user
error) with the nearest valid sizes; the scripts resize, pad or tile images into windows of data.image_size (a valid
size, checked in the config) before the model sees them, so users never have to pad.

The entry check is shape-only (no host sync); NaN/Inf checks of the input and of every layer's output are installed
as hooks when `run.debug_checks` is true (`checks.install_nonfinite_hooks`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..checks import assert_shape
from ..choices import NORM_KINDS, check_choice
from ..errors import ShapeError
from .transformer import TransformerBottleneck


def make_norm(kind: str, channels: int) -> nn.Module:
    """BatchNorm2d for `batch` and `syncbatch` (the trainer converts it to SyncBatchNorm under torchrun), else
    GroupNorm with gcd(8, channels) groups."""
    check_choice(kind, NORM_KINDS, "norm")
    if kind in ("batch", "syncbatch"):
        return nn.BatchNorm2d(channels)
    return nn.GroupNorm(math.gcd(8, channels), channels)


def check_model_input(x: torch.Tensor, in_channels: int, depth: int) -> dict:
    """Shape check of what a caller passes to a model (PyTorch or exported): x [B, in_channels, H, W] with H, W
    multiples of 2**depth; a mismatch is the caller's error (ShapeError), not a bug. Returns the bound dims."""
    dims = assert_shape(x, f"B,{in_channels},H,W", name="model input", error=ShapeError)
    factor = 2**depth
    if dims["H"] % factor or dims["W"] % factor:
        padded_h, padded_w = (math.ceil(size / factor) * factor for size in (dims["H"], dims["W"]))
        raise ShapeError(
            f"model input is {dims['H']}x{dims['W']} but height and width must be multiples of 2**depth = "
            f"{factor} (e.g. {padded_h}x{padded_w}); resize or pad the image"
        )
    return dims


class ConvBlock(nn.Module):
    """(conv3x3 -> norm -> ReLU) x 2; [B, C_in, H, W] -> [B, C_out, H, W]."""

    def __init__(self, in_channels: int, out_channels: int, norm: str):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
            make_norm(norm, out_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
            make_norm(norm, out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # [B, C_in, H, W] -> [B, C_out, H, W]


class UNet(nn.Module):
    """forward(x [B, C_in, H, W]) -> logits [B, K, H, W]; H, W multiples of 2**depth.

    Level i (0..depth-1) has base_channels * 2**i channels; the bottleneck has base_channels * 2**depth.
    `bottleneck_transform` maps the bottleneck features [B, C_b, H/2**depth, W/2**depth] to the same shape
    (identity here; a transformer in UNetTransformer).

    With `deep_supervision`, 1x1 heads on the depth-1 coarser decoder levels also give logits there, in training mode
    only: forward returns (logits [B, K, H, W], [aux logits [B, K, H/2, W/2], [B, K, H/4, W/4], ...]). In eval mode
    (validation, evaluation, prediction, export) forward returns the logits alone, as without it.
    """

    def __init__(self, in_channels: int, out_channels: int, base_channels: int = 16, depth: int = 3, norm="batch",
                 deep_supervision: bool = False):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.depth = depth
        widths = [base_channels * 2**level for level in range(depth + 1)]
        self.encoders = nn.ModuleList()
        previous = in_channels
        for width in widths[:-1]:
            self.encoders.append(ConvBlock(previous, width, norm))
            previous = width
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = ConvBlock(widths[-2], widths[-1], norm)
        self.bottleneck_transform: nn.Module = nn.Identity()
        self.upsamplers = nn.ModuleList(
            nn.ConvTranspose2d(widths[level + 1], widths[level], 2, stride=2) for level in reversed(range(depth))
        )
        self.decoders = nn.ModuleList(
            ConvBlock(2 * widths[level], widths[level], norm) for level in reversed(range(depth))
        )
        self.head = nn.Conv2d(widths[0], out_channels, 1)
        # finest first: level depth-2 (H/2) ... level 0's decoder is the main head's input
        self.aux_heads = nn.ModuleList(
            nn.Conv2d(widths[level], out_channels, 1) for level in range(1, depth)
        ) if deep_supervision else None
        self.bottleneck_channels = widths[-1]

    def check_input(self, x: torch.Tensor) -> dict:
        return check_model_input(x, self.in_channels, self.depth)

    def forward(self, x: torch.Tensor):
        dims = self.check_input(x)
        skips = []
        for encoder in self.encoders:
            x = encoder(x)  # [B, C_i, H/2**i, W/2**i]
            skips.append(x)
            x = self.pool(x)  # [B, C_i, H/2**(i+1), W/2**(i+1)]
        x = self.bottleneck_transform(self.bottleneck(x))  # [B, C_b, H/2**depth, W/2**depth]
        decoded = []
        for upsample, decoder, skip in zip(self.upsamplers, self.decoders, reversed(skips)):
            upsampled = upsample(x)  # [B, C_i, H/2**i, W/2**i] from [B, C_{i+1}, H/2**(i+1), W/2**(i+1)]
            x = decoder(torch.cat([upsampled, skip], dim=1))  # [B, 2*C_i, ...] -> [B, C_i, H/2**i, W/2**i]
            decoded.append(x)
        logits = self.head(x)  # [B, K, H, W]
        assert_shape(logits, f"B,{self.out_channels},H,W", name="model logits", dims=dims)
        if self.aux_heads is None or not self.training:
            return logits
        # decoded[-2] is level 1 (H/2), decoded[0] level depth-1; aux_heads[j] serves level j + 1
        aux = [head(decoded[-2 - j]) for j, head in enumerate(self.aux_heads)]  # [B, K, H/2**(j+1), W/2**(j+1)]
        return logits, aux


class UNetTransformer(UNet):
    """The same U-Net with L transformer blocks over the h*w bottleneck tokens; same contract as UNet."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        base_channels: int = 16,
        depth: int = 3,
        norm: str = "batch",
        transformer_layers: int = 2,
        num_heads: int = 4,
        mlp_ratio: float = 2.0,
        dropout: float = 0.0,
        attention: str = "explicit",
        activation_checkpointing: bool = False,
        deep_supervision: bool = False,
    ):
        super().__init__(in_channels, out_channels, base_channels, depth, norm, deep_supervision)
        self.bottleneck_transform = TransformerBottleneck(
            self.bottleneck_channels, transformer_layers, num_heads, mlp_ratio, dropout, attention,
            activation_checkpointing,
        )
