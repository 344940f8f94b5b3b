"""Sliding-window inference: window layout, vectorised extraction and blending against plain references, tiles
against the whole image, flip TTA, and native-size prediction in batches and one at a time."""

import copy
import json
import runpy
import sys
from pathlib import Path

import pytest
import torch

from unet_transformer_seg.checkpointing import save_checkpoint
from unet_transformer_seg.config import config_to_dict, load_config
from unet_transformer_seg.errors import ShapeError
from unet_transformer_seg.inference import InferenceOptions, Segmenter, flip_tta_logits
from unet_transformer_seg.labels import logits_to_labels
from unet_transformer_seg.models import UNet, build_model
from unet_transformer_seg.tiling import (
    extract_windows, gaussian_importance, padded_size, sliding_window_logits, window_grid, window_starts,
    window_step,
)

from seg_helpers import SCRIPTS_DIR
from seg_reference import blend_reference, windows_reference


def test_window_layout_hand_computed():
    assert window_starts(64, 64, 48) == [0]
    assert window_starts(100, 64, 48) == [0, 36]
    assert window_starts(200, 96, 72) == [0, 72, 104]
    assert window_step(64, 0.25, 8) == 48 and window_step(64, 0.9, 8) == 8 and window_step(96, 0.25, 4) == 72
    assert padded_size(50, 97, 64, 8) == (64, 104)
    importance = gaussian_importance(64)
    assert importance.shape == (64, 64) and float(importance.max()) == pytest.approx(1.0, abs=0.01)
    assert float(importance.min()) == pytest.approx(1e-3)  # MONAI's floor at the corners
    assert torch.equal(importance, importance.flip(0)) and torch.equal(importance, importance.T)


def test_vectorised_window_extraction_matches_slicing():
    image = torch.randn(3, 37, 53)
    tops, lefts = window_grid(37, 53, 16, 12)
    assert torch.equal(extract_windows(image, tops, lefts, 16), windows_reference(image, tops, lefts, 16))


def test_blending_matches_the_window_by_window_reference():
    torch.manual_seed(0)
    image = torch.randn(1, 2, 40, 56)
    outputs = []

    def predict(windows):  # a different answer per window, remembered for the reference
        result = torch.randn(windows.shape[0], 3, 16, 16)
        outputs.append(result)
        return result

    blended = sliding_window_logits(predict, image, window=16, overlap=0.5, tile_batch=5, alignment=4)
    tops, lefts = window_grid(40, 56, 16, window_step(16, 0.5, 4))
    expected = blend_reference(torch.cat(outputs), tops.tolist(), lefts.tolist(), gaussian_importance(16), 40, 56)
    assert blended.shape == (1, 3, 40, 56)
    assert torch.allclose(blended[0], expected, atol=1e-5)


def _receptive_radius(model: UNet, size: int = 96) -> int:
    """How far an output pixel sees: gradient support of one output pixel in a copy with positive weights and
    average pooling (so no ReLU or max-pool hides an input that can matter)."""
    probe = copy.deepcopy(model).eval()
    probe.pool = torch.nn.AvgPool2d(2)
    with torch.no_grad():
        for param in probe.parameters():
            param.abs_()
    image = torch.rand(1, model.in_channels, size, size, requires_grad=True)
    output = probe(image)
    radius = 0
    for phase in range(2**model.depth):  # every position relative to the pooling grid
        centre = size // 2 + phase
        gradient, = torch.autograd.grad(output[0, 0, centre, centre], image, retain_graph=True)
        rows, cols = (gradient.abs().sum(1)[0] > 0).nonzero(as_tuple=True)
        radius = max(radius, int((rows - centre).abs().max()), int((cols - centre).abs().max()))
    return radius


