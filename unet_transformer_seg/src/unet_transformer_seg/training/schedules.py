"""Learning-rate schedules (`train.schedule`), as multipliers of the base lr per optimizer step for LambdaLR.

Both warm up linearly from 1/warmup to 1 over `warmup_steps`, then decay over the remaining steps to `total_steps`:
- `cosine`: 0.5 * (1 + cos(pi * t)), t the progress in [0, 1];
- `poly`: (1 - t) ** 0.9, nnU-Net's schedule (stays higher for longer, then drops).

The schedule advances with the optimizer's real steps: under fp16 the gradient scaler skips a step whose gradients
overflowed (`scaled_optimizer_step`).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..choices import SCHEDULES, check_choice

POLY_EXPONENT = 0.9


def lr_factor(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    check_choice(schedule, SCHEDULES, "schedule")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        if schedule == "poly":
            return (1.0 - progress) ** POLY_EXPONENT
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def scaled_optimizer_step(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer,
                          scheduler: torch.optim.lr_scheduler.LRScheduler) -> bool:
    """The gradient scaler's optimizer step, then the schedule's only where the optimizer really stepped: with fp16
    the scaler skips a step whose gradients hold inf or NaN and lowers its scale (its first steps often do).
    -> whether the optimizer stepped (always, with the scaler disabled)."""
    scale = scaler.get_scale()  # 1.0 when the scaler is disabled
    scaler.step(optimizer)
    scaler.update()
    stepped = scaler.get_scale() >= scale  # a skipped step lowers the scale
    if stepped:
        scheduler.step()
    return stepped
