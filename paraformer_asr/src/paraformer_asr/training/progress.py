"""Where a run stands: epoch, batch and step, and the running sums of the current epoch (saved in checkpoints, so
a resumed run continues exactly where it stopped)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EpochSums:
    """Running sums of the current epoch (saved in checkpoints so a resumed epoch reports the same means)."""

    loss: float = 0.0
    terms: dict = field(default_factory=dict)
    batches: int = 0
    skipped: int = 0


@dataclass
class Progress:
    epoch: int = 0
    batch_in_epoch: int = 0
    global_step: int = 0
    sums: EpochSums = field(default_factory=EpochSums)
