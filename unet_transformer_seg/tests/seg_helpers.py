"""Helpers shared by the segmentation tests (a uniquely named module rather than conftest.py, so that this suite
and the other subproject's suite can run in one pytest session without their helper modules colliding)."""

import os
import subprocess
import sys
from pathlib import Path

import torch

from unet_transformer_seg.config import load_config

PROJECT_DIR = Path(__file__).resolve().parents[1]
SCRIPTS_DIR = PROJECT_DIR / "scripts"

# A model and data set small enough that a CLI training run takes seconds on 2 cores.
TINY_OVERRIDES = [
    "data.image_size=16",
    "data.train_size=64",
    "data.val_size=16",
    "data.test_size=8",
    "data.max_shapes=2",
    "model.base_channels=4",
    "model.depth=2",
    "model.transformer_layers=1",
    "model.num_heads=2",
    "train.batch_size=8",
    "train.eval_batch_size=8",
    "train.warmup_steps=2",
    "train.log_every=5",
    "train.num_plot_images=2",
]


# One torch thread: the in-process trainings are tiny, and on a CPU shared with other jobs two threads mostly wait
# for each other.
torch.set_num_threads(1)


def tiny_config(tmp_path: Path, *extra: str):
    return load_config(None, TINY_OVERRIDES + [f"run.output_dir={tmp_path / 'runs'}", *extra])


def run_script(name: str, *args: str, cwd: Path = PROJECT_DIR, timeout: float = 300, env_extra=None):
    """Run scripts/<name> in a subprocess; returns CompletedProcess with text stdout/stderr."""
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.run(
        [sys.executable, str(SCRIPTS_DIR / name), *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout,
    )


def tiny_cli_args(tmp_path: Path, *extra: str):
    args = []
    for item in TINY_OVERRIDES + [f"run.output_dir={tmp_path / 'runs'}", *extra]:
        args += ["--set", item]
    return args
