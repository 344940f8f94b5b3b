"""Ensembles: several trained models predicting as one, by the mean of their class probabilities.

`EnsembleModel` is an `nn.Module` whose forward maps images [B, C, H, W] to the logits of the members' mean softmax
(or sigmoid, for one-channel models) probabilities, `probabilities_to_logits(mean_m p_m)`, so the Segmenter, sliding
windows, resizing, flip TTA and the loss treat it like any model. With `--tta flip` the Segmenter averages the
ensemble's probabilities over the four mirror images: the mean over members and mirror images alike.

Members are checkpoints (or run folders) or ONNX export directories. They must agree on everything that decides
their input and output (`MEMBER_KEYS` and the loss's output kind); the first member's config stands for the ensemble
(data, class names, batch sizes). Members trained on different folds of a k-fold split (`data.fold`) are refused on
the validation split, where each member's validation images were another member's training images.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import torch

from .config import Config
from .deployment import load_model_for_inference
from .errors import ConfigError
from .inference import logits_to_probabilities, probabilities_to_logits
from .models import output_channels

# config keys that decide what a model takes (size, geometry, channels, intensities) and gives (classes, levels)
MEMBER_KEYS = ("data.image_size", "data.resize_mode", "data.in_channels", "data.num_classes", "data.normalize",
               "data.mean", "data.std", "data.clip_low", "data.clip_high", "model.depth")
OUTPUT_KIND = "train.loss output"  # sigmoid (one channel: bce, bce_dice) or softmax (one channel per class)
FOLD_KEYS = ("data.folds", "data.fold")


def _setting(cfg: Config, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def member_settings(cfg: Config) -> Dict[str, object]:
    """What must be equal across members: MEMBER_KEYS -> value, and the output kind (sigmoid | softmax)."""
    settings = {key: _setting(cfg, key) for key in MEMBER_KEYS}
    settings[OUTPUT_KIND] = "sigmoid" if output_channels(cfg) == 1 else "softmax"
    return settings


def check_members_agree(configs: Sequence[Config], sources: Sequence[str]) -> None:
    """ConfigError naming the key, both values and both sources where a member's settings differ from the first's."""
    first = member_settings(configs[0])
    for cfg, source in zip(configs[1:], sources[1:]):
        for key, value in member_settings(cfg).items():
            if value != first[key]:
                raise ConfigError(f"the ensemble's checkpoints disagree on {key}: {first[key]!r} in {sources[0]}, "
                                  f"{value!r} in {source}; its members must take the same input and give the same "
                                  f"output")


class EnsembleModel(torch.nn.Module):
    """forward(images [B, C, H, W]) -> logits [B, K, H, W] float32 of the members' mean probabilities. Members are
    modules on one device (PyTorch models or `deployment.OnnxModel`s); `configs` and `sources` describe them."""

    def __init__(self, members: Sequence[torch.nn.Module], configs: Sequence[Config], sources: Sequence[str]):
        super().__init__()
        check_members_agree(configs, sources)
        self.members = torch.nn.ModuleList(members)
        self.configs, self.sources = list(configs), [str(source) for source in sources]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        mean = sum(logits_to_probabilities(member(images).float()) for member in self.members) / len(self.members)
        return probabilities_to_logits(mean)  # [B, K, H, W]


def load_ensemble(checkpoints: Sequence[str | Path], backend: str = "torch", num_threads: Optional[int] = None,
                  device: str = "auto") -> Tuple[torch.nn.Module, Config]:
    """(model in eval mode, config) for eval.py / predict.py's --checkpoint: one checkpoint gives its model as
    `deployment.load_model_for_inference` does; several give an EnsembleModel and the first member's config."""
    loaded = [load_model_for_inference(path, backend, num_threads, device) for path in checkpoints]
    if len(loaded) == 1:
        return loaded[0]
    models, configs = zip(*loaded)
    return EnsembleModel(models, configs, [str(path) for path in checkpoints]).eval(), configs[0]


def check_evaluation_split(model: torch.nn.Module, split: str) -> None:
    """Refuse `--split val` for an ensemble whose members were trained on different folds (data.folds / data.fold):
    each one's validation images were another's training images. Any other model or split passes."""
    if split != "val" or not isinstance(model, EnsembleModel):
        return
    first = model.configs[0]
    for cfg, source in zip(model.configs[1:], model.sources[1:]):
        for key in FOLD_KEYS:
            if _setting(cfg, key) != _setting(first, key):
                raise ConfigError(
                    f"--split val: the ensemble's checkpoints were trained on different folds ({key} "
                    f"{_setting(first, key)!r} in {model.sources[0]}, {_setting(cfg, key)!r} in {source}), so each "
                    f"member's validation images were another member's training images; evaluate the ensemble with "
                    f"--split test")
