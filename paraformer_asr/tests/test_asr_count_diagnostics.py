"""The calibration kept honest (no test-set fits, averaging refits, in-sample warnings) and eval's diagnostics that
separate counting from recognising (count_error_mean, oracle_length_cer, groups by a manifest field)."""

import json

import pytest
import torch

from asr_helpers import tiny_model
from paraformer_asr.data.manifest import read_manifest
from paraformer_asr.decode.lm_fusion import build_token_lm
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.errors import ConfigError
from paraformer_asr.inference import evaluation_loader, load_trained_model
from paraformer_asr.metrics import score_transcripts
from paraformer_asr.training.averaging import average_checkpoints, refit_calibration
from paraformer_asr.training.calibration import calibrate_checkpoint
from paraformer_asr.training.checkpointing import save_checkpoint
from paraformer_asr.training.evaluation import count_diagnostics, manifest_field, oracle_length_hypotheses


def _save(tmp_path, name: str, scale: float = 1.0, weight_shift: float = 0.0):
    cfg, data, model = tiny_model()
    with torch.no_grad():
        model.predictor.alpha_scale.fill_(scale)
        model.predictor.proj.bias.add_(weight_shift)
    path = tmp_path / name
    save_checkpoint({"model": model.state_dict(), "config": cfg.to_dict(), "tokenizer": data.tokenizer.to_dict(),
                     "normalizer": None, "input_dim": data.input_dim}, path)
    return path


def test_calibration_refuses_the_test_split_unless_allowed(tmp_path):
    path = _save(tmp_path, "model.pt")
    with pytest.raises(ConfigError, match=r"toy:test.*--allow-test"):
        calibrate_checkpoint(path, split="test")
    payload, _, scale = calibrate_checkpoint(path, split="test", allow_test=True)
    assert payload["calibrated_on"]["data"] == "toy:test" and scale > 0
    payload, _, _ = calibrate_checkpoint(path, split="val")
    assert payload["calibrated_on"]["data"] == "toy:val"


def test_averaging_refits_the_scale_on_validation_instead_of_averaging_it(tmp_path):
    first = _save(tmp_path, "a.pt", scale=0.5, weight_shift=0.2)
    second = _save(tmp_path, "b.pt", scale=2.0, weight_shift=-0.2)
    payload = average_checkpoints([first, second])
    assert float(payload["model"]["predictor.alpha_scale"]) == pytest.approx(1.25)  # the mean, before the refit
    scale = refit_calibration(payload, tmp_path / "avg.pt")
    assert float(payload["model"]["predictor.alpha_scale"]) == pytest.approx(scale) and scale != pytest.approx(1.25)
    save_checkpoint(payload, tmp_path / "avg.pt")
    _, _, direct = calibrate_checkpoint(tmp_path / "avg.pt", split="val")  # the same fit, done independently
    assert direct == pytest.approx(scale, rel=1e-6)
    assert load_trained_model(tmp_path / "avg.pt", torch.device("cpu")).calibrated_on == "toy:val"


def _decoded(model, cfg, data, tmp_path):
    path = _save(tmp_path, "m.pt")
    loaded = load_trained_model(path, torch.device("cpu"))
    loader = evaluation_loader(loaded, "val", None, 5)
    transcripts, _ = transcribe_batches(loaded.model, loader, torch.device("cpu"))
    return loaded, loader, transcripts


def test_oracle_length_decoding_has_the_true_counts_and_keeps_right_counted_hypotheses(tmp_path):
    cfg, data, model = tiny_model()
    loaded, loader, transcripts = _decoded(model, cfg, data, tmp_path)
    oracle = oracle_length_hypotheses(loaded.model, loader, torch.device("cpu"), transcripts)
    assert [len(h) for h in oracle] == [len(t.ref_tokens) for t in transcripts]
    for transcript, hypothesis in zip(transcripts, oracle):
        if len(transcript.hyp_tokens) == len(transcript.ref_tokens):
            assert hypothesis == transcript.hyp_tokens


