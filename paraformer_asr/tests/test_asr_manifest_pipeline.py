"""data.kind: manifest end to end on a few synthetic audio files: train -> eval --manifest -> infer a.wav b.wav,
subword units through the real scripts with a checkpoint alone, and exact resume with speed perturbation.

Each character is a sine tone of its own pitch (a space is a short silence), so the pipeline (audio reading,
log-mel front end, normaliser stored in the checkpoint, tokenizer from the training transcripts) is exercised for
real.
"""

import json
import math
import shutil

import pytest
import sentencepiece
import torch
import yaml

from paraformer_asr.cli import run_main
from paraformer_asr.config import config_from_dict
from paraformer_asr.data.audio import write_audio
from paraformer_asr.inference import features_from_waveform, load_model
from paraformer_asr.training.interrupts import TrainingInterrupted
from paraformer_asr.training.launch import train
from paraformer_asr.training.loop import Trainer

from asr_helpers import load_script

TONES = {"a": 300.0, "b": 600.0, "c": 900.0}
RATE = 8000


def _speech(text):
    """One tone of 0.12 s per letter, 0.06 s of silence per space -> samples [N]."""
    t = torch.arange(int(0.12 * RATE)) / RATE
    return torch.cat([torch.zeros(int(0.06 * RATE)) if c == " " else 0.5 * torch.sin(2 * math.pi * TONES[c] * t)
                      for c in text])


def _write_corpus(folder, texts, suffix=".wav", name="list.jsonl"):
    lines = []
    for index, text in enumerate(texts):
        write_audio(folder / f"utt{index}{suffix}", _speech(text), RATE)
        lines.append(json.dumps({"audio": f"utt{index}{suffix}", "text": text, "id": f"u{index}"}))
    (folder / name).write_text("\n".join(lines) + "\n")
    return folder / name


def _raw_config(manifest, **data):
    return {
        "run": {"name": "speech", "num_threads": 1},
        "data": {"kind": "manifest", "train_manifest": str(manifest), "val_manifest": str(manifest),
                 "sample_rate": 16000, "n_mels": 20, **data},
        "model": {"d_model": 32, "num_heads": 2, "encoder_layers": 1, "decoder_layers": 1, "ffn_dim": 32,
                  "subsampling_channels": 4},
        "train": {"epochs": 1, "max_steps": 2, "batch_size": 4, "plot_utterances": 1},
    }


