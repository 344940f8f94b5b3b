"""Two processes with torchrun (gloo on CPU) train like one process with the same global batch."""

import os
import subprocess
import sys
from pathlib import Path

import torch

from unet_transformer_seg.training.checkpointing import load_checkpoint

from seg_helpers import PROJECT_DIR, SCRIPTS_DIR, tiny_cli_args

SHARED = ("model.norm=group", "train.loss=ce", "train.epochs=2", "train.max_steps=6", "train.grad_clip=null")


def _weights(run_dir: Path):
    return load_checkpoint(run_dir / "checkpoints" / "last.pt")["model"], (run_dir / "train.log").read_text()


def test_two_process_ddp_matches_single_process(tmp_path):
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1"}
    single = subprocess.Popen(  # runs alongside the two-process run
        [sys.executable, str(SCRIPTS_DIR / "train.py"), "--config", "configs/quick.yaml",
         *tiny_cli_args(tmp_path / "single", *SHARED, "train.batch_size=8")],
        cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    ddp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(SCRIPTS_DIR / "train.py"), "--config", "configs/quick.yaml",
         *tiny_cli_args(tmp_path / "ddp", *SHARED, "train.batch_size=4")],
        cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    run_dirs = list((tmp_path / "ddp" / "runs").iterdir())
    assert len(run_dirs) == 1  # only rank 0 writes a run folder
    ddp_weights, ddp_log = _weights(run_dirs[0])
    assert "2 process(es)" in ddp_log
    assert "max weight difference across 2 ranks: 0.000e+00" in ddp_log
    single_stdout, single_stderr = single.communicate(timeout=300)
    assert single.returncode == 0, single_stderr
    single_weights, _ = _weights(Path(single_stdout.strip().splitlines()[-1]))
    for name in single_weights:
        assert torch.allclose(ddp_weights[name], single_weights[name], atol=1e-4), name