def _safe_pixels(height, width, window, tops, lefts, radius):
    """Pixels that every covering window sees with its whole receptive field (window edges inside the image are
    at least `radius` + 1 away)."""
    safe = torch.ones(height, width, dtype=torch.bool)
    rows, cols = torch.arange(height)[:, None], torch.arange(width)[None, :]
    for top, left in zip(tops.tolist(), lefts.tolist()):
        covered = (rows >= top) & (rows < top + window) & (cols >= left) & (cols < left + window)
        near_edge = torch.zeros(height, width, dtype=torch.bool)
        if top > 0:
            near_edge |= rows - top <= radius
        if top + window < height:
            near_edge |= top + window - 1 - rows <= radius
        if left > 0:
            near_edge |= cols - left <= radius
        if left + window < width:
            near_edge |= left + window - 1 - cols <= radius
        safe &= ~(covered & near_edge)
    return safe


def test_tiles_match_the_whole_image_away_from_window_borders():
    torch.manual_seed(0)
    model = UNet(3, 3, base_channels=4, depth=2).eval()
    radius = _receptive_radius(model)
    assert radius == 23  # 2 convs per level: 2 + 4 + 8 (bottleneck) + 4 + 2, plus pooling/upsampling offsets
    image = torch.randn(1, 3, 200, 168)  # multiples of 2**depth, so the whole image is a valid model input
    with torch.no_grad():
        whole = model(image)
        tiled = sliding_window_logits(model, image, window=96, overlap=0.25, tile_batch=4, alignment=4)
    tops, lefts = window_grid(200, 168, 96, window_step(96, 0.25, 4))
    assert len(tops) == 6
    safe = _safe_pixels(200, 168, 96, tops, lefts, radius)
    assert safe.float().mean() > 0.4
    assert torch.allclose(tiled[0][:, safe], whole[0][:, safe], atol=1e-5)
    assert torch.equal(logits_to_labels(tiled)[0][safe], logits_to_labels(whole)[0][safe])
    assert not torch.allclose(tiled[0][:, ~safe], whole[0][:, ~safe], atol=1e-5)  # the borders do differ


def _mirror_views(model, images, as_probabilities):
    """The four mirror images, one forward pass each, mapped back: identity, h-flip, v-flip, both."""
    return [as_probabilities(model(images)), as_probabilities(model(images.flip(-1))).flip(-1),
            as_probabilities(model(images.flip(-2))).flip(-2),
            as_probabilities(model(images.flip(-2).flip(-1))).flip(-1).flip(-2)]


def test_flip_tta_averages_probabilities_over_all_four_mirrors():
    torch.manual_seed(0)
    model = UNet(3, 3, base_channels=4, depth=2).eval()
    images = torch.randn(2, 3, 16, 24)
    with torch.no_grad():
        logits = flip_tta_logits(model, images)
        views = _mirror_views(model, images, lambda x: x.softmax(1))
    assert torch.allclose(logits.softmax(1), sum(views) / 4, atol=1e-6)
    assert not torch.allclose(logits.softmax(1), sum(views[:3]) / 3, atol=1e-4)  # the double flip counts
    binary = UNet(3, 1, base_channels=4, depth=2).eval()
    with torch.no_grad():
        logits = flip_tta_logits(binary, images)
        views = _mirror_views(binary, images, torch.sigmoid)
    assert torch.allclose(logits.sigmoid(), sum(views) / 4, atol=1e-6)


def test_the_training_geometry_decides_between_resizing_and_windows():
    cfg = load_config(None, ["data.image_size=16", "model.base_channels=4", "model.depth=2", "model.type=unet"])
    model = build_model(cfg).eval()
    for mode, resizes in (("resize", True), ("pad", False), ("random_crop", False)):
        cfg.data.resize_mode = mode
        assert Segmenter(model, cfg).resizes_input is resizes, mode


