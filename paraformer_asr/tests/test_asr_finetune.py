"""Fine-tuning (train.py --init-from, training/finetune.py): a new run starts from a checkpoint's weights (its first
loss is the checkpoint's loss on the same batch) with a fresh optimiser; a checkpoint whose network, features or
tokenizer differ from the new config is refused naming the key; train.freeze_encoder_steps keeps the encoder's
weights for its first steps while the rest trains."""

import json

import pytest
import torch
import yaml

from paraformer_asr.config import config_from_dict
from paraformer_asr.data.tokenizer import tokenizer_from_dict
from paraformer_asr.errors import CheckpointError, ConfigError
from paraformer_asr.factory import build_model
from paraformer_asr.training.checkpointing import load_checkpoint
from paraformer_asr.training.finetune import load_initial_weights
from paraformer_asr.training.launch import train
from paraformer_asr.training.loop import Trainer

from asr_helpers import call_script, tiny_raw_config


def deterministic_raw(output_dir, seed: int = 1234) -> dict:
    """The tiny toy config with nothing random in the loss (no dropout, no glancing), on the toy task of ``seed``."""
    raw = tiny_raw_config(str(output_dir))
    raw["data"]["toy"]["seed"] = seed
    raw["model"].update({"dropout": 0.0, "glancing_ratio": 0.0})
    raw["train"].update({"epochs": 1, "max_steps": 3, "plot_utterances": 0, "log_every": 1})
    return raw


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A run folder of the tiny toy Paraformer after 3 steps."""
    return train(config_from_dict(deterministic_raw(tmp_path_factory.mktemp("pretrained"))))


def fine_tuning_raw(output_dir, **train) -> dict:
    """Fine-tuning settings: another toy task (other utterances of the same alphabet)."""
    raw = deterministic_raw(output_dir, seed=99)
    raw["train"].update(train)
    return raw


@pytest.mark.slow
def test_fine_tuning_starts_from_the_checkpoints_weights_with_a_fresh_optimiser(trained_run, tmp_path,
                                                                                  monkeypatch):
    config = tmp_path / "finetune.yaml"
    config.write_text(yaml.safe_dump(fine_tuning_raw(tmp_path / "runs", max_steps=1)))
    batches = []
    forward_backward = Trainer._forward_backward
    monkeypatch.setattr(Trainer, "_forward_backward",
                        lambda self, batch: batches.append(batch) or forward_backward(self, batch))
    result = call_script("train.py", "--config", config, "--init-from", trained_run, cwd=tmp_path)
    run_dir = tmp_path / result.stdout.strip().splitlines()[-1]
    assert run_dir.parent == tmp_path / "runs" and run_dir != trained_run

    best = trained_run / "checkpoints" / "best.pt"  # a run folder means its best.pt
    pretrained = load_checkpoint(best)
    tuned = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert tuned["initialised_from"] == str(best)
    assert tuned["progress"]["global_step"] == 1 and tuned["optimizer"]["state"][0]["step"] == 1
    assert tuned["tokenizer"] == pretrained["tokenizer"]
    assert json.loads((run_dir / "tokenizer.json").read_text()) == pretrained["tokenizer"]
    assert "weights initialised from" in (run_dir / "train.log").read_text()

    cfg = config_from_dict(pretrained["config"])
    tokenizer = tokenizer_from_dict(pretrained["tokenizer"])
    model = build_model(cfg, pretrained["input_dim"], tokenizer)
    model.load_state_dict(pretrained["model"])
    with torch.no_grad():
        expected = float(model.train().compute_loss(batches[0]).total)
    assert tuned["step_log"][0]["loss"] == pytest.approx(expected, rel=1e-6)
    torch.manual_seed(5)
    untrained = build_model(cfg, pretrained["input_dim"], tokenizer).train()
    with torch.no_grad():
        assert abs(float(untrained.compute_loss(batches[0]).total) - expected) > 1e-2  # other weights, other loss


@pytest.mark.parametrize("change, message", [
    (("model", "d_model", 64), "model.d_model differs: the checkpoint has 32, the config 64"),
    (("model", "ctc_weight", 0.3), "model.ctc_weight differs: the checkpoint has 0.0, the config 0.3"),
    (("model", "type", "transformer_ar"), "model.type differs: the checkpoint has 'paraformer'"),
    (("toy", "feature_dim", 20), "data.toy.feature_dim is 20 but the checkpoint's model reads 16 features"),
    (("data", "tokenizer", "bpe"), "data.tokenizer differs: the checkpoint has 'char', the config 'bpe'"),
    (("toy", "alphabet", "abcdefgh"), "the tokenizer differs: the new training transcripts use characters missing "
                                      "from the checkpoint's vocabulary: 'gh'"),
])
def test_a_checkpoint_that_does_not_fit_the_config_is_refused_naming_the_key(trained_run, tmp_path, change,
                                                                               message):
    raw = fine_tuning_raw(tmp_path / "runs")
    section, key, value = change
    (raw["data"]["toy"] if section == "toy" else raw[section])[key] = value
    with pytest.raises(CheckpointError, match=message.replace(".", r"\.")):
        train(config_from_dict(raw), init_from=trained_run)
    assert not (tmp_path / "runs").exists()  # refused before a run folder is made


def test_loss_and_regularisation_keys_may_change(trained_run, tmp_path):
    raw = fine_tuning_raw(tmp_path / "runs")
    raw["model"].update({"dropout": 0.2, "label_smoothing": 0.0, "glancing_ratio": 0.3, "quantity_weight": 0.5})
    raw["train"].update({"lr": 1e-4, "epochs": 3})
    state, path = load_initial_weights(config_from_dict(raw), trained_run / "checkpoints" / "last.pt")
    assert path == trained_run / "checkpoints" / "last.pt" and state["progress"]["global_step"] == 3


def test_init_from_with_resume_is_an_error(trained_run, tmp_path):
    config = tmp_path / "finetune.yaml"
    config.write_text(yaml.safe_dump(fine_tuning_raw(tmp_path / "runs")))
    result = call_script("train.py", "--config", config, "--init-from", trained_run, "--resume", trained_run,
                         cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert "--init-from starts a new run from a checkpoint's weights and --resume continues a run" in result.stderr
    with pytest.raises(ConfigError, match="give one of them"):
        train(config_from_dict(fine_tuning_raw(tmp_path / "runs")), resume=trained_run, init_from=trained_run)


@pytest.mark.slow
def test_a_frozen_encoder_keeps_its_weights_for_the_first_steps(trained_run, tmp_path, monkeypatch):
    raw = fine_tuning_raw(tmp_path / "runs", max_steps=3, freeze_encoder_steps=2)
    snapshots = []  # the model's weights after each optimiser step
    optimizer_step = Trainer._optimizer_step

    def step_and_snapshot(self):
        optimizer_step(self)
        snapshots.append({name: tensor.clone() for name, tensor in self.model.state_dict().items()})

    monkeypatch.setattr(Trainer, "_optimizer_step", step_and_snapshot)
    train(config_from_dict(raw), init_from=trained_run)
    start = load_checkpoint(trained_run / "checkpoints" / "best.pt")["model"]
    encoder = [name for name in start if name.startswith("encoder.") and start[name].is_floating_point()]
    decoder = [name for name in start if name.startswith("decoder.")]
    assert len(snapshots) == 3 and encoder and decoder
    for weights in snapshots[:2]:
        assert all(torch.equal(weights[name], start[name]) for name in encoder)
        assert any(not torch.equal(weights[name], start[name]) for name in decoder)
    assert any(not torch.equal(snapshots[2][name], start[name]) for name in encoder)  # step 3 trains it


def test_freeze_encoder_steps_must_not_be_negative():
    raw = tiny_raw_config()
    raw["train"]["freeze_encoder_steps"] = -1
    with pytest.raises(ConfigError, match="config key 'train.freeze_encoder_steps' must be >= 0"):
        config_from_dict(raw)
