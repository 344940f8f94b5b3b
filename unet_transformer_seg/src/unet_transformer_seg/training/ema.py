"""`train.ema`: an exponential moving average of the model's weights, used for validation and saved as the
checkpoint's `model` (so eval.py, predict.py and export see it); the trained weights go to `train_weights`.

After each optimizer step t (1-based): ema = d_t * ema + (1 - d_t) * weights with d_t = min(decay, (1 + t) / (10 + t)),
so early in training, when the weights move fast, the average follows them closely (as timm's ModelEmaV2 with
warm-up). Floating-point buffers (BatchNorm running statistics) are averaged the same way; integer buffers copied.
"""

from __future__ import annotations

import copy
from typing import Dict

import torch


def ema_decay_at(step: int, decay: float) -> float:
    """The averaging factor after optimizer step `step` (1-based)."""
    return min(decay, (1.0 + step) / (10.0 + step))


class ModelEMA:
    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = decay
        self.model = copy.deepcopy(model).eval()
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: torch.nn.Module, step: int) -> None:
        """Fold `model`'s current weights into the average after optimizer step `step`."""
        decay = ema_decay_at(step, self.decay)
        averaged = self.model.state_dict()
        for name, value in model.state_dict().items():
            if value.dtype.is_floating_point:
                averaged[name].mul_(decay).add_(value.detach(), alpha=1.0 - decay)
            else:
                averaged[name].copy_(value)

    def state_dict(self) -> Dict[str, torch.Tensor]:
        return self.model.state_dict()

    def load_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)
