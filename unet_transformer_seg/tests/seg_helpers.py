"""Helpers shared by the segmentation tests (a uniquely named module rather than conftest.py, so that this suite
and the other subproject's suite can run in one pytest session without their helper modules colliding)."""

import contextlib
import io
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
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


def start_script(name: str, *args: str, cwd: Path = PROJECT_DIR, env_extra=None) -> subprocess.Popen:
    """Start scripts/<name> in a subprocess (text stdout/stderr pipes) and return at once, so that it runs alongside
    this process's work; collect it with finish_script."""
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.Popen([sys.executable, str(SCRIPTS_DIR / name), *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_script(process: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    """Wait for a process of start_script (killed after timeout seconds); returns what run_script returns."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_script(name: str, *args: str, cwd: Path = PROJECT_DIR, timeout: float = 300, env_extra=None):
    """Run scripts/<name> in a subprocess; returns CompletedProcess with text stdout/stderr."""
    return finish_script(start_script(name, *args, cwd=cwd, env_extra=env_extra), timeout)


def run_script_in_process(name: str, *args: str, cwd: Path = PROJECT_DIR):
    """Run scripts/<name> as __main__ in this process (runpy: real argv, real exit status), stdout and stderr
    captured; returns what run_script returns. A fresh Python spends ~4 s importing torch before a script does
    anything, so repeated invocations of a script run here, while each script still runs at least once through
    run_script as the shell runs it. An exception other than SystemExit is a crash and propagates to the test."""
    stdout, stderr = io.StringIO(), io.StringIO()
    command = [str(SCRIPTS_DIR / name), *args]
    argv, workdir, threads = sys.argv, os.getcwd(), torch.get_num_threads()
    sys.argv = command
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            with pytest.raises(SystemExit) as exited:
                runpy.run_path(command[0], run_name="__main__")
    finally:
        sys.argv = argv
        os.chdir(workdir)
        torch.set_num_threads(threads)  # a script applies run.num_threads / --threads to its whole process
    return subprocess.CompletedProcess(command, exited.value.code, stdout.getvalue(), stderr.getvalue())


def tiny_cli_args(tmp_path: Path, *extra: str):
    args = []
    for item in TINY_OVERRIDES + [f"run.output_dir={tmp_path / 'runs'}", *extra]:
        args += ["--set", item]
    return args
