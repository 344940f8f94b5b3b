"""Helpers shared by the paraformer_asr tests (importable by name; the fixtures live in conftest.py)."""

from __future__ import annotations

from pathlib import Path

import torch

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


def tiny_model(model_type: str = "paraformer"):
    """(cfg, data, model in eval mode) for the tiny config with ``model.type = model_type``; weights seeded with 0."""
    from paraformer_asr.config import config_from_dict
    from paraformer_asr.data.setup import build_data
    from paraformer_asr.models.factory import build_model

    raw = tiny_raw_config()
    raw["model"]["type"] = model_type
    cfg = config_from_dict(raw)
    data = build_data(cfg)
    torch.manual_seed(0)
    return cfg, data, build_model(cfg, data.input_dim, data.tokenizer).eval()


def overfit(model, batch, steps: int, lr: float = 3e-3) -> list[float]:
    """Train ``model`` on one batch for ``steps`` AdamW steps; returns the total loss seen at each step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        out = model.compute_loss(batch)
        optimizer.zero_grad()
        out.total.backward()
        optimizer.step()
        losses.append(float(out.total.detach()))
    return losses
