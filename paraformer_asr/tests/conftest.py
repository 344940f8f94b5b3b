"""Shared fixtures for the paraformer_asr tests (tiny configs so the suite stays fast on 2 CPU cores)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from asr_helpers import tiny_raw_config, train_tone_checkpoint  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture
def tiny_cfg():
    from paraformer_asr.config import config_from_dict

    return config_from_dict(tiny_raw_config())


@pytest.fixture
def tiny_data(tiny_cfg):
    from paraformer_asr.data.setup import build_data

    return build_data(tiny_cfg)


@pytest.fixture
def tiny_batch(tiny_data):
    from paraformer_asr.data.batching import Collator

    return Collator(tiny_data.tokenizer.pad_id)([tiny_data.train[i] for i in range(6)])


@pytest.fixture(scope="session")
def tone_checkpoint(tmp_path_factory):
    """A tiny audio Paraformer (asr_helpers.train_tone_checkpoint), trained once per test session."""
    return train_tone_checkpoint(tmp_path_factory.mktemp("tone_corpus"))
