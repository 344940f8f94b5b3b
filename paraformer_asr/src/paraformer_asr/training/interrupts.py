"""Stopping a training on SIGINT/SIGTERM: the signal is recorded, the loop stops at a step boundary, saves
last.pt and raises TrainingInterrupted."""

from __future__ import annotations

import signal
from pathlib import Path


class TrainingInterrupted(Exception):
    """Raised after SIGINT/SIGTERM once last.pt is saved; carries the signal and the run folder."""

    def __init__(self, signum: int, run_dir: Path):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.run_dir = run_dir


class StopFlag:
    """Records SIGINT/SIGTERM so the loop can stop at a step boundary."""

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict = {}

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame) -> None:
        self.signum = signum
