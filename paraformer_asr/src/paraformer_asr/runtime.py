"""Where the work runs: the torch device and the CPU thread count (training, inference, serving)."""

from __future__ import annotations

import torch

from paraformer_asr.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """'auto' (CUDA when there is one, else CPU), 'cpu', 'cuda' or 'cuda:N' -> torch.device;
    ConfigError for 'cuda' on a machine without CUDA."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("config key 'run.device' is 'cuda' but no CUDA device is available")
    return torch.device(name)


def apply_num_threads(num_threads: int) -> None:
    """torch's intra-op CPU threads; 0 keeps torch's default."""
    if num_threads > 0:
        torch.set_num_threads(num_threads)
