"""Several processes: two processes with torchrun (gloo on CPU) train like one process with the same global batch;
with BatchNorm the validation logged equals eval.py on best.pt; per-rank RNG states; resuming with another number of
processes is refused; on a GPU machine the collectives run through a "cpu:gloo,cuda:nccl" group (skipped without
CUDA)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from unet_transformer_seg.checkpointing import load_checkpoint
from unet_transformer_seg.errors import CheckpointError
from unet_transformer_seg.training.loop import train

from seg_helpers import PROJECT_DIR, SCRIPTS_DIR, run_script_in_process, tiny_cli_args, tiny_config

# run.device=cpu: these runs mean gloo on CPU processes, also on a machine with fewer GPUs than processes
SHARED = ("run.device=cpu", "model.norm=group", "train.loss=ce", "train.epochs=2", "train.max_steps=6",
          "train.grad_clip=null")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _weights(run_dir: Path):
    return load_checkpoint(run_dir / "checkpoints" / "last.pt")["model"], (run_dir / "train.log").read_text()


TEARDOWN_ABORT = "terminate called without an active exception"


def _torchrun(tmp_path: Path, processes: int, *overrides: str):
    """train.py under torchrun. A run in which every rank finished training (the log's last line written) but one
    aborted in gloo's C++ teardown at exit, a rare race of its threads (docs/debugging.md), is run again once in a
    fresh folder; any other failure, or that abort twice, is returned as it is."""
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1"}
    for attempt in range(2):
        result = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
             str(SCRIPTS_DIR / "train.py"), "--config", "configs/quick.yaml", *tiny_cli_args(tmp_path, *overrides)],
            cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300,
        )
        logs = list((tmp_path / "runs").glob("*/train.log"))
        finished = len(logs) == 1 and "finished" in logs[0].read_text().splitlines()[-1]
        if result.returncode == 0 or attempt == 1 or TEARDOWN_ABORT not in result.stderr or not finished:
            return result
        shutil.rmtree(tmp_path / "runs")
    return result


@pytest.mark.slow
def test_two_process_ddp_matches_single_process(tmp_path):
    ddp = _torchrun(tmp_path / "ddp", 2, *SHARED, "train.batch_size=4")
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    run_dirs = list((tmp_path / "ddp" / "runs").iterdir())
    assert len(run_dirs) == 1  # only rank 0 writes a run folder
    ddp_weights, ddp_log = _weights(run_dirs[0])
    assert "2 process(es)" in ddp_log
    assert "max weight difference across 2 ranks: 0.000e+00" in ddp_log
    # The one-process run goes in this process (train.py runs as a separate process in test_seg_training.py), after
    # the two ranks: on 2 cores a third training process alongside them only slows their collectives down.
    single = run_script_in_process("train.py", "--config", "configs/quick.yaml",
                                   *tiny_cli_args(tmp_path / "single", *SHARED, "train.batch_size=8"))
    assert single.returncode == 0, single.stderr
    single_weights, _ = _weights(Path(single.stdout.strip().splitlines()[-1]))
    for name in single_weights:
        assert torch.allclose(ddp_weights[name], single_weights[name], atol=1e-4), name


@pytest.mark.slow
def test_two_process_batchnorm_validation_equals_eval_of_the_best_checkpoint(tmp_path):
    # CE: a validation loss batching cannot change; no EMA: the ranks' BatchNorm statistics are the subject here
    ddp = _torchrun(tmp_path, 2, "run.device=cpu", "model.norm=batch", "train.loss=ce", "train.epochs=2",
                    "train.batch_size=4", "train.num_plot_images=0", "train.ema=false")
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    best = next((tmp_path / "runs").iterdir()) / "checkpoints" / "best.pt"
    state = load_checkpoint(best)
    assert state["world_size"] == 2 and len(state["rng"]) == 2
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])  # each rank draws its own numbers
    # in this process: eval.py runs as a separate process in test_seg_training.py
    result = run_script_in_process("eval.py", "--checkpoint", str(best), "--device", "cpu")
    assert result.returncode == 0, result.stderr
    best_row = next(row for row in state["history"] if row["val_mean_dice"] == state["best_score"])
    metrics = json.loads(result.stdout)
    assert metrics["mean_dice"] == pytest.approx(best_row["val_mean_dice"], abs=1e-6)
    assert metrics["loss"] == pytest.approx(best_row["val_loss"], rel=1e-6)  # continuous: any other model shows


def test_resuming_with_another_number_of_processes_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match=r"saved by 2 process\(es\) and this run has 1; resume with the same"):
        train(tiny_config(tmp_path), {"world_size": 2}, tmp_path / "last.pt")
    assert not (tmp_path / "runs").exists()


def test_more_processes_than_gpus_is_a_config_error_naming_the_counts(monkeypatch):
    """Checked before any CUDA call, so it runs on any machine: local rank 1 with one GPU."""
    from unet_transformer_seg.errors import ConfigError
    from unet_transformer_seg.training.distributed import init_distributed

    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29518"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"local rank 1 on a machine with 1 CUDA device\(s\).*run.device=cpu"):
        init_distributed("cuda")


@needs_cuda
def test_collectives_run_on_cuda_and_cpu_tensors_in_one_group(monkeypatch):
    from unet_transformer_seg.training.distributed import all_reduce_sum, init_distributed, shutdown_distributed

    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29517"}.items():
        monkeypatch.setenv(name, value)
    info = init_distributed("cuda")
    try:
        assert info.enabled and info.world_size == 1
        on_gpu = all_reduce_sum(torch.ones(3, device="cuda"), info)  # nccl
        on_cpu = all_reduce_sum(torch.ones(2, 2, dtype=torch.int64), info)  # gloo (validation counters)
        assert on_gpu.device.type == "cuda" and on_gpu.tolist() == [1.0, 1.0, 1.0]
        assert on_cpu.device.type == "cpu" and on_cpu.sum().item() == 4
    finally:
        shutdown_distributed(info)


@needs_cuda
@pytest.mark.slow
def test_torchrun_on_one_gpu_with_amp_and_sync_batchnorm(tmp_path):
    result = _torchrun(tmp_path, 1, "run.device=cuda", "train.amp=true", "model.norm=syncbatch", "train.epochs=2")
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = next((tmp_path / "runs").iterdir())
    log = (run_dir / "train.log").read_text()
    assert "on cuda:0" in log and "1 process(es)" in log and "epoch 2 done" in log
