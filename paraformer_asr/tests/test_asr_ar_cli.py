"""The autoregressive baseline through the real scripts: train.py with model.type=transformer_ar, eval.py
on its checkpoint, and the shipped AR configs."""

import csv
import dataclasses
import json

import pytest
import torch
import yaml

from paraformer_asr.config import load_config

from asr_helpers import PROJECT, call_script, tiny_raw_config


@pytest.mark.slow
def test_train_and_eval_scripts_run_the_ar_model(tmp_path):
    raw = tiny_raw_config()
    raw["train"].update({"epochs": 1, "max_steps": 6})
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(raw))
    train = call_script("train.py", "--config", "tiny.yaml", "--set", "model.type=transformer_ar", "--set",
                        "run.name=ar", cwd=tmp_path)
    run_dir = tmp_path / train.stdout.strip().splitlines()[-1]
    assert run_dir.parent == tmp_path / "runs" and run_dir.name.endswith("_ar")
    for name in ("config.yaml", "train.log", "metrics.json", "results.csv", "checkpoints/last.pt",
                 "checkpoints/best.pt", "plots/loss_curves.png"):
        assert (run_dir / name).is_file(), name
    with open(run_dir / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[-1]["model_type"] == "transformer_ar" and int(rows[-1]["step"]) == 6
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["type"] == "transformer_ar"
    state = torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)
    assert any(key.startswith("decoder.blocks.0.self_attn") for key in state["model"])

    # greedy decoding already ran in the training loop's validation; the script checks the beam path
    beam = json.loads(call_script("eval.py", "--checkpoint", run_dir, "--decode", "beam", "--beam-size", "3",
                                  cwd=tmp_path).stdout)
    assert beam["num_utterances"] == 8 and "oracle_length_cer" not in beam and 0.0 <= beam["token_accuracy"] <= 1.0 and beam["rtf"] > 0
    assert beam["decode"] == "beam" and beam["beam_size"] == 3
    assert beam["checkpoint"].endswith("best.pt")
    predictions = tmp_path / "pred.jsonl"
    call_script("eval.py", "--checkpoint", run_dir, "--save-predictions", predictions, cwd=tmp_path)
    assert set(json.loads(predictions.read_text().splitlines()[0])) == {"id", "ref", "hyp"}  # no times: no CIF
    refused = call_script("infer.py", "--checkpoint", run_dir, "--toy-split", "val", "--timestamps", cwd=tmp_path,
                          check=False)
    assert refused.returncode == 2 and "autoregressive baseline" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.parametrize("task", ["toy", "speech", "numbers"])
def test_ar_configs_match_the_paraformer_configs_except_the_decoder_and_ctc_weight(task):
    ar = load_config(PROJECT / "configs" / f"transformer_ar_{task}.yaml")
    paraformer = load_config(PROJECT / "configs" / f"paraformer_{task}.yaml")
    assert ar.model.type == "transformer_ar" and paraformer.model.type == "paraformer"
    assert ar.train == paraformer.train
    # Same corpus and front end; the output units may differ: each model uses the units it measured best with
    # (docs/history.md: BPE for the Paraformer on spoken numbers, characters for the AR baseline; whole words of a
    # small vocabulary for the Paraformer only).
    units = {"tokenizer": "char", "vocab_size": 256, "word_units_max": 0}
    assert dataclasses.replace(ar.data, **units) == dataclasses.replace(paraformer.data, **units)
    for key in ("d_model", "num_heads", "encoder_layers", "decoder_layers", "ffn_dim", "dropout", "subsampling",
                "subsampling_channels", "label_smoothing"):
        assert getattr(ar.model, key) == getattr(paraformer.model, key), key
    # The auxiliary CTC loss: both or neither; its weight is each model's own best (docs/history.md, the ablation)
    assert (ar.model.ctc_weight > 0) == (paraformer.model.ctc_weight > 0)
