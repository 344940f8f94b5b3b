"""Shared fixtures for the paraformer_asr tests (tiny configs so the suite stays fast on 2 CPU cores)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

torch.set_num_threads(1)

PROJECT = Path(__file__).resolve().parents[1]


def tiny_raw_config(output_dir: str = "runs") -> dict:
    """A config mapping for a model and toy task small enough to train in seconds."""
    return {
        "run": {"name": "tiny", "output_dir": output_dir, "seed": 0, "num_threads": 1},
        "data": {"kind": "toy", "toy": {"alphabet": "abcdef", "feature_dim": 16, "num_train": 96, "num_val": 16,
                                        "num_test": 8, "min_tokens": 2, "max_tokens": 5, "min_frames_per_token": 4,
                                        "max_frames_per_token": 7, "noise_std": 0.1}},
        "model": {"d_model": 32, "num_heads": 4, "encoder_layers": 1, "decoder_layers": 1, "ffn_dim": 64,
                  "subsampling": "2x", "subsampling_channels": 4, "dropout": 0.1},
        "train": {"epochs": 2, "batch_size": 16, "eval_batch_size": 16, "lr": 0.003, "warmup_steps": 2,
                  "log_every": 5, "plot_utterances": 2},
    }


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
