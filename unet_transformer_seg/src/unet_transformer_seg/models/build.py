"""`build_model`: UNet or UNetTransformer from a config, with `output_channels(cfg)` logit channels."""

from __future__ import annotations

from ..config import Config
from ..choices import MODEL_TYPES, SIGMOID_LOSSES, check_choice
from .unet import UNet, UNetTransformer


def output_channels(cfg: Config) -> int:
    """1 logit channel for the sigmoid losses (bce, bce_dice), else one per class."""
    return 1 if cfg.train.loss in SIGMOID_LOSSES else cfg.data.num_classes


def build_model(cfg: Config) -> UNet:
    """UNet or UNetTransformer as `model.*` says, with `data.in_channels` inputs and `output_channels(cfg)` logits."""
    model_cfg, data = cfg.model, cfg.data
    common = dict(
        in_channels=data.in_channels,
        out_channels=output_channels(cfg),
        base_channels=model_cfg.base_channels,
        depth=model_cfg.depth,
        norm=model_cfg.norm,
        deep_supervision=model_cfg.deep_supervision,
    )
    check_choice(model_cfg.type, MODEL_TYPES, "model.type")
    if model_cfg.type == "unet":
        return UNet(**common)
    return UNetTransformer(
        **common,
        transformer_layers=model_cfg.transformer_layers,
        num_heads=model_cfg.num_heads,
        mlp_ratio=model_cfg.mlp_ratio,
        dropout=model_cfg.dropout,
        attention=model_cfg.attention,
        activation_checkpointing=model_cfg.activation_checkpointing,
    )

