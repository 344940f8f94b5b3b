"""An exponential moving average (EMA) of a model's weights, the weights a run validates, saves and decodes with
when ``train.ema_decay`` > 0.

After each optimiser step every parameter of the average moves toward the trained one:

    average <- d * average + (1 - d) * trained,   d = min(ema_decay, (1 + n) / (10 + n))

where n counts the updates so far. The warm-up of d lets the average follow the fast early changes (d = 0.1 at the
first step, 0.91 after 90 steps, 0.99 after 990) before it settles at ``ema_decay``. The average smooths the noise
of the optimiser's steps but lags a model that still improves fast: on the many-voices corpus a Paraformer stopped
after epoch 37 of 60 decoded worse with it than without (docs/history.md, "A moving average of the weights").

The average is a full copy of the model (its buffers are its own: the CIF's calibrated ``alpha_scale`` is fitted
to the averaged weights when the run validates them). Checkpoints store the average as ``model``, what eval, infer
and serve read, and the trained weights as ``training_weights``, which resuming needs.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

# d's warm-up: (1 + n) / (WARMUP_OFFSET + n)
WARMUP_OFFSET = 10


class WeightAverage:
    """A frozen copy ``model`` of a model whose parameters follow the trained ones (``update`` after each step)."""

    def __init__(self, model: nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"train.ema_decay must be in (0, 1) for a weight average, got {decay}")
        self.decay = decay
        self.updates = 0
        self.model = copy.deepcopy(model).eval()
        self.model.requires_grad_(False)

    def current_decay(self) -> float:
        """d of the next update (the warm-up above)."""
        return min(self.decay, (1 + self.updates) / (WARMUP_OFFSET + self.updates))

    @torch.no_grad()
    def update(self, trained: nn.Module) -> None:
        """Move every averaged parameter toward the trained one by (1 - d)."""
        weight = 1.0 - self.current_decay()
        for averaged, current in zip(self.model.parameters(), trained.parameters()):
            averaged.lerp_(current.detach(), weight)
        self.updates += 1

    @torch.no_grad()
    def reset_to(self, trained: nn.Module) -> None:
        """Start the average again at ``trained``'s weights (a fine-tuning run's initial weights)."""
        self.model.load_state_dict(trained.state_dict())
        self.updates = 0
