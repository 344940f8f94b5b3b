"""Keeping the N best checkpoints (train.keep_best) and averaging them (training/averaging.py)."""

import copy
import json
import subprocess
import sys

import pytest
import torch

from paraformer_asr.config import config_from_dict
from paraformer_asr.data.setup import build_data
from paraformer_asr.errors import CheckpointError
from paraformer_asr.training.averaging import average_checkpoints, kept_best_checkpoints
from paraformer_asr.training.checkpointing import BestCheckpoints, load_checkpoint, save_checkpoint
from paraformer_asr.training.loop import Trainer
from paraformer_asr.training.run_folder import RunFolder

from asr_helpers import PROJECT, script_environment, tiny_raw_config


def test_best_checkpoints_keep_the_n_lowest_cers_earlier_epoch_first_on_ties(tmp_path):
    kept = BestCheckpoints(2)
    assert [kept.offer(epoch, cer) for epoch, cer in [(1, 0.5), (2, 0.4), (3, 0.45), (4, 0.45), (5, 0.1)]] == \
        [True, True, True, False, True]
    assert [entry["epoch"] for entry in kept.entries] == [5, 2]
    assert kept.file_names() == ["best_epoch5.pt", "best_epoch2.pt"]
    for name in ("best_epoch1.pt", "best_epoch2.pt", "best_epoch5.pt", "best.pt", "last.pt"):
        (tmp_path / name).write_bytes(b"")
    kept.remove_unkept(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "best_epoch2.pt", "best_epoch5.pt", "last.pt"]
    single = BestCheckpoints(1, [{"epoch": 3, "val_cer": 0.2}])
    assert single.file_names() == ["best.pt"] and not single.offer(4, 0.2) and single.offer(5, 0.1)


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    """A tiny run of 4 epochs keeping its 2 best checkpoints (a few seconds: the tests using it are slow)."""
    raw = tiny_raw_config(str(tmp_path_factory.mktemp("runs")))
    raw["data"]["toy"]["num_train"] = 48
    raw["train"].update({"epochs": 4, "keep_best": 2, "plot_utterances": 0})
    cfg = config_from_dict(raw)
    trainer = Trainer(cfg, RunFolder.create(cfg), build_data(cfg))
    return trainer.fit()


@pytest.mark.slow
def test_training_keeps_the_best_epochs_on_disk_and_in_last_pt(kept_run):
    history = json.loads((kept_run / "metrics.json").read_text())
    ranked = sorted(history, key=lambda row: (row["val_cer"], row["epoch"]))[:2]
    files = sorted(path.name for path in (kept_run / "checkpoints").glob("best_epoch*.pt"))
    assert files == sorted(f"best_epoch{row['epoch']}.pt" for row in ranked)
    entries = load_checkpoint(kept_run / "checkpoints" / "last.pt")["best_checkpoints"]
    assert [entry["epoch"] for entry in entries] == [row["epoch"] for row in ranked]
    best = load_checkpoint(kept_run / "checkpoints" / "best.pt")
    assert best["history"][-1]["epoch"] == ranked[0]["epoch"]
    assert kept_best_checkpoints(kept_run, 2) == [kept_run / "checkpoints" / f"best_epoch{row['epoch']}.pt"
                                                  for row in ranked]
    with pytest.raises(CheckpointError, match="kept 2 best checkpoint"):
        kept_best_checkpoints(kept_run, 3)


@pytest.mark.slow
def test_averaging_copies_of_one_checkpoint_returns_it_exactly(kept_run):
    path = kept_run / "checkpoints" / "best.pt"
    averaged = average_checkpoints([path, path, path])
    state = load_checkpoint(path)
    assert set(averaged["model"]) == set(state["model"])
    for name, tensor in state["model"].items():
        assert torch.equal(averaged["model"][name], tensor), name
    assert "optimizer" not in averaged and averaged["tokenizer"] == state["tokenizer"]


def _payload(weight, steps, config=None, tokenizer=None):
    config = config or {"model": {"d_model": 4}, "data": {"kind": "toy"}, "run": {"name": "a"}, "train": {}}
    return {"model": {"w": torch.tensor(weight), "steps": torch.tensor(steps)}, "config": config,
            "tokenizer": tokenizer or {"type": "char", "symbols": ["a"]}, "normalizer": None, "input_dim": 4,
            "history": [{"epoch": steps, "val_cer": 0.1}]}


def test_averaging_two_checkpoints_gives_the_mean_and_integers_from_the_best(tmp_path):
    first, second = tmp_path / "a.pt", tmp_path / "b.pt"
    save_checkpoint(_payload([1.0, 2.0], 3), first)
    other = _payload([2.0, 5.0], 7)
    other["config"]["run"]["name"] = "another run"  # run and train sections may differ
    save_checkpoint(other, second)
    averaged = average_checkpoints([first, second])
    assert torch.equal(averaged["model"]["w"], torch.tensor([1.5, 3.5]))
    assert int(averaged["model"]["steps"]) == 3 and averaged["model"]["steps"].dtype == torch.long
    assert [source["epoch"] for source in averaged["averaged_from"]] == [3, 7]


def test_averaging_refuses_other_configs_and_tokenizers(tmp_path):
    save_checkpoint(_payload([1.0], 1), tmp_path / "a.pt")
    wider = _payload([1.0], 1)
    wider["config"] = copy.deepcopy(wider["config"])
    wider["config"]["model"]["d_model"] = 8
    save_checkpoint(wider, tmp_path / "b.pt")
    save_checkpoint(_payload([1.0], 1, tokenizer={"type": "char", "symbols": ["b"]}), tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match="config key 'model.d_model' differs"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    with pytest.raises(CheckpointError, match="tokenizer differs"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "c.pt"])


@pytest.mark.slow
def test_average_checkpoints_script_output_is_read_by_eval(kept_run, tmp_path):
    def run(script, *args):
        return subprocess.run([sys.executable, str(PROJECT / "scripts" / script), *map(str, args)], cwd=tmp_path,
                              capture_output=True, text=True, env=script_environment(), timeout=240)

    done = run("average_checkpoints.py", kept_run, "--best", "2", "--out", "avg.pt")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "avg.pt" and done.stderr.count("averaged ") == 2
    scores = run("eval.py", "--checkpoint", "avg.pt")
    assert scores.returncode == 0, scores.stderr
    assert json.loads(scores.stdout)["num_utterances"] == 8  # the default split: test
    refused = run("average_checkpoints.py", kept_run, "--best", "5", "--out", "x.pt")
    assert refused.returncode == 2 and "train.keep_best >= 5" in refused.stderr and "Traceback" not in refused.stderr