def test_a_resize_trained_model_refuses_images_not_resized_to_its_size():
    cfg = load_config(None, ["data.image_size=16", "model.base_channels=4", "model.depth=2", "model.type=unet"])
    segmenter = Segmenter(build_model(cfg).eval(), cfg)
    with pytest.raises(ShapeError, match=r"resized to 16 x 16, got \(64, 64\)"):
        next(segmenter.native_logits(torch.randn(1, 3, 64, 64), (64, 64)))  # would run it whole, at a scale unseen


@pytest.mark.parametrize("mode", ["resize", "pad", "random_crop"])
def test_native_logits_batched_equal_one_at_a_time(mode):
    torch.manual_seed(0)
    cfg = load_config(None, ["data.image_size=16", "model.base_channels=4", "model.depth=2", "model.type=unet",
                             f"data.resize_mode={mode}", "train.eval_batch_size=3"])
    segmenter = Segmenter(build_model(cfg).eval(), cfg, InferenceOptions(tile_batch=2))
    for size in ((8, 8), (30, 21)):
        images = torch.randn(3, 3, 16, 16) if segmenter.resizes_input else torch.randn(3, 3, *size)
        batched = list(segmenter.native_logits(images, size))
        assert [tuple(rows.indices(3)) for rows, _ in batched] == (
            [(0, 3, 1)] if size == (8, 8) else [(0, 1, 1), (1, 2, 1), (2, 3, 1)])  # together only when small
        together = torch.cat([logits for _, logits in batched])
        assert together.shape == (3, 4, *size)
        for index in range(3):
            (_, alone), = segmenter.native_logits(images[index : index + 1], size)
            assert torch.allclose(alone[0], together[index], atol=1e-5)


def test_segment_keeps_each_image_size_in_every_mode():
    cfg = load_config(None, ["data.image_size=16", "model.base_channels=4", "model.depth=2", "model.num_heads=2"])
    model = build_model(cfg).eval()
    for mode in ("resize", "pad", "random_crop"):
        cfg.data.resize_mode = mode
        for tta in ("none", "flip"):
            segmenter = Segmenter(model, cfg, InferenceOptions(tta=tta))
            for size in ((7, 40), (16, 16), (33, 18)):
                labels = segmenter.segment(torch.rand(3, *size))
                assert labels.shape == size and labels.dtype == torch.int64


def _run_tile_agreement(monkeypatch, capsys, *args: str):
    """scripts/tile_agreement.py in this process (real argv and exit status): (status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["tile_agreement.py", *args])
    with pytest.raises(SystemExit) as info:
        runpy.run_path(str(SCRIPTS_DIR / "tile_agreement.py"), run_name="__main__")
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def test_tile_agreement_script_reports_agreement_and_refuses_resize_models(tmp_path, monkeypatch, capsys):
    def checkpoint(mode: str, norm: str) -> Path:
        cfg = load_config(None, ["data.image_size=16", "model.base_channels=4", "model.depth=2", "model.type=unet",
                                 f"model.norm={norm}", f"data.resize_mode={mode}", "data.max_shapes=1"])
        torch.manual_seed(0)
        path = tmp_path / f"{mode}_{norm}.pt"
        save_checkpoint({"model": build_model(cfg).state_dict(), "config": config_to_dict(cfg)}, path)
        return path

    reports = {}
    for norm in ("batch", "group"):
        status, out, err = _run_tile_agreement(monkeypatch, capsys, "--checkpoint", str(checkpoint("pad", norm)),
                                               "--size", "48", "--images", "2", "--device", "cpu")
        assert status == 0, err
        reports[norm] = json.loads(out)
    assert reports["batch"]["label_agreement"] > 0.9  # exact away from window borders
    assert reports["group"]["max_abs_logit_difference"] > 1e-4  # GroupNorm: windows see other statistics
    assert 0.0 <= reports["group"]["label_agreement"] <= 1.0 and reports["group"]["images"] == 2
    status, _, err = _run_tile_agreement(monkeypatch, capsys, "--checkpoint", str(checkpoint("resize", "batch")))
    assert status == 2 and "data.resize_mode pad or random_crop" in err
