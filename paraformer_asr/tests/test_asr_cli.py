"""End to end through the real scripts: train -> eval -> infer, promised files, exit codes. Each script runs once
in a real subprocess; the calls after that run in this process (asr_helpers.call_script), the same ``main``."""

import csv
import json

import numpy as np
import pytest
import torch
import yaml

from asr_helpers import call_script, run_script, tiny_raw_config

RESULTS_COLUMNS = ["run_id", "model_type", "epoch", "step", "train_loss", "ce_loss", "quantity_loss", "val_cer",
                   "val_token_accuracy", "val_sequence_accuracy", "cif_alpha_scale", "lr",
                   "epoch_seconds"]
SCORE_KEYS = {"cer", "wer", "token_accuracy", "sequence_accuracy", "length_accuracy", "count_error_mean",
              "num_utterances", "rtf"}


@pytest.mark.slow
def test_train_eval_infer_produce_every_promised_file(tmp_path):
    raw = tiny_raw_config()
    raw["train"].update({"epochs": 10, "max_steps": 40})
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(raw))
    train = run_script("train.py", "--config", "tiny.yaml", "--set", "run.name=cli", cwd=tmp_path)
    run_dir = tmp_path / train.stdout.strip().splitlines()[-1]
    assert run_dir.parent == tmp_path / "runs" and run_dir.name.endswith("_cli")
    for name in ("config.yaml", "train.log", "metrics.json", "results.csv", "tokenizer.json",
                 "checkpoints/last.pt", "checkpoints/best.pt", "plots/loss_curves.png", "plots/cif_alignment.png"):
        assert (run_dir / name).is_file(), name
    with open(run_dir / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == RESULTS_COLUMNS
    assert int(rows[-1]["step"]) == 40 and rows[-1]["model_type"] == "paraformer"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert len(metrics) == len(rows) and metrics[-1]["step"] == 40
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["max_steps"] == 40
    state = torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)
    assert state["tokenizer"]["symbols"][:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and "model" in state

    run_script("eval.py", "--checkpoint", run_dir, "--split", "val", "--out", "scores.json", "--save-predictions",
               "pred.jsonl", cwd=tmp_path)
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert SCORE_KEYS <= set(scores) and scores["num_utterances"] == 16 and scores["rtf"] > 0
    assert scores["calibration_in_sample"] is True  # the run calibrated its CIF on the validation set
    predictions = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert len(predictions) == 16 and set(predictions[0]) == {"id", "ref", "hyp", "words"}
    assert [w["word"] for w in predictions[0]["words"]] == predictions[0]["hyp"].split()
    beam = json.loads(call_script("eval.py", "--checkpoint", run_dir / "checkpoints" / "last.pt", "--decode", "beam",
                                  "--beam-size", "3", "--lm-order", "2", "--lm-weight", "0.2", cwd=tmp_path).stdout)
    assert SCORE_KEYS <= set(beam) and beam["decode"] == "beam" and beam["lm_order"] == 2
    # the default split is test; a Paraformer adds the oracle-length CER
    assert beam["dataset"] == "toy:test" and beam["num_utterances"] == 8 and 0 <= beam["oracle_length_cer"]
    assert "calibration_in_sample" not in beam

    from paraformer_asr.data.tokenizer import CharTokenizer
    from paraformer_asr.data.toy import ToySeq2SeqDataset
    from paraformer_asr.config import config_from_dict

    item = ToySeq2SeqDataset.from_config(config_from_dict(raw).data.toy, "val",
                                         CharTokenizer.from_dict(state["tokenizer"]))[0]
    np.save(tmp_path / "utt.npy", item["features"].numpy())
    infer = run_script("infer.py", "--checkpoint", run_dir, "utt.npy", "--toy-split", "val", "--toy-count", "3",
                       cwd=tmp_path)
    lines = infer.stdout.splitlines()
    assert len(lines) == 4 and lines[0] == lines[1]  # the .npy file is val item 0
    assert lines[1] == next(p["hyp"] for p in predictions if p["id"] == item["id"])

    timed = call_script("infer.py", "--checkpoint", run_dir, "utt.npy", "--toy-split", "val", "--toy-count", "2",
                        "--timestamps", cwd=tmp_path)
    records = [json.loads(line) for line in timed.stdout.splitlines()]
    assert [r["audio"] for r in records] == ["utt.npy", "toy-val-000000", "toy-val-000001"]
    assert records[0]["text"] == lines[0] and set(records[0]) == {"audio", "text", "tokens", "words"}
    assert "".join(t["token"] for t in records[0]["tokens"]) == records[0]["text"]
    assert records[0]["words"] == next(p["words"] for p in predictions if p["id"] == item["id"])
    call_script("infer.py", "--checkpoint", run_dir, "utt.npy", "--srt", "utt.srt", cwd=tmp_path)
    srt = (tmp_path / "utt.srt").read_text()
    assert (srt.startswith("1\n00:00:0") and " --> " in srt) or not lines[0]
    result = call_script("infer.py", "--checkpoint", run_dir, "--toy-split", "val", "--srt", "x.srt", cwd=tmp_path,
                         check=False)
    assert result.returncode == 2 and "exactly one input" in result.stderr


@pytest.mark.slow
def test_scripts_report_user_errors_with_exit_2_and_no_traceback(tmp_path):
    result = run_script("train.py", "--config", "nope.yaml", cwd=tmp_path, check=False)
    assert result.returncode == 2 and result.stderr.strip() == "error: config file not found: nope.yaml"
    (tmp_path / "bad.yaml").write_text("train:\n  lr: -1\n")
    result = call_script("train.py", "--config", "bad.yaml", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "error: config key 'train.lr' must be > 0, got -1.0" in result.stderr
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    result = call_script("eval.py", "--checkpoint", "junk.pt", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "junk.pt" in result.stderr and "Traceback" not in result.stderr
