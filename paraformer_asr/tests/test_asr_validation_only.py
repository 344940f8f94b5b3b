"""Choices fitted on data are made on validation data, whoever asks: the library's ``tune_checkpoint``
(training/tuning.py) and ``calibrate_checkpoint`` (training/calibration.py) refuse a test set (the test split, the
config's test manifest, a manifest whose file name says test), not only the scripts' argument parsers."""

from __future__ import annotations

import json

import pytest

from asr_helpers import SPEECH_RATE, speech_like, tiny_audio_config, tiny_model, untrained_audio_model
from paraformer_asr.config import config_from_dict
from paraformer_asr.data.audio import write_audio
from paraformer_asr.data.setup import build_data
from paraformer_asr.training.tuning import decoding_grid, tune_checkpoint
from paraformer_asr.errors import ConfigError, UserError
from paraformer_asr.training.calibration import calibrate_checkpoint, names_test_set
from paraformer_asr.training.checkpointing import save_checkpoint
from paraformer_asr.training.loop import Trainer
from paraformer_asr.training.run_folder import RunFolder

VALIDATION_ADVICE = "on validation data"


def _toy_checkpoint(folder) -> str:
    """The tiny toy Paraformer with seeded, untrained weights, saved (splits toy:train / val / test)."""
    cfg, data, model = tiny_model()
    path = folder / "toy.pt"
    save_checkpoint({"model": model.state_dict(), "config": cfg.to_dict(), "tokenizer": data.tokenizer.to_dict(),
                     "normalizer": None, "input_dim": data.input_dim}, path)
    return path


def _audio_checkpoint(folder, **data_section) -> str:
    """The tiny audio Paraformer (asr_helpers.untrained_audio_model) saved with ``data_section`` in its config."""
    loaded = untrained_audio_model()
    config = loaded.cfg.to_dict()
    config["data"].update(data_section)
    path = folder / "audio.pt"
    save_checkpoint({"model": loaded.model.state_dict(), "config": config, "tokenizer": loaded.tokenizer.to_dict(),
                     "normalizer": None, "input_dim": loaded.input_dim}, path)
    return path


def _manifest(folder, name: str) -> str:
    """Two short tone recordings with digit transcripts, listed in ``folder/name``."""
    lines = []
    for index in range(2):
        write_audio(folder / f"u{index}.wav", speech_like(1.0, 20 + index), SPEECH_RATE)
        lines.append(json.dumps({"audio": str(folder / f"u{index}.wav"), "text": ["1 2", "3 4"][index]}))
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("name", ["test.jsonl", "data/speech/test.jsonl", "test-clean.jsonl", "test_other.jsonl",
                                  "numbers_test.jsonl", "wordtimes_test_60min.jsonl", "TEST.JSONL", "test"])
def test_a_manifest_whose_file_name_says_test_is_a_test_set(name):
    assert names_test_set(name)


@pytest.mark.parametrize("name", ["val.jsonl", "train.jsonl", "dev-clean.jsonl", "latest.jsonl", "contest.jsonl",
                                  "test/val.jsonl", "tests/dev.jsonl", "attested_val.jsonl"])
def test_other_manifest_names_are_not(name):
    assert not names_test_set(name)


def test_tune_checkpoint_refuses_the_test_split(tmp_path):
    path = _toy_checkpoint(tmp_path)
    with pytest.raises(ConfigError, match=rf"toy:test: the test split.*{VALIDATION_ADVICE}"):
        tune_checkpoint(path, split="test")


def test_tune_checkpoint_refuses_a_validation_manifest_named_test(tmp_path):
    path = _audio_checkpoint(tmp_path, val_manifest=str(tmp_path / "numbers_test.jsonl"))
    with pytest.raises(ConfigError, match=rf"numbers_test.jsonl: its file name says test.*{VALIDATION_ADVICE}"):
        tune_checkpoint(path, split="val")


def test_tune_checkpoint_refuses_the_configs_test_manifest_whatever_its_name(tmp_path):
    held_out = str(tmp_path / "held_out.jsonl")
    path = _audio_checkpoint(tmp_path, val_manifest=str(tmp_path / "val.jsonl"), test_manifest=held_out)
    with pytest.raises(ConfigError, match=r"held_out.jsonl: the config's data.test_manifest"):
        tune_checkpoint(path, split="test")


def test_tune_checkpoint_chooses_on_the_validation_split(tmp_path):
    path = _toy_checkpoint(tmp_path)
    payload, best, rows = tune_checkpoint(path, split="val", batch_size=16)
    assert payload["decoding_tuned_on"] == {"data": "toy:val", "utterances": 16}
    assert len(rows) == len(decoding_grid(config_from_dict(payload["config"]).decode))
    assert sum(row["chosen"] for row in rows) == 1


def test_tune_checkpoint_chooses_on_a_selection_manifest_and_refuses_one_named_test(tmp_path):
    path = _audio_checkpoint(tmp_path, train_manifest=_manifest(tmp_path, "train.jsonl"))  # its LM's transcripts
    selection = _manifest(tmp_path, "real_selection.jsonl")
    payload, _, rows = tune_checkpoint(path, manifest=selection, batch_size=2)
    assert payload["decoding_tuned_on"] == {"data": selection, "utterances": 2}
    assert sum(row["chosen"] for row in rows) == 1
    with pytest.raises(ConfigError, match=rf"real_test.jsonl: its file name says test.*{VALIDATION_ADVICE}"):
        tune_checkpoint(path, manifest=_manifest(tmp_path, "real_test.jsonl"))


def test_calibrate_checkpoint_refuses_a_manifest_named_test(tmp_path):
    path = _audio_checkpoint(tmp_path)
    manifest = _manifest(tmp_path, "speech_test.jsonl")
    with pytest.raises(ConfigError, match=r"speech_test.jsonl: its file name says test.*on validation data"):
        calibrate_checkpoint(path, manifest=manifest)
    payload, _, scale = calibrate_checkpoint(path, manifest=manifest, allow_test=True)  # asked for in so many words
    assert payload["calibrated_on"]["data"] == manifest and scale > 0


def test_calibrate_checkpoint_fits_a_validation_manifest(tmp_path):
    path = _audio_checkpoint(tmp_path)
    manifest = _manifest(tmp_path, "val.jsonl")
    payload, _, scale = calibrate_checkpoint(path, manifest=manifest)
    assert payload["calibrated_on"] == {"source": str(path), "data": manifest, "utterances": 2, "alpha_scale": scale}


def test_calibrate_checkpoint_refuses_the_test_split(tmp_path):
    with pytest.raises(UserError, match=rf"toy:test: the test split.*{VALIDATION_ADVICE}"):
        calibrate_checkpoint(_toy_checkpoint(tmp_path), split="test")


def test_training_that_tunes_on_a_test_manifest_is_refused_before_it_trains(tmp_path):
    manifest = _manifest(tmp_path, "test.jsonl")
    raw = tiny_audio_config(tmp_path / "unused.jsonl", tmp_path / "runs", "tuned_on_test", epochs=1)
    raw["data"].update(train_manifest=manifest, val_manifest=manifest)
    raw["decode"] = {"tune": True}
    cfg = config_from_dict(raw)
    trainer = Trainer(cfg, RunFolder.create(cfg), build_data(cfg))
    with pytest.raises(ConfigError, match=r"test.jsonl: its file name says test"):
        trainer.fit()
    assert trainer.progress.global_step == 0 and not any(trainer.run.checkpoints.iterdir())
