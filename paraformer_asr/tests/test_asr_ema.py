"""The moving average of the weights (train.ema_decay, training/ema.py): the update against a plain reference, a run
that trains exactly as without it but validates and saves the average, an exact resume, and the config's bounds."""

import json

import pytest
import torch
from torch import nn

from paraformer_asr.config import config_from_dict
from paraformer_asr.errors import ConfigError
from paraformer_asr.training.checkpointing import load_checkpoint
from paraformer_asr.training.ema import WeightAverage
from paraformer_asr.training.interrupts import TrainingInterrupted
from paraformer_asr.training.launch import train
from paraformer_asr.training.loop import Trainer

from asr_helpers import tiny_raw_config


def test_the_average_follows_the_formula_with_its_warm_up():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    average = WeightAverage(model, decay=0.9)
    expected = [p.detach().clone() for p in model.parameters()]
    for n in range(100):
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter))
        decay = min(0.9, (1 + n) / (10 + n))  # 0.1 at the first update, then up to the cap
        expected = [decay * e + (1 - decay) * p.detach() for e, p in zip(expected, model.parameters())]
        average.update(model)
    assert average.updates == 100 and average.current_decay() == 0.9
    for got, want in zip(average.model.parameters(), expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert not any(p.requires_grad for p in average.model.parameters())

    average.reset_to(model)
    assert average.updates == 0
    for got, want in zip(average.model.parameters(), model.parameters()):
        assert torch.equal(got, want)


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5])
def test_a_decay_outside_the_open_unit_interval_is_refused(decay):
    with pytest.raises(ValueError, match="ema_decay"):
        WeightAverage(nn.Linear(2, 2), decay)


@pytest.mark.parametrize("decay", [1.0, -0.1])
def test_the_config_names_a_bad_ema_decay(decay):
    raw = tiny_raw_config()
    raw["train"]["ema_decay"] = decay
    with pytest.raises(ConfigError, match="train.ema_decay"):
        config_from_dict(raw)


def _raw(output_dir, ema_decay: float) -> dict:
    raw = tiny_raw_config(str(output_dir))
    raw["train"].update({"epochs": 2, "plot_utterances": 0, "log_every": 1, "ema_decay": ema_decay})
    return raw


def _metrics(run_dir):
    rows = json.loads((run_dir / "metrics.json").read_text())
    return [{k: v for k, v in row.items() if k not in ("epoch_seconds", "run_id", "val_rtf")} for row in rows]


@pytest.mark.slow
def test_a_run_with_the_average_trains_the_same_weights_and_saves_the_average(tmp_path):
    plain = load_checkpoint(train(config_from_dict(_raw(tmp_path / "plain", 0.0))) / "checkpoints" / "last.pt")
    averaged_run = train(config_from_dict(_raw(tmp_path / "ema", 0.9)))
    averaged = load_checkpoint(averaged_run / "checkpoints" / "last.pt")
    assert plain["training_weights"] is None and averaged["ema_updates"] == averaged["progress"]["global_step"] > 0
    weights = averaged["training_weights"]
    for name, tensor in plain["model"].items():  # the average does not change what the optimiser does
        if name != "predictor.alpha_scale":  # calibrated for the weights a run validates
            assert torch.equal(tensor, weights[name]), name
    differs = [name for name, tensor in averaged["model"].items() if not torch.equal(tensor, weights[name])]
    assert "decoder.output.weight" in differs or len(differs) > len(weights) // 2
    plain_losses = [row["train_loss"] for row in _metrics(next((tmp_path / "plain").iterdir()))]
    assert [row["train_loss"] for row in _metrics(averaged_run)] == plain_losses


@pytest.mark.slow
def test_a_run_with_the_average_resumes_exactly(tmp_path, monkeypatch):
    reference = train(config_from_dict(_raw(tmp_path / "reference", 0.9)))

    stop_after_first_epoch = Trainer._stop_requested
    monkeypatch.setattr(Trainer, "_stop_requested",
                        lambda self: self.progress.epoch >= 1 or stop_after_first_epoch(self))
    with pytest.raises(TrainingInterrupted):
        train(config_from_dict(_raw(tmp_path / "stopped", 0.9)))
    monkeypatch.setattr(Trainer, "_stop_requested", stop_after_first_epoch)
    run_dir = next((tmp_path / "stopped").iterdir())
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["progress"]["epoch"] == 1
    train(None, resume=run_dir)

    want = load_checkpoint(reference / "checkpoints" / "last.pt")
    got = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert got["ema_updates"] == want["ema_updates"]
    for key in ("model", "training_weights"):
        for name, tensor in want[key].items():
            assert torch.equal(tensor, got[key][name]), (key, name)
    assert _metrics(run_dir) == _metrics(reference)