@pytest.mark.slow
def test_manifest_training_eval_and_wav_inference(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    manifest = _write_corpus(corpus, ["ab", "ba", "abc", "cab", "bca", "ca", "ac", "cb"])
    run_dir = train(config_from_dict(_raw_config(manifest)))
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert len(state["normalizer"]["mean"]) == 20 and state["input_dim"] == 20
    assert state["tokenizer"]["symbols"][-3:] == ["a", "b", "c"]
    assert (run_dir / "tokenizer.json").is_file() and not (run_dir / "tokenizer.model").exists()

    assert run_main(load_script("eval").main, ["--checkpoint", str(run_dir), "--manifest", str(manifest),
                                           "--out", "scores.json"]) == 0
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert scores["num_utterances"] == 8 and scores["rtf"] > 0 and scores["dataset"] == str(manifest)
    capsys.readouterr()

    assert run_main(load_script("infer").main, ["--checkpoint", str(run_dir), str(corpus / "utt0.wav"),
                                            str(corpus / "utt1.wav")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2

    other = tmp_path / "other"
    other.mkdir()
    (other / "list.jsonl").write_text(json.dumps({"audio": "../corpus/utt0.wav", "text": "xyz"}) + "\n")
    assert run_main(load_script("eval").main, ["--checkpoint", str(run_dir), "--manifest",
                                           str(other / "list.jsonl")]) == 2
    assert "missing from the model's vocabulary" in capsys.readouterr().err


@pytest.mark.slow
def test_utterance_mean_is_stored_with_the_statistics_and_makes_inference_gain_invariant(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    manifest = _write_corpus(tmp_path, ["ab", "ba", "abc", "cab"])
    raw = _raw_config(manifest, utterance_mean=True)
    raw["train"]["max_steps"] = 1
    run_dir = train(config_from_dict(raw))
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert state["normalizer"]["utterance_mean"] is True
    loaded, _ = load_model(run_dir, device="cpu")
    # 8 -> 16 kHz, and no silence (floor frames would not move with the gain)
    speech = torch.nn.functional.interpolate(_speech("abca")[None, None], scale_factor=2.0)[0, 0]
    quiet = features_from_waveform(speech, loaded)  # [T, F]
    torch.testing.assert_close(features_from_waveform(4.0 * speech, loaded), quiet, atol=1e-4, rtol=0)
    assert quiet.mean(dim=0).abs().max() < 1e-4  # the utterance's mean removed, then a zero global mean (fit)


def _runload_script(name, *args, capsys):
    """Run scripts/<name>.py's main in this process; its stdout."""
    capsys.readouterr()
    code = run_main(load_script(name).main, [str(arg) for arg in args])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    return captured.out


@pytest.mark.slow
def test_bpe_run_on_flac_is_read_by_eval_and_infer_from_the_checkpoint_alone(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    texts = ["ab ca", "ba cb", "abc ab", "cab ba", "bca ca", "ca ab", "ac cb", "cb ba"]
    manifest = _write_corpus(corpus, texts, suffix=".flac")
    raw = _raw_config(manifest, tokenizer="bpe", vocab_size=14, speed_perturb=[0.9, 1.0, 1.1],
                      spec_augment={"freq_masks": 1, "freq_width": 3, "time_masks": 1, "time_width": 3})
    raw["model"]["ctc_weight"] = 0.3
    raw["train"].update({"max_steps": 3, "num_workers": 1})
    (tmp_path / "bpe.yaml").write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / _runload_script("train", "--config", "bpe.yaml", capsys=capsys).strip().splitlines()[-1]

    stored = json.loads((run_dir / "tokenizer.json").read_text())
    assert stored["type"] == "bpe" and stored["with_blank"] and stored["vocab_size"] <= 14
    spm = sentencepiece.SentencePieceProcessor(model_file=str(run_dir / "tokenizer.model"))
    assert spm.get_piece_size() == stored["vocab_size"] and spm.id_to_piece(4) == "<blank>"
    state = torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)
    assert state["tokenizer"] == stored and state["config"]["data"]["speed_perturb"] == [0.9, 1.0, 1.1]
    assert state["model"]["decoder.output.weight"].shape[0] == stored["vocab_size"]

    fused = json.loads(_runload_script("eval", "--checkpoint", run_dir, "--decode", "beam", "--lm-order", "2",
                                   "--manifest", manifest, capsys=capsys))
    assert fused["num_utterances"] == 8 and fused["lm_order"] == 2

    alone = tmp_path / "alone.pt"
    shutil.copy(run_dir / "checkpoints" / "best.pt", alone)
    shutil.rmtree(run_dir)
    manifest.rename(corpus / "moved.jsonl")  # no run folder, no training transcripts left
    scores = json.loads(_runload_script("eval", "--checkpoint", alone, "--manifest", corpus / "moved.jsonl",
                                    capsys=capsys))
    assert scores["num_utterances"] == 8 and 0 <= scores["cer"]
    write_audio(corpus / "extra.ogg", _speech("ab ba"), RATE)
    lines = _runload_script("infer", "--checkpoint", alone, "--with-ids", corpus / "utt0.flac", corpus / "extra.ogg",
                        capsys=capsys).splitlines()
    assert [line.split("\t")[0] for line in lines] == [str(corpus / "utt0.flac"), str(corpus / "extra.ogg")]


@pytest.mark.slow
def test_resume_with_speed_and_voice_perturbation_matches_an_uninterrupted_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    manifest = _write_corpus(tmp_path, ["ab", "ba", "abc", "cab", "bca", "ca", "ac", "cb", "abca", "cbab"])
    raw = _raw_config(manifest, speed_perturb=[0.9, 1.0, 1.1],
                      voice_perturb={"max_warp": 0.1, "envelope_terms": 4, "envelope_max_db": 6.0},
                      spec_augment={"freq_masks": 1, "freq_width": 3, "time_masks": 1, "time_width": 3})
    raw["train"].update({"epochs": 2, "max_steps": None, "checkpoint_every": 1, "plot_utterances": 0})
    reference = train(config_from_dict({**raw, "run": {**raw["run"], "output_dir": "reference"}}))

    def stop_after_step_4(self):
        return self.progress.global_step == 4  # the middle of epoch 2 (3 batches an epoch)

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "_stop_requested", stop_after_step_4)
        with pytest.raises(TrainingInterrupted) as stopped:
            train(config_from_dict({**raw, "run": {**raw["run"], "output_dir": "stopped"}}))
    run_dir = train(None, resume=stopped.value.run_dir)
    ours = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    theirs = torch.load(reference / "checkpoints" / "last.pt", weights_only=True)
    assert ours["progress"]["global_step"] == theirs["progress"]["global_step"] == 6
    for name, tensor in theirs["model"].items():
        assert torch.equal(tensor, ours["model"][name]), name
    drop = ("epoch_seconds", "run_id", "val_rtf")
    assert [{k: v for k, v in row.items() if k not in drop} for row in ours["history"]] == \
           [{k: v for k, v in row.items() if k not in drop} for row in theirs["history"]]