def test_oracle_length_cer_equals_the_cer_when_every_count_is_right(tmp_path):
    cfg, data, model = tiny_model()
    loaded, loader, transcripts = _decoded(model, cfg, data, tmp_path)
    # Hypotheses of exactly the reference lengths (the oracle decoding itself): the count is right everywhere.
    oracle = oracle_length_hypotheses(loaded.model, loader, torch.device("cpu"), transcripts)
    for transcript, hypothesis in zip(transcripts, oracle):
        transcript.hyp_tokens = hypothesis
    tokenizer = loaded.tokenizer
    scores = score_transcripts([t.ref_tokens for t in transcripts], oracle, [t.ref_text for t in transcripts],
                               [tokenizer.decode(h) for h in oracle])
    diagnostics = count_diagnostics(loaded.model, loader, tokenizer, torch.device("cpu"), transcripts)
    assert scores.length_accuracy == 1.0 and scores.count_error_mean == 0.0
    assert diagnostics["oracle_length_cer"] == pytest.approx(scores.cer)


def test_count_error_mean_is_signed():
    scores = score_transcripts([[1, 2, 3], [1, 2]], [[1, 2], [1, 2]], ["abc", "ab"], ["ab", "ab"])
    assert scores.count_error_mean == -0.5 and scores.length_accuracy == 0.5


def test_groups_score_each_value_of_a_manifest_field(tmp_path):
    cfg, data, model = tiny_model()
    loaded, loader, transcripts = _decoded(model, cfg, data, tmp_path)
    groups = ["a" if i % 3 else "b" for i in range(len(transcripts))]
    result = count_diagnostics(loaded.model, loader, loaded.tokenizer, torch.device("cpu"), transcripts, groups)
    assert set(result["groups"]) == {"a", "b"}
    assert sum(g["num_utterances"] for g in result["groups"].values()) == len(transcripts)
    rows = [i for i, g in enumerate(groups) if g == "b"]
    expected = score_transcripts([transcripts[i].ref_tokens for i in rows], [transcripts[i].hyp_tokens for i in rows],
                                 [transcripts[i].ref_text for i in rows],
                                 [loaded.tokenizer.decode(transcripts[i].hyp_tokens) for i in rows])
    assert result["groups"]["b"]["cer"] == pytest.approx(expected.cer)
    assert result["groups"]["b"]["length_accuracy"] == pytest.approx(expected.length_accuracy)


def test_manifest_field_reads_any_key_and_names_the_line_without_it(tmp_path):
    (tmp_path / "a.wav").write_bytes(b"")
    lines = [{"audio": "a.wav", "text": "hi", "id": "u1", "speaker": "s1"},
             {"audio": "a.wav", "text": "ho", "id": "u2", "speaker": 7}]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert [e.id for e in read_manifest(manifest)] == ["u1", "u2"]
    assert manifest_field(str(manifest), "speaker") == {"u1": "s1", "u2": "7"}
    with pytest.raises(ConfigError, match=r"--group-by accent: .*m.jsonl:1 has no field 'accent'"):
        manifest_field(str(manifest), "accent")


def test_oracle_length_decoding_runs_the_evaluated_search_at_the_true_count(tmp_path):
    cfg, data, model = tiny_model()
    loaded, loader, transcripts = _decoded(model, cfg, data, tmp_path)
    refs = [t.ref_tokens for t in transcripts]
    lm = build_token_lm([t.ref_text for t in transcripts], loaded.tokenizer, order=4)  # knows every reference
    greedy = oracle_length_hypotheses(loaded.model, loader, torch.device("cpu"), transcripts)
    fused = oracle_length_hypotheses(loaded.model, loader, torch.device("cpu"), transcripts, 4, lm, 5.0)
    assert [len(h) for h in fused] == [len(r) for r in refs]
    texts = [t.ref_text for t in transcripts]
    cer = {name: score_transcripts(refs, hyps, texts, [loaded.tokenizer.decode(h) for h in hyps]).cer
           for name, hyps in (("greedy", greedy), ("fused", fused))}
    assert cer["fused"] < cer["greedy"]  # the LM of the references steers the search at the true count
    diagnostics = count_diagnostics(loaded.model, loader, loaded.tokenizer, torch.device("cpu"), transcripts,
                                    beam_size=4, lm=lm, lm_weight=5.0)
    assert diagnostics["oracle_length_cer"] == pytest.approx(
        score_transcripts(refs, fused, texts, [loaded.tokenizer.decode(h) for h in fused]).cer)
