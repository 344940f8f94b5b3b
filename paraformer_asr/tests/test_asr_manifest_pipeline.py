"""data.kind: manifest end to end on a few synthetic WAV files: train -> eval --manifest -> infer a.wav b.wav.

Each character is a sine tone of its own pitch, so the pipeline (WAV reading, log-mel front end,
normaliser stored in the checkpoint, tokenizer from the training transcripts) is exercised for real.
"""

import importlib.util
import json
import math

import torch

from paraformer_asr.cli import run_main
from paraformer_asr.config import config_from_dict
from paraformer_asr.data.wav import write_wav
from paraformer_asr.training.loop import train

from asr_helpers import PROJECT

TONES = {"a": 300.0, "b": 600.0, "c": 900.0}
RATE = 8000


def _script(name):
    spec = importlib.util.spec_from_file_location(f"asr_{name}_script", PROJECT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_corpus(folder, texts):
    lines = []
    for index, text in enumerate(texts):
        pieces = [0.5 * torch.sin(2 * math.pi * TONES[c] * torch.arange(int(0.12 * RATE)) / RATE) for c in text]
        write_wav(folder / f"utt{index}.wav", torch.cat(pieces), RATE)
        lines.append(json.dumps({"audio": f"utt{index}.wav", "text": text, "id": f"u{index}"}))
    (folder / "list.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "list.jsonl"


def test_manifest_training_eval_and_wav_inference(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    manifest = _write_corpus(corpus, ["ab", "ba", "abc", "cab", "bca", "ca", "ac", "cb"])
    raw = {
        "run": {"name": "speech", "num_threads": 1},
        "data": {"kind": "manifest", "train_manifest": str(manifest), "val_manifest": str(manifest),
                 "sample_rate": 16000, "n_mels": 20},
        "model": {"d_model": 32, "num_heads": 2, "encoder_layers": 1, "decoder_layers": 1, "ffn_dim": 32,
                  "subsampling_channels": 4},
        "train": {"epochs": 1, "max_steps": 2, "batch_size": 4, "plot_utterances": 1},
    }
    run_dir = train(config_from_dict(raw))
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert len(state["normalizer"]["mean"]) == 20 and state["input_dim"] == 20
    assert state["tokenizer"]["symbols"][-3:] == ["a", "b", "c"]

    assert run_main(_script("eval").main, ["--checkpoint", str(run_dir), "--manifest", str(manifest),
                                           "--out", "scores.json"]) == 0
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert scores["num_utterances"] == 8 and scores["rtf"] > 0 and scores["dataset"] == str(manifest)
    capsys.readouterr()

    assert run_main(_script("infer").main, ["--checkpoint", str(run_dir), str(corpus / "utt0.wav"),
                                            str(corpus / "utt1.wav")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2

    other = tmp_path / "other"
    other.mkdir()
    (other / "list.jsonl").write_text(json.dumps({"audio": "../corpus/utt0.wav", "text": "xyz"}) + "\n")
    assert run_main(_script("eval").main, ["--checkpoint", str(run_dir), "--manifest",
                                           str(other / "list.jsonl")]) == 2
    assert "missing from the model's vocabulary" in capsys.readouterr().err
