"""scripts/benchmark.py: both modes write the promised JSON, its figures consistent with the inputs and with each other
(bad counts: the table in test_seg_bad_input.py; the deploy mode's agreement figures: test_seg_onnx.py)."""

import json

import pytest

from unet_transformer_seg.benchmarking import TRAIN_VARIANTS
from unet_transformer_seg.config import load_config
from unet_transformer_seg.models import build_model

from seg_helpers import PROJECT_DIR, finish_script, run_script_in_process, start_script

TINY_SETTINGS = ["model.base_channels=4", "model.depth=2", "model.num_heads=2", "model.transformer_layers=1",
                 "run.num_threads=1"]
TINY = ["--image-size", "16"] + [arg for setting in TINY_SETTINGS for arg in ("--set", setting)]


def _parameters(*overrides: str) -> int:
    cfg = load_config(PROJECT_DIR / "configs" / "quick.yaml", ["data.image_size=16", *TINY_SETTINGS, *overrides])
    return sum(p.numel() for p in build_model(cfg).parameters())


def _check_rounds(measured, rounds: int) -> None:
    """The median over `rounds` rounds, each listed; memory figures present and ordered."""
    assert len(measured["images_per_s_all_rounds"]) == rounds
    assert measured["images_per_s"] == pytest.approx(sorted(measured["images_per_s_all_rounds"])[rounds // 2],
                                                     abs=1e-4)
    assert measured["device"] == "cpu" and measured["threads"] == 1
    assert measured["peak_rss_mib"] > 0 and 0 <= measured["rss_growth_mib"] <= measured["peak_rss_mib"]


@pytest.fixture(scope="module")
def train_mode_run(tmp_path_factory):
    """The train-mode benchmark as a separate process, started in the background so that it overlaps with the
    eval-mode test (both measure one variant at a time, in one spawned process each: one core each)."""
    out = tmp_path_factory.mktemp("train") / "train.json"
    process = start_script("benchmark.py", "--config", "configs/quick.yaml", *TINY, "--batch-size", "2", "--steps",
                           "1", "--warmup", "0", "--rounds", "1", "--out", str(out))
    yield process, out
    if process.poll() is None:
        process.kill()
        process.communicate()


@pytest.mark.slow
@pytest.mark.usefixtures("train_mode_run")  # starts the train-mode run, to run alongside this one
def test_eval_mode_reports_tiled_and_whole_image_throughput_and_memory(tmp_path):
    out = tmp_path / "eval.json"
    # In this process (benchmark.py runs as a separate process in the train-mode run); each measurement still runs
    # in a freshly spawned process, as the memory figures need.
    result = run_script_in_process("benchmark.py", "--mode", "eval", "--config", "configs/quick.yaml", *TINY,
                                   "--eval-sizes", "32", "48", "--images", "1", "--rounds", "1", "--tile-batch", "4",
                                   "--variants", "unet_tiled", "unet_full_image", "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())
    assert summary["mode"] == "eval" and set(summary["image_sizes"]) == {"32", "48"}
    assert (summary["images"], summary["tile_batch"], summary["rounds"], summary["image_size"]) == (1, 4, 1, 16)
    unet_parameters = _parameters("model.type=unet")
    for size in ("32", "48"):
        assert set(summary["image_sizes"][size]) == {"unet_tiled", "unet_full_image"}
        for variant in ("unet_tiled", "unet_full_image"):
            measured = summary["image_sizes"][size][variant]
            _check_rounds(measured, 1)
            assert measured["parameters"] == unet_parameters


@pytest.mark.slow
def test_train_mode_reports_every_model(train_mode_run):
    process, out = train_mode_run
    result = finish_script(process)
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())
    assert (summary["batch_size"], summary["steps"], summary["rounds"], summary["image_size"]) == (2, 1, 1, 16)
    models = summary["models"]
    assert set(models) == set(TRAIN_VARIANTS)
    for name, variant in TRAIN_VARIANTS.items():
        _check_rounds(models[name], 1)
        assert models[name]["parameters"] == _parameters(*variant)
    assert models["unet_transformer_sdpa"]["parameters"] == models["unet_transformer_explicit"]["parameters"]
    assert models["unet"]["parameters"] < models["unet_transformer_sdpa"]["parameters"]
    assert summary["sdpa_over_explicit_throughput"] == pytest.approx(
        models["unet_transformer_sdpa"]["images_per_s"] / models["unet_transformer_explicit"]["images_per_s"])
