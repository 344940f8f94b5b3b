"""The parts of an optimisation step: the loss through ``forward`` (for DistributedDataParallel), the scaled
optimizer step and the learning-rate schedule, compiled stacks, the seeds."""

from __future__ import annotations

import math
import random

import numpy as np
import torch


def compile_stacks(model: torch.nn.Module, backend: str) -> None:
    """torch.compile the encoder and decoder in place (state_dict keys unchanged). The CIF predictor
    stays eager: its token count is data-dependent."""
    for stack in (model.encoder, model.decoder):  # every model has both (models/interface.py)
        stack.compile(backend=backend, dynamic=True)


def scaled_optimizer_step(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer,
                          scheduler: torch.optim.lr_scheduler.LRScheduler) -> bool:
    """The gradient scaler's optimizer step, then the learning-rate schedule's only where the optimizer really stepped.
    With fp16 the scaler skips a step whose gradients hold inf or NaN and lowers its scale (its first steps often do);
    the schedule must not run ahead of the updates. -> whether the optimizer stepped (always, without a scaler)."""
    scale = scaler.get_scale()  # 1.0 when the scaler is disabled
    scaler.step(optimizer)
    scaler.update()
    stepped = scaler.get_scale() >= scale  # a skipped step lowers the scale
    if stepped:
        scheduler.step()
    return stepped


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def warmup_cosine(warmup_steps: int, total_steps: int, floor: float = 0.01):
    """LR multiplier: linear warmup to 1 over ``warmup_steps``, cosine decay to ``floor`` at ``total_steps``."""

    def multiplier(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return multiplier


class LossModule(torch.nn.Module):
    """Wraps a model so that its ``compute_loss`` runs through ``forward`` (what DistributedDataParallel
    needs to synchronise gradients). forward(batch, decoder_scale) -> (total loss, dict of detached loss terms)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch, decoder_scale: float = 1.0) -> tuple[torch.Tensor, dict]:
        out = self.model.compute_loss(batch, decoder_scale)
        return out.total, out.terms
