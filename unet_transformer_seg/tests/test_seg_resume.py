"""Exact resume: a run killed mid-epoch (SIGKILL, or stopped by SIGTERM) and resumed ends bit-identical to a run
that was never interrupted.

The killed and stopped runs, the uninterrupted one and the resume after SIGKILL are separate processes; the resumes
after SIGTERM run in this process (seg_helpers.run_script_in_process), saving a fresh interpreter's torch import each.
They start from the run folder alone, with this process's random number generators in whatever state earlier tests
left them, so only a checkpoint that restores every state gives the same weights."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from unet_transformer_seg.checkpointing import load_checkpoint

from seg_helpers import PROJECT_DIR, SCRIPTS_DIR, run_script, run_script_in_process, tiny_cli_args

RESUME_OVERRIDES = ("data.image_size=32", "model.base_channels=8", "model.dropout=0.1", "train.epochs=3",
                    "train.checkpoint_every=3", "train.log_every=1")


def _start(tmp_path: Path, name: str):
    args = tiny_cli_args(tmp_path / name, *RESUME_OVERRIDES)
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, str(SCRIPTS_DIR / "train.py"), "--config", "configs/quick.yaml", *args], cwd=PROJECT_DIR,
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _wait_for_log(runs_dir: Path, text: str, process, timeout=120.0) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        logs = list(runs_dir.glob("*/train.log"))
        if logs and text in logs[0].read_text():
            return logs[0].parent
        assert process.poll() is None, process.communicate()
        time.sleep(0.005)
    raise AssertionError(f"'{text}' never appeared in the log")


def _final(run_dir: Path):
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    history = json.loads((run_dir / "metrics.json").read_text())
    for row in history:
        row.pop("epoch_seconds")
        row.pop("run_id")
    return state["model"], history, state["global_step"]


class ReferenceRun:
    """The uninterrupted run, started in the background so it overlaps with the interrupted ones."""

    def __init__(self, tmp_path: Path):
        self.process = _start(tmp_path, "reference")
        self.final = None

    def result(self):
        if self.final is None:
            stdout, stderr = self.process.communicate(timeout=300)
            assert self.process.returncode == 0, stderr
            self.final = _final(Path(stdout.strip().splitlines()[-1]))
        return self.final


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    reference = ReferenceRun(tmp_path_factory.mktemp("reference"))
    yield reference
    if reference.process.poll() is None:
        reference.process.kill()
        reference.process.communicate()


def _assert_same(resumed_dir: Path, reference: ReferenceRun):
    weights, history, steps = _final(resumed_dir)
    ref_weights, ref_history, ref_steps = reference.result()
    assert steps == ref_steps == 24
    assert history == ref_history
    for name in ref_weights:
        assert torch.equal(weights[name], ref_weights[name]), name


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_is_bit_identical(tmp_path, uninterrupted):
    process = _start(tmp_path, "killed")
    run_dir = _wait_for_log(tmp_path / "killed" / "runs", "saved checkpoints/last.pt at step 3", process)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state["step_in_epoch"] > 0 and state["global_step"] < 24  # really stopped inside an epoch
    result = run_script("train.py", "--resume", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip().splitlines()[-1]) == run_dir
    assert "resumed from" in (run_dir / "train.log").read_text()
    _assert_same(run_dir, uninterrupted)


@pytest.mark.slow
def test_sigterm_saves_and_says_how_to_resume(tmp_path, uninterrupted):
    process = _start(tmp_path, "stopped")
    run_dir = _wait_for_log(tmp_path / "stopped" / "runs", "step 2/24", process)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    assert f"resume with: python scripts/train.py --resume {run_dir}" in stdout
    assert stdout.strip().splitlines()[-1] == str(run_dir)
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert 0 < state["global_step"] < 24
    mismatched = run_script_in_process("train.py", "--resume", str(run_dir), "--set", "model.base_channels=16")
    assert mismatched.returncode == 2 and "do not fit the config" in mismatched.stderr
    assert "Traceback" not in mismatched.stderr
    result = run_script_in_process("train.py", "--resume", str(run_dir / "checkpoints" / "last.pt"))
    assert result.returncode == 0, result.stderr
    _assert_same(run_dir, uninterrupted)
