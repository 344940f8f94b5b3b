"""torchrun with 2 CPU processes (gloo): both ranks end with identical weights, close to a
single-process run with the same global batch."""

import re
import subprocess
import sys

import pytest
import torch
import yaml

from asr_helpers import PROJECT, call_script, tiny_raw_config


def _train_with_torchrun(tmp_path, batch_size, output_dir):
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                             str(PROJECT / "scripts" / "train.py"), "--config", "ddp.yaml",
                             "--set", f"train.batch_size={batch_size}", "--set", f"run.output_dir={output_dir}"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=240,
                            env={"CI": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / result.stdout.strip().splitlines()[-1]
    return run_dir, result.stderr


@pytest.mark.slow
def test_two_process_training_matches_single_process(tmp_path):
    raw = tiny_raw_config()
    raw["run"]["device"] = "cpu"  # gloo on CPU processes, also on a machine with fewer GPUs than processes
    raw["train"].update({"epochs": 1, "plot_utterances": 0})
    raw["model"].update({"dropout": 0.0, "glancing_ratio": 0.0})  # no per-rank randomness
    (tmp_path / "ddp.yaml").write_text(yaml.safe_dump(raw))
    ddp_dir, ddp_log = _train_with_torchrun(tmp_path, 8, "ddp")
    single = call_script("train.py", "--config", "ddp.yaml", "--set", "train.batch_size=16", "--set",
                         "run.output_dir=single", cwd=tmp_path)
    single_dir = tmp_path / single.stdout.strip().splitlines()[-1]

    digests = dict(re.findall(r"rank (\d) final weights sha256 ([0-9a-f]{64})", ddp_log))
    assert set(digests) == {"0", "1"} and digests["0"] == digests["1"]
    assert sorted(p.name for p in (tmp_path / "ddp").iterdir()) == [ddp_dir.name]  # only rank 0 wrote a run
    ddp = torch.load(ddp_dir / "checkpoints" / "last.pt", weights_only=True)
    single = torch.load(single_dir / "checkpoints" / "last.pt", weights_only=True)
    assert ddp["progress"]["global_step"] == single["progress"]["global_step"] == 6
    # per-rank token means vs one global token mean differ slightly; 6 AdamW steps at lr 3e-3
    for name, tensor in single["model"].items():
        assert torch.allclose(ddp["model"][name], tensor, atol=2e-2), name
    assert abs(ddp["history"][-1]["train_loss"] - single["history"][-1]["train_loss"]) < 1e-2


def test_more_processes_than_gpus_is_a_config_error_naming_the_counts(monkeypatch):
    """Checked before any CUDA call, so it runs on any machine: local rank 1 with one GPU."""
    from paraformer_asr.errors import ConfigError
    from paraformer_asr.training.distributed import init_distributed

    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"local rank 1 on a machine with 1 CUDA device\(s\).*run.device=cpu"):
        init_distributed(use_cuda=True)
