"""Refitting a finished checkpoint's CIF calibration (training/calibration.py, scripts/calibrate_cif.py)."""

import json

import pytest
import torch

from paraformer_asr.config import config_from_dict
from paraformer_asr.data.setup import build_data
from paraformer_asr.errors import CheckpointError
from paraformer_asr.inference import evaluation_dataset, load_trained_model
from paraformer_asr.training.calibration import calibrate_checkpoint
from paraformer_asr.training.checkpointing import load_checkpoint, save_checkpoint
from paraformer_asr.training.loop import Trainer
from paraformer_asr.training.run_folder import RunFolder

from asr_helpers import call_script, run_script, tiny_model, tiny_raw_config


@pytest.fixture(scope="module")
def uncalibrated_run(tmp_path_factory):
    """A tiny Paraformer run trained with train.calibrate_cif false (its alpha_scale stays 1)."""
    raw = tiny_raw_config(str(tmp_path_factory.mktemp("runs")))
    raw["train"].update({"epochs": 2, "plot_utterances": 0, "calibrate_cif": False})
    cfg = config_from_dict(raw)
    return Trainer(cfg, RunFolder.create(cfg), build_data(cfg)).fit()


@pytest.mark.slow
def test_calibrating_a_checkpoint_refits_only_the_scale_to_the_set(uncalibrated_run):
    best = uncalibrated_run / "checkpoints" / "best.pt"
    payload, old_scale, new_scale = calibrate_checkpoint(uncalibrated_run, split="test", allow_test=True)
    assert old_scale == 1.0 and new_scale != 1.0
    original = load_checkpoint(best)
    assert set(payload["model"]) == set(original["model"])
    for name, tensor in original["model"].items():
        if name != "predictor.alpha_scale":
            assert torch.equal(payload["model"][name], tensor), name
    assert float(payload["model"]["predictor.alpha_scale"]) == pytest.approx(new_scale)
    assert payload["calibrated_on"]["data"] == "toy:test" and payload["calibrated_on"]["utterances"] == 8
    # Independently: the eval-mode alpha sums of the test split, one utterance at a time.
    loaded = load_trained_model(best, torch.device("cpu"))
    total_alpha = total_tokens = 0.0
    with torch.no_grad():
        for item in evaluation_dataset(loaded, "test"):
            features = item["features"].unsqueeze(0)
            mask = torch.ones(features.shape[:2], dtype=torch.bool)
            encoder_out, enc_mask = loaded.model.encode(features, mask)
            total_alpha += float(loaded.model.predictor.predict_alphas(encoder_out, enc_mask).sum())
            total_tokens += len(item["tokens"])
    assert new_scale == pytest.approx(total_tokens / total_alpha, rel=1e-5)


def test_calibrating_a_model_without_a_cif_is_refused(tmp_path):
    cfg, data, model = tiny_model("transformer_ar")
    save_checkpoint({"model": model.state_dict(), "config": cfg.to_dict(), "tokenizer": data.tokenizer.to_dict(),
                     "normalizer": None, "input_dim": data.input_dim}, tmp_path / "ar.pt")
    with pytest.raises(CheckpointError, match="transformer_ar model has no CIF predictor"):
        calibrate_checkpoint(tmp_path / "ar.pt")


@pytest.mark.slow
def test_calibrate_cif_script_writes_a_checkpoint_eval_reads(uncalibrated_run, tmp_path):
    done = run_script("calibrate_cif.py", "--checkpoint", uncalibrated_run, "--out", "calibrated.pt", cwd=tmp_path)
    assert done.stdout.strip() == "calibrated.pt" and "alpha_scale 1.0000 -> " in done.stderr
    scores = call_script("eval.py", "--checkpoint", "calibrated.pt", cwd=tmp_path)
    assert json.loads(scores.stdout)["num_utterances"] == 8 and "calibration_in_sample" not in scores.stdout
    in_sample = call_script("eval.py", "--checkpoint", "calibrated.pt", "--split", "val", cwd=tmp_path)
    assert json.loads(in_sample.stdout)["calibration_in_sample"] is True and "in-sample" in in_sample.stderr
    refused = call_script("calibrate_cif.py", "--checkpoint", uncalibrated_run, "--out", "t.pt", "--split", "test",
                          cwd=tmp_path, check=False)
    assert refused.returncode == 2 and "--allow-test" in refused.stderr and "Traceback" not in refused.stderr
    missing = call_script("calibrate_cif.py", "--checkpoint", "nowhere.pt", "--out", "x.pt", cwd=tmp_path, check=False)
    assert missing.returncode == 2 and "nowhere.pt" in missing.stderr and "Traceback" not in missing.stderr
