"""Process-level setup shared by training, inference and benchmarks: device, CPU threads, seeds, progress bars."""

from __future__ import annotations

import os
import random
import sys
from typing import Optional

import numpy as np
import torch

from .errors import ConfigError


def resolve_device(name: str, setting: str = "config key 'run.device'") -> torch.device:
    """auto | cpu | cuda -> a torch device; cuda without a GPU is a ConfigError naming `setting`."""
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{setting} is cuda but no CUDA device is available")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def apply_num_threads(num_threads: Optional[int]) -> None:
    """`run.num_threads`: torch CPU threads (None leaves PyTorch's default)."""
    if num_threads is not None:
        torch.set_num_threads(num_threads)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def show_progress_bars() -> bool:
    """Progress bars on an interactive terminal only (not in logs, CI or pipes)."""
    return sys.stdout.isatty() and not os.environ.get("CI")
