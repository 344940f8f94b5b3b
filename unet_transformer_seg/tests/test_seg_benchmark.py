"""scripts/benchmark.py: both modes write the promised JSON (bad counts: the table in test_seg_bad_input.py)."""

import json

import pytest

from seg_helpers import run_script

TINY = ["--image-size", "16", "--set", "model.base_channels=4", "--set", "model.depth=2", "--set",
        "model.num_heads=2", "--set", "model.transformer_layers=1"]


@pytest.mark.slow
def test_eval_mode_reports_tiled_and_whole_image_throughput_and_memory(tmp_path):
    out = tmp_path / "eval.json"
    result = run_script("benchmark.py", "--mode", "eval", "--config", "configs/quick.yaml", *TINY, "--eval-sizes",
                        "32", "48", "--images", "1", "--rounds", "1", "--tile-batch", "4", "--variants", "unet_tiled",
                        "unet_full_image", "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())
    assert summary["mode"] == "eval" and set(summary["image_sizes"]) == {"32", "48"}
    for size in ("32", "48"):
        for variant in ("unet_tiled", "unet_full_image"):
            measured = summary["image_sizes"][size][variant]
            assert measured["images_per_s"] > 0 and measured["peak_rss_mib"] > 0 and "rss_growth_mib" in measured


@pytest.mark.slow
def test_train_mode_reports_every_model(tmp_path):
    out = tmp_path / "train.json"
    result = run_script("benchmark.py", "--config", "configs/quick.yaml", *TINY, "--batch-size", "2", "--steps", "1",
                        "--warmup", "0", "--rounds", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())
    assert set(summary["models"]) == {"unet", "unet_transformer_explicit", "unet_transformer_sdpa"}
    assert summary["sdpa_over_explicit_throughput"] > 0

