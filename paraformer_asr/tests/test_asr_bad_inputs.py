"""One table of bad inputs and the promised outcome: 'error: <message>' on stderr, exit status 2.

(Transcripts with characters outside a checkpoint's vocabulary are covered in test_asr_manifest_pipeline.py.)"""

import json

import numpy as np
import pytest
import yaml

from paraformer_asr.cli import run_main
from paraformer_asr.config import config_from_dict
from paraformer_asr.training.launch import train

from asr_helpers import load_script, tiny_raw_config


def _raw_config(root):
    raw = tiny_raw_config(str(root / "runs"))
    raw["train"].update({"epochs": 1, "max_steps": 2, "plot_utterances": 0})
    return raw


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_inputs")
    (root / "ok.yaml").write_text(yaml.safe_dump(_raw_config(root)))
    (root / "empty.jsonl").write_text("")
    (root / "unknown_chars.jsonl").write_text(json.dumps({"audio": "x.wav", "text": "zzz"}) + "\n")
    np.save(root / "nan.npy", np.full((20, 16), np.nan, dtype=np.float32))
    np.save(root / "wrong_dim.npy", np.zeros((20, 5), dtype=np.float32))
    (root / "junk.pt").write_bytes(b"\x00" * 64)
    return root


@pytest.fixture(scope="module")
def run_dir(workspace):
    """A tiny toy run (2 steps) for the cases that need a checkpoint; they train, so they are slow."""
    return train(config_from_dict(_raw_config(workspace)))


def _manifest_config(root, manifest):
    return ["--config", str(root / "ok.yaml"), "--set", "data.kind=manifest",
            "--set", f"data.train_manifest={manifest}", "--set", f"data.val_manifest={manifest}"]


CASES = [
    ("unknown config key", "train", lambda r, d: ["--config", str(r / "ok.yaml"), "--set", "train.bogus=1"],
     "unknown config key 'train.bogus'"),
    ("wrong type", "train", lambda r, d: ["--config", str(r / "ok.yaml"), "--set", "model.d_model=wide"],
     "config key 'model.d_model' must be an integer"),
    ("negative size", "train", lambda r, d: ["--config", str(r / "ok.yaml"), "--set", "data.toy.num_train=-5"],
     "config key 'data.toy.num_train' must be >= 1, got -5"),
    ("missing config", "train", lambda r, d: ["--config", str(r / "nope.yaml")], "config file not found"),
    ("missing manifest", "train", lambda r, d: _manifest_config(r, r / "missing.jsonl"), "missing.jsonl"),
    ("empty dataset", "train", lambda r, d: _manifest_config(r, r / "empty.jsonl"), "empty.jsonl"),
    ("missing checkpoint", "eval", lambda r, d: ["--checkpoint", str(r / "none.pt")], "checkpoint not found"),
    ("corrupt checkpoint", "eval", lambda r, d: ["--checkpoint", str(r / "junk.pt")], "junk.pt"),
]
CHECKPOINT_CASES = [  # these need a trained run: d is its folder
    ("manifest for a toy checkpoint", "eval",
     lambda r, d: ["--checkpoint", str(d), "--manifest", str(r / "unknown_chars.jsonl")], "trained on 'toy' data"),
    ("NaN in input features", "infer", lambda r, d: ["--checkpoint", str(d), str(r / "nan.npy")],
     "nan.npy: features contain NaN or Inf"),
    ("wrong feature dim", "infer", lambda r, d: ["--checkpoint", str(d), str(r / "wrong_dim.npy")],
     "features must be [T, 16]"),
    ("missing input file", "infer", lambda r, d: ["--checkpoint", str(d), str(r / "gone.wav")],
     "input file not found"),
]


@pytest.mark.parametrize("name, script, args, message",
                         CASES + [pytest.param(*case, marks=pytest.mark.slow) for case in CHECKPOINT_CASES],
                         ids=[case[0] for case in CASES + CHECKPOINT_CASES])
def test_bad_input_gives_clear_error_and_exit_2(workspace, request, capsys, name, script, args, message):
    run = request.getfixturevalue("run_dir") if (name, script, args, message) in CHECKPOINT_CASES else None
    capsys.readouterr()  # only what the script writes counts, not the training log of run_dir
    code = run_main(load_script(script).main, args(workspace, run))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
