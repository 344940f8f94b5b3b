"""Loading a trained model from a checkpoint and segmenting single images at their original size."""

from __future__ import annotations

from pathlib import Path
from typing import Tuple

import numpy as np
import torch

from .config import Config, config_from_dict
from .data.transforms import normalize, resize_image, resize_logits
from .errors import CheckpointError, ConfigError
from .losses import logits_to_labels
from .models import build_model
from .training.checkpointing import load_checkpoint, resolve_checkpoint_path
from .training.plots import class_colours


def load_trained_model(checkpoint: str | Path, device: str = "cpu") -> Tuple[torch.nn.Module, Config]:
    """Model in eval mode on `device` and its config, from a checkpoint file or a run folder (its last.pt)."""
    path = resolve_checkpoint_path(checkpoint)
    state = load_checkpoint(path)
    try:
        cfg = config_from_dict(state["config"])
    except ConfigError as exc:
        raise CheckpointError(f"checkpoint {path} holds an invalid config: {exc}") from None
    model = build_model(cfg)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        raise CheckpointError(f"checkpoint {path} weights do not fit its config: {exc}") from None
    return model.to(device).eval(), cfg


@torch.no_grad()
def segment_image(model: torch.nn.Module, cfg: Config, image: torch.Tensor) -> torch.Tensor:
    """image [C, H, W] float in [0, 1] at any size -> labels [H, W] int64 at the same size.

    The image is resized to data.image_size, normalised, segmented, and the logits are resized back.
    """
    device = next(model.parameters()).device
    size = (cfg.data.image_size, cfg.data.image_size)
    model_input = normalize(resize_image(image, size), cfg.data.mean, cfg.data.std)[None].to(device)
    logits = resize_logits(model(model_input), tuple(image.shape[-2:]))  # [1, K, H, W]
    return logits_to_labels(logits)[0].cpu()


def overlay(image: torch.Tensor, labels: torch.Tensor, num_classes: int, alpha: float = 0.5) -> np.ndarray:
    """image [C, H, W] in [0, 1], labels [H, W] -> [H, W, 3] uint8: class colours blended over the image."""
    rgb = image.expand(3, -1, -1) if image.shape[0] == 1 else image[:3]
    base = rgb.permute(1, 2, 0).clamp(0, 1).numpy()
    colours = class_colours(num_classes)[labels.numpy()].astype(np.float32) / 255.0
    foreground = (labels.numpy() > 0)[..., None]
    blended = np.where(foreground, (1 - alpha) * base + alpha * colours, base)
    return (blended * 255).round().astype(np.uint8)
