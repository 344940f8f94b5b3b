"""Exact resume after a real SIGKILL in the middle of an epoch, and a clean stop on SIGTERM."""

import json
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

from asr_helpers import PROJECT, tiny_raw_config


def _config(tmp_path):
    raw = tiny_raw_config()
    raw["data"]["toy"].update({"num_train": 480})
    raw["train"].update({"epochs": 3, "checkpoint_every": 1, "log_every": 1, "plot_utterances": 0, "keep_best": 2})
    path = tmp_path / "resume.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _start(tmp_path, *args):
    return subprocess.Popen([sys.executable, str(PROJECT / "scripts" / "train.py"), *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"CI": "1", "PATH": "/usr/bin:/bin"})


def _wait_for_log(run_root, needle, process, limit_s=180):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        logs = list(run_root.glob("*/train.log"))
        if logs and needle in logs[0].read_text():
            return logs[0].parent
        assert process.poll() is None, process.communicate()[1][-2000:]
        time.sleep(0.02)
    raise AssertionError(f"'{needle}' never appeared in the training log")


def _final_state(run_dir):
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    state["kept_files"] = sorted(path.name for path in (run_dir / "checkpoints").glob("best_epoch*.pt"))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for row in metrics:
        row.pop("epoch_seconds")
        row.pop("run_id")
        row.pop("val_rtf")
    return state, metrics


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted_run(tmp_path):
    config = _config(tmp_path)
    # the uninterrupted reference trains beside the run that is killed (one thread each)
    reference = _start(tmp_path, "--config", config, "--set", "run.output_dir=ref")
    victim = _start(tmp_path, "--config", config, "--set", "run.output_dir=killed")
    run_dir = _wait_for_log(tmp_path / "killed", "epoch 2 step 35 ", victim)  # 30 batches per epoch
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    progress = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["progress"]
    assert progress["epoch"] == 1 and 0 < progress["batch_in_epoch"] < 30  # really in the middle of epoch 2

    out, err = reference.communicate(timeout=240)
    assert reference.returncode == 0, err[-2000:]
    ref_state, ref_metrics = _final_state(tmp_path / out.strip().splitlines()[-1])

    resumed = _start(tmp_path, "--resume", run_dir)
    out, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err[-2000:]
    assert out.strip().splitlines()[-1] == str(run_dir)
    state, metrics = _final_state(run_dir)
    assert metrics == ref_metrics
    assert state["best_checkpoints"] == ref_state["best_checkpoints"] and len(state["best_checkpoints"]) == 2
    assert state["kept_files"] == ref_state["kept_files"] == [f"best_epoch{entry['epoch']}.pt"
                                                               for entry in sorted(state["best_checkpoints"],
                                                                                   key=lambda e: e["epoch"])]
    assert state["progress"]["global_step"] == ref_state["progress"]["global_step"] == 90
    for name, tensor in ref_state["model"].items():
        assert torch.equal(tensor, state["model"][name]), name


@pytest.mark.slow
def test_sigterm_saves_last_checkpoint_and_says_how_to_resume(tmp_path):
    config = _config(tmp_path)
    process = _start(tmp_path, "--config", config)
    run_dir = _wait_for_log(tmp_path / "runs", "epoch 1 step 3 ", process)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM" in err and f"--resume runs/{run_dir.name}" in err and "Traceback" not in err
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert state["progress"]["global_step"] >= 3
