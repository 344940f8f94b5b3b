"""scripts/benchmark.py: the CIF comparison and the side-by-side decoding benchmark of two models."""

import json
import re

import pytest

from paraformer_asr.cli import run_main
from paraformer_asr.config import config_from_dict
from paraformer_asr.training.launch import train

from asr_helpers import load_script, tiny_raw_config


def test_cif_benchmark_reports_speedup_and_agreement(tmp_path, capsys):
    out = tmp_path / "cif.json"
    args = ["--batch", "2", "--frames", "40", "--dim", "8", "--repeats", "1", "--loop-repeats", "1", "--out", str(out)]
    assert run_main(load_script("benchmark").main, args) == 0
    cif = json.loads(out.read_text())["cif"]
    assert (cif["batch"], cif["frames"], cif["dim"]) == (2, 40, 8) and cif["max_abs_diff"] < 1e-5
    assert cif["vectorised_ms"] > 0 and cif["loop_ms"] > 0
    assert cif["speedup"] == pytest.approx(cif["loop_ms"] / cif["vectorised_ms"])  # the two times it measured


@pytest.mark.slow
def test_model_comparison_covers_every_model_method_and_batch_size(tmp_path, capsys):
    runs = []
    for model_type in ("paraformer", "transformer_ar"):
        raw = tiny_raw_config(str(tmp_path / "runs"))
        raw["run"]["name"] = model_type
        raw["model"]["type"] = model_type
        raw["train"].update({"epochs": 1, "max_steps": 2, "plot_utterances": 0})
        if model_type == "paraformer":  # the decoding its config ships: a row of its own with --config-decoding
            raw["decode"] = {"method": "beam", "beam_size": 3, "lm_order": 2, "lm_weight": 0.5, "length_candidates": 1}
        runs.append(str(train(config_from_dict(raw))))
    out, table = tmp_path / "bench.json", tmp_path / "bench.md"
    args = ["--skip-cif", "--checkpoints", *runs, "--max-utterances", "4", "--batch-sizes", "1", "2",
            "--beam-size", "2", "--rounds", "3", "--config-decoding", "--out", str(out), "--table", str(table)]
    assert run_main(load_script("benchmark").main, args) == 0
    result = json.loads(out.read_text())
    shipped = [r for r in result["decoding"] if r["config_decoding"]]
    assert [(r["model_type"], r["method"], r["beam_size"], r["lm_order"], r["length_candidates"]) for r in shipped] \
        == [("paraformer", "beam", 3, 2, 1)] * 2 + [("transformer_ar", "greedy", 1, 0, 0)] * 2
    assert "| config: beam 3 + LM 2 (0.5), length candidates 1 |" in table.read_text()
    rows = [r for r in result["decoding"] if not r["config_decoding"]]
    assert [(r["model_type"], r["method"], r["batch_size"]) for r in rows] == [
        (m, method, size) for m in ("paraformer", "transformer_ar") for size in (1, 2) for method in ("greedy", "beam")]
    assert all(r["num_utterances"] == 4 and r["latency_ms_per_utterance"] > 0 for r in rows)
    for r in rows:  # the reported round is the median of the three
        assert r["rounds"] == 3 and sorted(r["round_latencies_ms"])[1] == r["latency_ms_per_utterance"]
    assert all(r["reference_tokens_per_utterance"] == rows[0]["reference_tokens_per_utterance"] > 0 for r in rows)
    runs_by_type = {r["model_type"]: r["checkpoint"] for r in rows}
    greedy = {r["checkpoint"]: r["latency_ms_per_utterance"] for r in rows
              if r["method"] == "greedy" and r["batch_size"] == 1}
    assert len(greedy) == 2  # each model's speed-up: the slowest batch-1 greedy latency over its own
    assert result["greedy_speedup_batch1_vs_slowest"] == {c: max(greedy.values()) / ms for c, ms in greedy.items()}
    assert result["device"] == "cpu" and result["device_name"] and all(r["device"] == "cpu" for r in rows)
    assert all(r["units"] == "characters" for r in rows)
    pairs = result["greedy_speedup_batch1_paraformer_vs_ar"]
    assert [(p["paraformer"], p["ar"], p["same_units"]) for p in pairs] == [(runs_by_type["paraformer"],
                                                                            runs_by_type["transformer_ar"], True)]
    assert pairs[0]["speedup"] == pytest.approx(greedy[pairs[0]["ar"]] / greedy[pairs[0]["paraformer"]])
    lines = table.read_text().splitlines()
    shipped_pairs = result["shipped_speedup_batch1_paraformer_vs_ar"]
    assert len(shipped_pairs) == 1 and shipped_pairs[0]["paraformer_decoder_passes"] == 3  # candidates +-1
    shipped_ms = {r["model_type"]: r["latency_ms_per_utterance"] for r in shipped if r["batch_size"] == 1}
    assert shipped_pairs[0]["speedup"] == pytest.approx(shipped_ms["transformer_ar"] / shipped_ms["paraformer"])
    assert len(lines) == 2 + len(result["decoding"]) + 1 + 2 + len(pairs) + 1 + 2 + len(shipped_pairs)
    assert re.fullmatch(r"\| \w+_paraformer \(characters\) \| \w+_transformer_ar \(characters\) \| PyTorch \| yes \| "
                        r"[\d.]+x \| [\d.]+x \|", lines[-5])
    assert re.fullmatch(r"\| \w+_paraformer: config: beam 3 \+ LM 2 \(0.5\), length candidates 1 \(3\) \| "
                        r"\w+_transformer_ar: config: greedy \| PyTorch \| yes \| [\d.]+x \|", lines[-1])
    for r in result["decoding"]:  # the decoder runs once per Paraformer candidate, once per AR output step
        if r["model_type"] == "paraformer":
            assert r["decoder_passes_per_utterance"] == 1 + 2 * r["length_candidates"]
        else:
            assert r["decoder_passes_per_utterance"] >= 1
    for r in rows:  # the encoder alone is timed on greedy rows
        assert (r["encoder_ms_per_utterance"] is None) == (r["method"] == "beam")
    paraformer = next(r for r in rows if r["model_type"] == "paraformer" and r["method"] == "greedy"
                      and r["batch_size"] == 1)
    assert pairs[0]["encoder_bound"] == pytest.approx(greedy[pairs[0]["ar"]] / paraformer["encoder_ms_per_utterance"])


def test_rows_are_labelled_with_their_units_and_pairs_compare_paraformers_with_ar_models():
    from paraformer_asr_tools.benchmarks.decoding import paraformer_speedups, units_name
    from paraformer_asr.data.tokenizer import CharTokenizer

    assert units_name(CharTokenizer.build(["ab c"])) == "characters"

    def row(model_type, units, ms, method="greedy", batch=1, backend="torch", config=False):
        return {"model_type": model_type, "checkpoint": f"{model_type}-{units}", "name": units, "units": units, "method": method,
                "batch_size": batch, "latency_ms_per_utterance": ms, "backend": backend, "precision": "fp32",
                "config_decoding": config}

    rows = [row("paraformer", "BPE 64", 10.0), row("paraformer", "BPE 64", 5.0, batch=16),
            row("transformer_ar", "characters", 300.0), row("transformer_ar", "BPE 64", 120.0),
            row("transformer_ar", "BPE 64", 200.0, method="beam"),
            row("transformer_ar", "BPE 64", 50.0, backend="onnx"),
            row("paraformer", "BPE 64", 1.0, config=True)]  # a config's decoding is not in the greedy pairing
    assert [(p["ar_units"], p["same_units"], p["speedup"]) for p in paraformer_speedups(rows)] == [
        ("characters", False, 30.0), ("BPE 64", True, 12.0)]  # the onnxruntime AR pairs with no PyTorch Paraformer
    assert paraformer_speedups(rows[2:]) == []  # no Paraformer, no pair


def test_bad_benchmark_arguments_exit_2_with_a_message(capsys):
    import torch

    script = load_script("benchmark")
    assert run_main(script.main, ["--skip-cif", "--rounds", "0"]) == 2
    assert "--rounds must be >= 1" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert run_main(script.main, ["--skip-cif", "--device", "cuda", "--checkpoints", "missing"]) == 2
        assert "--device cuda: no CUDA device is available" in capsys.readouterr().err


def test_decoding_labels_name_the_ctc_score_and_the_phrases_for_candidates_and_for_beams():
    from paraformer_asr_tools.benchmarks.decoding import decoding_label

    row = {"method": "beam", "beam_size": 4, "lm_order": 0, "lm_weight": 0.0, "length_candidates": 0,
           "count_prior": 0.0, "ctc_score_weight": 0.3, "config_decoding": True}
    assert decoding_label(row) == "config: beam 4 + CTC score (0.3)"
    row.update(lm_order=6, lm_weight=1.0, length_candidates=3, ctc_score_weight=0.5, config_decoding=False)
    assert decoding_label(row) == "beam 4 + LM 6 (1), length candidates 3 + CTC score (0.5)"
    assert decoding_label({**row, "ctc_score_weight": 0.0}) == "beam 4 + LM 6 (1), length candidates 3"
    assert decoding_label({**row, "phrase_candidates": 99}) == ("beam 4 + LM 6 (1), length candidates 3 + CTC score "
                                                                "(0.5) + 99 phrases")


def test_rows_name_a_run_by_its_folder_and_a_loose_checkpoint_by_its_file():
    from paraformer_asr_tools.benchmarks.decoding import run_name

    assert run_name("/runs/20261125_073255_P/checkpoints/best.pt") == "20261125_073255_P"
    assert run_name("/work/exp/tuned.pt") == "tuned.pt"
