"""ONNX export and the onnxruntime backend: the traceable CIF against the scatter-add one, parity of the exported
Paraformer and AR baseline with PyTorch (tokens of greedy and beam search, logits within tolerance), int8 graphs,
the CLIs with --backend onnx, the service over the onnx backend, bad export folders, and the missing extra."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.errors import CheckpointError, ConfigError
from paraformer_asr.models.cif import cif_integrate, dense_cif_integrate, inference_token_count

from asr_helpers import PROJECT, load_script, script_environment, tiny_raw_config

LOGIT_TOLERANCE = 1e-4  # largest |logit| difference between onnxruntime fp32 and PyTorch on the toy checkpoints
# Without the optional [onnx] extra the tests that export or run graphs skip (this marker, and the ``exported``
# fixture); the rest of the file (the dense CIF, the missing extra's message, the shared options) still runs.
HAS_ORT = importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None
needs_onnx = pytest.mark.skipif(not HAS_ORT, reason="the optional [onnx] extra is not installed")


@pytest.mark.parametrize("scale", [1.0, 1.7])
def test_dense_cif_matches_the_scatter_add_cif(scale):
    generator = torch.Generator().manual_seed(3)
    hidden = torch.randn(3, 30, 8, generator=generator)  # [B, T, D]
    alphas = torch.rand(3, 30, generator=generator) * scale  # threshold units, up to 1.7 per frame
    alphas[1, 20:] = 0.0  # padding
    num_tokens = inference_token_count(alphas)
    embeddings, token_mask, fire_frames = cif_integrate(hidden, alphas, num_tokens)
    slots = 30 * 2
    dense, dense_mask, dense_fire = dense_cif_integrate(hidden, alphas, num_tokens, slots)
    width = embeddings.shape[1]
    assert dense.shape == (3, slots, 8) and dense_mask.shape == (3, slots) and dense_fire.shape == (3, slots)
    assert float((dense[:, :width] - embeddings).abs().max()) < 1e-5
    assert torch.equal(dense_mask[:, :width], token_mask) and not dense_mask[:, width:].any()
    assert torch.equal(dense_fire[:, :width], fire_frames) and bool((dense_fire[:, width:] == -1).all())
    assert float(dense[:, width:].abs().max()) == 0.0


def test_missing_extra_names_it(monkeypatch):
    from paraformer_asr.deploy import onnx_extra

    real = importlib.util.find_spec
    present = real("json")  # any spec: onnx counts as installed, whether it is or not
    monkeypatch.setattr(onnx_extra.importlib.util, "find_spec", lambda name, *args: None if name == "onnxruntime"
                        else present if name == "onnx" else real(name, *args))
    with pytest.raises(ConfigError, match=r"\(missing: onnxruntime\).*pip install -e 'paraformer_asr\[onnx\]'"):
        onnx_extra.require_onnx()
    infer = load_script("infer")
    from paraformer_asr.cli import run_main

    assert run_main(infer.main, ["--backend", "onnx", "--checkpoint", "x", "--toy-split", "val"]) == 2


# This file run by pytest with onnx and onnxruntime hidden (import fails, find_spec finds nothing), as if the extra
# were not installed; the test that runs it is left out of that run.
WITHOUT_THE_EXTRA = """
import sys

import pytest

sys.modules["onnx"] = sys.modules["onnxruntime"] = None
sys.exit(pytest.main([sys.argv[1], "-q", "-rs", "-p", "no:cacheprovider", "-k", "not without_the_extra"]))
"""


@pytest.mark.slow
def test_the_file_skips_cleanly_without_the_extra():
    done = subprocess.run([sys.executable, "-c", WITHOUT_THE_EXTRA, str(Path(__file__).resolve())], cwd=PROJECT,
                          env=script_environment(), capture_output=True, text=True, timeout=600)
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0 and "skipped" in summary and "failed" not in summary, done.stdout[-3000:]
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all(line.endswith("the optional [onnx] extra is not installed") for line in skips), skips


@pytest.mark.parametrize("options", [dict(method="sample"), dict(beam_size=0), dict(method="greedy", lm_order=2),
                                     dict(method="beam", lm_order=-1), dict(method="beam", lm_weight=-0.5)])
def test_bad_decoding_options_are_config_errors(options):
    with pytest.raises(ConfigError):
        DecodingOptions(**options)


@pytest.mark.parametrize("script", ["infer", "eval", "serve"])
def test_every_cli_takes_the_shared_decoding_options(script, capsys):
    """The same options reach DecodingOptions in all three scripts: an LM without beam search is refused by each
    with the one message, before any model is loaded."""
    from paraformer_asr.cli import run_main

    code = run_main(load_script(script).main, ["--checkpoint", "missing.pt", "--toy-split", "val", "--decode",
                                               "greedy", "--beam-size", "3", "--lm-order", "2", "--lm-weight", "0.5"]
                    if script == "infer" else ["--checkpoint", "missing.pt", "--decode", "greedy", "--beam-size",
                                               "3", "--lm-order", "2", "--lm-weight", "0.5"])
    assert code == 2 and "an LM needs --decode beam" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------------
# Exported toy checkpoints (slow: training, tracing, onnxruntime sessions)


def _train_toy(folder, kind: str):
    """kind: paraformer (the CIF, with a CTC head), paraformer_fsmn (the same with FSMN decoder blocks),
    paraformer_ctc (the CTC token extractor) or transformer_ar (with a CTC head)."""
    from paraformer_asr.config import config_from_dict
    from paraformer_asr.training.launch import train

    raw = tiny_raw_config(str(folder))
    raw["model"]["type"] = "transformer_ar" if kind == "transformer_ar" else "paraformer"
    if kind in ("paraformer", "paraformer_fsmn", "transformer_ar"):
        raw["model"]["ctc_weight"] = 0.3
    if kind == "paraformer_fsmn":
        raw["model"]["decoder_fsmn_kernel"] = 3
    if kind == "paraformer_ctc":
        raw["model"].update(predictor="ctc", ctc_weight=0.5, predictor_bias=0)
    raw["train"]["epochs"] = 12 if kind == "paraformer_ctc" else 3  # the CTC head needs a few epochs to emit
    return train(config_from_dict(raw)) / "checkpoints" / "best.pt"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{kind: (checkpoint, fp32 export folder)} for a trained toy Paraformer (CIF, CIF with FSMN decoder blocks, CTC token
    extractor) and AR baseline (the AR one exported through scripts/export.py)."""
    if not HAS_ORT:
        pytest.skip("the optional [onnx] extra is not installed")
    from paraformer_asr.cli import run_main
    from paraformer_asr.deploy.export import export_checkpoint

    root = tmp_path_factory.mktemp("onnx")
    out = {}
    for kind in ("paraformer", "paraformer_fsmn", "paraformer_ctc", "transformer_ar"):
        checkpoint, folder = _train_toy(root / f"runs_{kind}", kind), root / f"export_{kind}"
        if kind != "transformer_ar":
            export_checkpoint(checkpoint, folder)
        else:
            assert run_main(load_script("export").main, ["--checkpoint", str(checkpoint.parents[1]), "--out",
                                                          str(folder)]) == 0
        assert sorted(path.name for path in folder.iterdir()) == sorted(
            ["export.json", *json.loads((folder / "export.json").read_text())["graphs"].values()])
        out[kind] = (checkpoint, folder)
    return out


def _both(exported, kind: str):
    from paraformer_asr.inference import evaluation_loader, load_model

    checkpoint, folder = exported[kind]
    torch_model, _ = load_model(checkpoint, "torch", "cpu", 1)
    onnx_model, _ = load_model(folder, "onnx", "cpu", 1)
    batch = next(iter(evaluation_loader(torch_model, "val", batch_size=16)))
    return torch_model, onnx_model, batch


@pytest.mark.slow
@needs_onnx
@pytest.mark.parametrize("kind, predictor", [("paraformer", "cif"), ("paraformer_fsmn", "cif"),
                                             ("paraformer_ctc", "ctc")])
def test_exported_paraformer_matches_pytorch(exported, kind, predictor, monkeypatch):
    from paraformer_asr.data.setup import training_transcripts
    from paraformer_asr.decode import paraformer_search
    from paraformer_asr.decode.phrases import PHRASE_REACH, PhraseCandidates, phrase_counts_in_reach

    torch_model, onnx_model, batch = _both(exported, kind)
    assert torch_model.cfg.model.predictor == predictor
    assert json.loads((exported[kind][1] / "export.json").read_text())["graphs"][f"predictor_{predictor}"]
    with torch.no_grad():
        logits, extraction = torch_model.model.forward(batch.features, batch.feat_mask)
    onnx_logits, onnx_extraction = onnx_model.model.forward(batch.features, batch.feat_mask)
    assert onnx_logits.shape == logits.shape and logits.shape[0] == 16 and logits.shape[1] > 0
    assert float((onnx_logits - logits).abs().max()) < LOGIT_TOLERANCE
    assert torch.equal(onnx_extraction.num_tokens, extraction.num_tokens)
    for expected, got in zip(torch_model.model.token_spans(extraction), onnx_model.model.token_spans(onnx_extraction)):
        assert torch.allclose(got, expected, atol=1e-4)  # token times, in encoder frames
    for method in ("greedy", "beam"):
        if method == "greedy":
            expected, got = (m.model.greedy_decode(batch.features, batch.feat_mask) for m in (torch_model, onnx_model))
        else:
            expected, got = (m.model.beam_search(batch.features, batch.feat_mask, 3)[::2]
                             for m in (torch_model, onnx_model))
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), method
    # length candidates run the extractor's parts (the CIF's alphas graph, or the ctc graph's log-probs) and the
    # decoder as separate graphs, the CTC score the ctc graph; phrase candidates read the same posteriors, and with
    # a reach of 1 the CIF decodes the listed lengths beyond the spread as extra rows
    assert "ctc" in onnx_model.model.graphs
    listed = PhraseCandidates.build(training_transcripts(torch_model.cfg), torch_model.tokenizer)
    if predictor == "cif":
        beyond = phrase_counts_in_reach(listed, extraction.num_tokens - torch_model.cfg.model.predictor_bias, 2, 1.0)
        assert beyond.shape[1] > 0  # the reach-1 case below has extra rows to decode
    for ctc_score_weight, phrases, reach in ((0.0, None, PHRASE_REACH), (0.5, None, PHRASE_REACH),
                                             (0.5, listed, PHRASE_REACH), (0.5, listed, 1.0)):
        monkeypatch.setattr(paraformer_search, "PHRASE_REACH", reach)
        expected, got = (m.model.decode_length_candidates(batch.features, batch.feat_mask, 2, 3,
                                                          ctc_score_weight=ctc_score_weight, phrases=phrases)
                         for m in (torch_model, onnx_model))
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
        assert torch.allclose(got[3], expected[3], atol=1e-4)  # the scores long-form decoding judges pauses by


@pytest.mark.slow
@needs_onnx
def test_exported_ar_baseline_matches_pytorch(exported):
    from paraformer_asr.deploy.runtime import load_exported_model

    two_threads = load_exported_model(exported["transformer_ar"][1], num_threads=2).model.graphs["decoder_step"]
    options = two_threads.session.get_session_options()
    assert options.intra_op_num_threads == 2 and options.get_session_config_entry(
        "session.intra_op.allow_spinning") == "0"  # idle threads sleep: no cores taken from other processes
    torch_model, onnx_model, batch = _both(exported, "transformer_ar")
    assert onnx_model.model.graphs["decoder_step"].session.get_session_options().intra_op_num_threads == 1
    with torch.no_grad():
        encoder_out, enc_mask = torch_model.model.encode(batch.features, batch.feat_mask)
    onnx_out, onnx_mask = onnx_model.model.encode(batch.features, batch.feat_mask)
    assert float((onnx_out - encoder_out).abs().max()) < LOGIT_TOLERANCE and torch.equal(onnx_mask, enc_mask)
    prefix = torch.full((16, 1), torch_model.tokenizer.bos_id)
    cache = onnx_cache = None
    for step in range(3):  # three cached steps: the log-probs of each agree
        with torch.no_grad():
            log_probs, cache = torch_model.model.decode_step(encoder_out, prefix, step, cache, enc_mask)
        onnx_log_probs, onnx_cache = onnx_model.model.decode_step(encoder_out, prefix, step, onnx_cache, enc_mask)
        assert float((onnx_log_probs - log_probs).abs().max()) < LOGIT_TOLERANCE
        prefix = torch.cat([prefix, log_probs.argmax(dim=-1, keepdim=True)], dim=1)
    with torch.no_grad():
        greedy = torch_model.model.greedy_decode(batch.features, batch.feat_mask)
        beam = torch_model.model.beam_search(batch.features, batch.feat_mask, 3)
    onnx_greedy = onnx_model.model.greedy_decode(batch.features, batch.feat_mask)
    onnx_beam = onnx_model.model.beam_search(batch.features, batch.feat_mask, 3)
    assert torch.equal(onnx_greedy[0], greedy[0]) and torch.equal(onnx_greedy[1], greedy[1])
    assert torch.equal(onnx_beam[0], beam[0]) and torch.equal(onnx_beam[2], beam[2])
    assert "ctc" in onnx_model.model.graphs  # the beams ranked again by the CTC head, as in PyTorch
    with torch.no_grad():
        rescored = torch_model.model.beam_search(batch.features, batch.feat_mask, 3, ctc_score_weight=0.5)
    onnx_rescored = onnx_model.model.beam_search(batch.features, batch.feat_mask, 3, ctc_score_weight=0.5)
    assert torch.equal(onnx_rescored[0], rescored[0]) and torch.equal(onnx_rescored[2], rescored[2])
    assert torch.allclose(onnx_rescored[1], rescored[1], atol=1e-4)


@pytest.mark.slow
@needs_onnx
def test_int8_export_quantizes_the_matmuls_and_decodes(exported, tmp_path):
    import onnx

    from paraformer_asr.deploy.export import export_checkpoint
    from paraformer_asr.inference import load_model

    checkpoint, fp32 = exported["paraformer"]
    folder = export_checkpoint(checkpoint, tmp_path / "int8", quantize="int8").parent
    sidecar = json.loads((folder / "export.json").read_text())
    assert sidecar["precision"] == "int8" and sidecar["graphs"]["decoder"] == "decoder.int8.onnx"
    assert sidecar["graphs"]["predictor_cif"] == "predictor_cif.onnx"  # the running sums stay in float
    ops = {node.op_type for node in onnx.load(str(folder / "encoder.int8.onnx")).graph.node}
    assert "MatMulInteger" in ops and "Conv" in ops and "ConvInteger" not in ops  # the subsampling convs stay float
    loaded, _ = load_model(folder, "onnx", "cpu", 1)
    reference, _ = load_model(checkpoint, "torch", "cpu", 1)
    from paraformer_asr.inference import evaluation_loader

    batch = next(iter(evaluation_loader(reference, "val", batch_size=16)))
    tokens, lengths = loaded.model.greedy_decode(batch.features, batch.feat_mask)
    assert tokens.shape[0] == 16 and lengths.shape == (16,)


@pytest.mark.slow
@needs_onnx
def test_cli_outputs_are_the_same_with_either_backend(exported, tmp_path, capsys):
    from paraformer_asr.cli import run_main

    infer, evaluate = load_script("infer"), load_script("eval")
    checkpoint, folder = exported["paraformer"]
    outputs = {}
    for backend, source in (("torch", checkpoint), ("onnx", folder)):
        common = ["--backend", backend, "--checkpoint", str(source), "--decode", "beam", "--beam-size", "3"]
        assert run_main(infer.main, common + ["--toy-split", "val", "--toy-count", "6", "--timestamps"]) == 0
        printed = capsys.readouterr().out
        predictions = tmp_path / f"{backend}.jsonl"
        assert run_main(evaluate.main, common + ["--lm-order", "2", "--save-predictions", str(predictions)]) == 0
        scores = json.loads(capsys.readouterr().out)
        outputs[backend] = (printed, predictions.read_text(), scores["cer"], scores["lm_order"])
    assert outputs["onnx"] == outputs["torch"]
    assert len(outputs["onnx"][0].splitlines()) == 6 and outputs["onnx"][3] == 2


def _export_copy(folder, tmp_path, name: str):
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


@pytest.mark.slow
@needs_onnx
def test_bad_export_folders_are_named_errors(exported, tmp_path, capsys):
    import onnx

    from paraformer_asr.cli import run_main
    from paraformer_asr.deploy.runtime import load_exported_model

    folder = exported["paraformer"][1]
    no_sidecar = _export_copy(folder, tmp_path, "no_sidecar")
    (no_sidecar / "export.json").unlink()
    other_kind = _export_copy(folder, tmp_path, "other_kind")
    shutil.copyfile(exported["transformer_ar"][1] / "encoder.onnx", other_kind / "encoder.onnx")
    old_opset = _export_copy(folder, tmp_path, "old_opset")
    graph = onnx.load(str(old_opset / "decoder.onnx"))
    graph.opset_import[0].version = 13
    onnx.save(graph, str(old_opset / "decoder.onnx"))
    sidecar_opset = _export_copy(folder, tmp_path, "sidecar_opset")
    sidecar = json.loads((sidecar_opset / "export.json").read_text())
    (sidecar_opset / "export.json").write_text(json.dumps({**sidecar, "opset": 99}))
    missing_graph = _export_copy(folder, tmp_path, "missing_graph")
    (missing_graph / "predictor_cif.onnx").unlink()
    cases = [(no_sidecar, r"no_sidecar/export.json is missing"),
             (other_kind, r"other_kind/encoder.onnx is the 'encoder' graph of a 'transformer_ar' model"),
             (old_opset, r"old_opset/decoder.onnx uses opset 13"),
             (sidecar_opset, r"sidecar_opset/export.json: opset 99"),
             (missing_graph, r"missing_graph/predictor_cif.onnx is missing"),
             (exported["paraformer"][0], r"is not an export folder")]
    infer = load_script("infer")
    for path, message in cases:
        with pytest.raises(CheckpointError, match=message):
            load_exported_model(path)
        assert run_main(infer.main, ["--backend", "onnx", "--checkpoint", str(path), "--toy-split", "val"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err


@pytest.mark.slow
@needs_onnx
def test_service_with_the_onnx_backend_answers_as_torch(tone_checkpoint, tmp_path):
    """The service over an export folder answers as over the checkpoint, with the decoding options it was given."""
    import http.client

    pytest.importorskip("fastapi", reason="the ASR service needs the optional 'serve' extra")
    from paraformer_asr.data.audio import write_audio
    from paraformer_asr.deploy.export import export_checkpoint
    from paraformer_asr.inference import load_model
    from paraformer_asr.serving.app import create_app
    from paraformer_asr_tools.benchmarks.service_load import loopback_address, multipart_body, request_json
    from paraformer_asr.serving.settings import ServeSettings

    from asr_helpers import served, speech_like

    folder = export_checkpoint(tone_checkpoint, tmp_path / "tones").parent
    write_audio(tmp_path / "a.wav", speech_like(1.5, 77), 16000)
    body, content_type = multipart_body((tmp_path / "a.wav").read_bytes())
    settings = ServeSettings(decoding=DecodingOptions(method="beam", beam_size=3))
    answers = {}
    for backend, source in (("torch", tone_checkpoint), ("onnx", folder)):
        loaded, _ = load_model(source, backend, "cpu", 1)
        with served(create_app(loaded, settings)) as url:
            connection = http.client.HTTPConnection(*loopback_address(url), timeout=60)
            _, health = request_json(connection, "GET", "/health")
            status, answer = request_json(connection, "POST", "/transcribe", body, content_type)
            connection.close()
        assert status == 200 and health["limits"]["decoding"]["method"] == "beam"
        answers[backend] = (answer["text"], answer["words"])
    assert answers["onnx"] == answers["torch"]
