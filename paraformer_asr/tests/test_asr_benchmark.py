"""scripts/benchmark.py: the CIF comparison and the side-by-side decoding benchmark of two models."""

import json

import pytest

from paraformer_asr.cli import run_main
from paraformer_asr.config import config_from_dict
from paraformer_asr.training.loop import train

from asr_helpers import load_script, tiny_raw_config


def test_cif_benchmark_reports_speedup_and_agreement(tmp_path, capsys):
    out = tmp_path / "cif.json"
    args = ["--batch", "2", "--frames", "40", "--dim", "8", "--repeats", "1", "--loop-repeats", "1", "--out", str(out)]
    assert run_main(load_script("benchmark").main, args) == 0
    cif = json.loads(out.read_text())["cif"]
    assert cif["batch"] == 2 and cif["speedup"] > 0 and cif["max_abs_diff"] < 1e-5


@pytest.mark.slow
def test_model_comparison_covers_every_model_method_and_batch_size(tmp_path, capsys):
    runs = []
    for model_type in ("paraformer", "transformer_ar"):
        raw = tiny_raw_config(str(tmp_path / "runs"))
        raw["run"]["name"] = model_type
        raw["model"]["type"] = model_type
        raw["train"].update({"epochs": 1, "max_steps": 2, "plot_utterances": 0})
        runs.append(str(train(config_from_dict(raw))))
    out, table = tmp_path / "bench.json", tmp_path / "bench.md"
    args = ["--skip-cif", "--checkpoints", *runs, "--max-utterances", "4", "--batch-sizes", "1", "2",
            "--beam-size", "2", "--rounds", "3", "--out", str(out), "--table", str(table)]
    assert run_main(load_script("benchmark").main, args) == 0
    result = json.loads(out.read_text())
    rows = result["decoding"]
    assert [(r["model_type"], r["method"], r["batch_size"]) for r in rows] == [
        (m, method, size) for m in ("paraformer", "transformer_ar") for size in (1, 2) for method in ("greedy", "beam")]
    assert all(r["num_utterances"] == 4 and r["latency_ms_per_utterance"] > 0 for r in rows)
    for r in rows:  # the reported round is the median of the three
        assert r["rounds"] == 3 and sorted(r["round_latencies_ms"])[1] == r["latency_ms_per_utterance"]
    assert all(r["reference_tokens_per_utterance"] == rows[0]["reference_tokens_per_utterance"] > 0 for r in rows)
    greedy = {r["checkpoint"]: r["latency_ms_per_utterance"] for r in rows
              if r["method"] == "greedy" and r["batch_size"] == 1}
    assert len(greedy) == 2  # each model's speed-up: the slowest batch-1 greedy latency over its own
    assert result["greedy_speedup_batch1_vs_slowest"] == {c: max(greedy.values()) / ms for c, ms in greedy.items()}
    assert result["device"] == "cpu" and result["device_name"] and all(r["device"] == "cpu" for r in rows)
    assert len(table.read_text().splitlines()) == 2 + len(rows)


def test_bad_benchmark_arguments_exit_2_with_a_message(capsys):
    import torch

    script = load_script("benchmark")
    assert run_main(script.main, ["--skip-cif", "--rounds", "0"]) == 2
    assert "--rounds must be >= 1" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert run_main(script.main, ["--skip-cif", "--device", "cuda", "--checkpoints", "missing"]) == 2
        assert "--device cuda: no CUDA device is available" in capsys.readouterr().err
