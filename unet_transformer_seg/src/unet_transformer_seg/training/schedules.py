"""Learning-rate schedules (`train.schedule`), as multipliers of the base lr per optimizer step for LambdaLR.

Both warm up linearly from 1/warmup to 1 over `warmup_steps`, then decay over the remaining steps to `total_steps`:
- `cosine`: 0.5 * (1 + cos(pi * t)), t the progress in [0, 1];
- `poly`: (1 - t) ** 0.9, nnU-Net's schedule (stays higher for longer, then drops).
"""

from __future__ import annotations

import math
from typing import Callable

SCHEDULES = ("cosine", "poly")
POLY_EXPONENT = 0.9


def lr_factor(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        if schedule == "poly":
            return (1.0 - progress) ** POLY_EXPONENT
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor
