import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from unet_transformer_seg.checkpointing import (
    capture_rng_state, load_checkpoint, resolve_checkpoint_path, restore_rng_state, save_checkpoint,
)
from unet_transformer_seg.errors import CheckpointError


class RunsCodeWhenUnpickled:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_round_trip_with_plain_types_and_weights_only(tmp_path: Path):
    state = {"model": {"w": torch.randn(3, 3)}, "config": {"run": {"seed": 1}}, "history": [{"epoch": 1}],
             "rng": capture_rng_state()}
    path = tmp_path / "checkpoints" / "last.pt"
    save_checkpoint(state, path)
    assert not path.with_name("last.pt.tmp").exists()
    loaded = load_checkpoint(path)
    assert torch.equal(loaded["model"]["w"], state["model"]["w"]) and loaded["history"] == [{"epoch": 1}]
    torch.load(path, weights_only=True)  # plain enough for the safe loader
    assert resolve_checkpoint_path(tmp_path) == path


def test_rng_state_round_trip():
    state = capture_rng_state()
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    restore_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_malicious_pickle_is_refused_without_running_it(tmp_path: Path):
    marker = tmp_path / "code_ran"
    path = tmp_path / "evil.pt"
    torch.save({"format": "unet_transformer_seg/checkpoint/v1", "model": RunsCodeWhenUnpickled(str(marker)),
                "config": {}}, path)
    with pytest.raises(CheckpointError, match=r"refusing to load .*evil\.pt"):
        load_checkpoint(path)
    assert not marker.exists()


def test_truncated_and_foreign_files_give_clear_errors(tmp_path: Path):
    path = tmp_path / "last.pt"
    save_checkpoint({"model": {"w": torch.randn(100, 100)}, "config": {}}, path)
    data = path.read_bytes()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"cannot read checkpoint .*truncated\.pt: truncated or not a torch"):
        load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {"w": torch.zeros(1)}}, foreign)
    with pytest.raises(CheckpointError, match=r"foreign\.pt is not a unet_transformer_seg checkpoint"):
        load_checkpoint(foreign)
    text = tmp_path / "notes.pt"
    text.write_text("hello")
    with pytest.raises(CheckpointError, match=r"notes\.pt"):
        load_checkpoint(text)
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(CheckpointError, match="has no checkpoints/last.pt"):
        resolve_checkpoint_path(tmp_path)
