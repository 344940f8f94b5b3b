"""Checkpoint safety: atomic writes, weights_only loading, malicious / truncated / foreign files."""

import os

import pytest
import torch

from paraformer_asr.errors import CheckpointError
from paraformer_asr.training.checkpointing import (capture_rng_state, load_checkpoint, restore_rng_state,
                                                   save_checkpoint)


def _valid_payload():
    return {"model": {"w": torch.ones(2)}, "config": {}, "tokenizer": {"symbols": []}, "input_dim": 4,
            "rng": capture_rng_state()}


def test_round_trip_with_weights_only_and_no_temp_file_left(tmp_path):
    path = tmp_path / "ck" / "last.pt"
    save_checkpoint(_valid_payload(), path)
    assert not (tmp_path / "ck" / "last.pt.tmp").exists()
    state = load_checkpoint(path)
    assert torch.equal(state["model"]["w"], torch.ones(2))
    torch.load(path, weights_only=True)


def test_rng_state_round_trip():
    import random

    import numpy as np

    state = capture_rng_state()
    first = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    restore_rng_state(state)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == first


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned_marker",))


def test_malicious_pickle_is_refused_without_running_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.pt"
    torch.save({"format": "paraformer_asr.checkpoint", "version": 1, "model": _Exploit()}, path)
    with pytest.raises(CheckpointError, match="refusing to load .*evil.pt"):
        load_checkpoint(path)
    assert not (tmp_path / "pwned_marker").exists()


def test_truncated_foreign_and_missing_files_name_the_file(tmp_path):
    good = tmp_path / "good.pt"
    save_checkpoint(_valid_payload(), good)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated.pt: the file is truncated"):
        load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {"w": torch.ones(1)}}, foreign)
    with pytest.raises(CheckpointError, match="foreign.pt is not a paraformer_asr checkpoint"):
        load_checkpoint(foreign)
    with pytest.raises(CheckpointError, match="checkpoint not found: .*missing.pt"):
        load_checkpoint(tmp_path / "missing.pt")
