"""ONNX export and the onnxruntime backend: label and logit parity with PyTorch (whole image and sliding windows, two
image sizes, flip TTA, an ensemble of graphs), int8, the CLIs with --backend onnx, thread count, and bad export
directories."""

import builtins
import json
import shutil

import pytest
import torch
import torch.nn.functional as F

from unet_transformer_seg.benchmarking import measure_deployed_quality
from unet_transformer_seg.checkpointing import save_checkpoint
from unet_transformer_seg.config import config_to_dict, load_config
from unet_transformer_seg.data.image_io import image_to_uint8, read_image, read_mask, write_png
from unet_transformer_seg.data.toy_shapes import ToyShapesDataset
from unet_transformer_seg.data.normalization import Normalization
from unet_transformer_seg.deployment import (
    GRAPH_NAME, SIDECAR_NAME, export_onnx, import_onnx, load_exported_model, load_model_for_inference,
)
from unet_transformer_seg.ensemble import EnsembleModel, load_ensemble
from unet_transformer_seg.errors import CheckpointError, MissingDependencyError, ShapeError
from unet_transformer_seg.inference import InferenceOptions, Segmenter
from unet_transformer_seg.labels import logits_to_labels
from unet_transformer_seg.losses import build_loss
from unet_transformer_seg.models import build_model
from unet_transformer_seg.training.evaluate import evaluate, evaluation_split

from seg_helpers import TINY_OVERRIDES, run_script, run_script_in_process

FP32_LOGIT_TOLERANCE = 1e-4  # largest |logit difference| onnxruntime fp32 vs PyTorch (measured: 1.5e-6 to 2.6e-6)
LABEL_AGREEMENT = 0.999
INT8_LABEL_AGREEMENT = 0.97  # int8 weights and activations: measured 0.990-0.998 on these tiny models
SIZES = ((16, 16), (40, 56))  # one training window; larger, not a window multiple, not square


def tiny_trained_checkpoint(path, model_type):
    """A tiny model trained 40 AdamW steps on toy shapes (so its labels are decided by margins, not ties), as a
    `pad` model: it predicts with sliding windows at native size."""
    torch.manual_seed(0)
    cfg = load_config(None, TINY_OVERRIDES + [f"model.type={model_type}", "data.test_size=6", "data.resize_mode=pad"])
    dataset = ToyShapesDataset(8, 16, seed=0, max_shapes=2)
    images = Normalization.from_config(cfg.data)(torch.stack([dataset[i][0] for i in range(8)]))
    masks = torch.stack([dataset[i][1] for i in range(8)])
    model, loss_fn = build_model(cfg), build_loss("ce_dice")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(40):
        optimizer.zero_grad()
        loss_fn(model(images), masks).backward()
        optimizer.step()
    save_checkpoint({"model": model.state_dict(), "config": config_to_dict(cfg)}, path)
    return path


MODEL_KINDS = ("unet", "unet_transformer")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """model kind -> (checkpoint, fp32 export dir, int8 export dir) of a tiny trained model."""
    pytest.importorskip("onnxruntime")
    result = {}
    for kind in MODEL_KINDS:
        root = tmp_path_factory.mktemp(kind)
        checkpoint = tiny_trained_checkpoint(root / "model.pt", kind)
        export_onnx(checkpoint, root / "fp32")
        export_onnx(checkpoint, root / "int8", quantize="int8")
        result[kind] = checkpoint, root / "fp32", root / "int8"
    return result


def toy_images(size, count=6):
    """count toy test images [count, 3, H, W] in [0, 1] of one size, and their masks."""
    dataset = ToyShapesDataset(count, 16, seed=1, split="test", max_shapes=2, sizes=[size])
    return torch.stack([dataset[i][0] for i in range(count)]), torch.stack([dataset[i][1] for i in range(count)])


def predictions(model, cfg, images, tiled, tta="none"):
    """logits [B, K, H, W] at the images' size: sliding windows through the Segmenter, or the whole image in one
    forward pass (padded to a multiple of 2**depth)."""
    inputs = Normalization.from_config(cfg.data)(images)
    size = tuple(images.shape[-2:])
    if tiled:
        segmenter = Segmenter(model, cfg, InferenceOptions(tile_batch=4, tta=tta))
        return torch.cat([logits for _, logits in segmenter.native_logits(inputs, size)])
    multiple = 2**cfg.model.depth
    padded = F.pad(inputs, (0, -size[1] % multiple, 0, -size[0] % multiple))
    with torch.no_grad():
        return model(padded)[:, :, : size[0], : size[1]]


@pytest.mark.slow
@pytest.mark.parametrize("kind", MODEL_KINDS)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("tiled", [True, False], ids=["tiled", "whole"])
def test_exported_graph_gives_the_pytorch_labels_and_logits(exports, kind, size, tiled):
    checkpoint, fp32_dir, int8_dir = exports[kind]
    torch_model, cfg = load_model_for_inference(checkpoint, "torch", 1)
    images, _ = toy_images(size)
    expected = predictions(torch_model, cfg, images, tiled)
    fp32 = predictions(load_exported_model(fp32_dir, 1)[0], cfg, images, tiled)
    int8 = predictions(load_exported_model(int8_dir, 1)[0], cfg, images, tiled)
    assert fp32.shape == expected.shape == (6, 4, *size)
    assert float((fp32 - expected).abs().max()) <= FP32_LOGIT_TOLERANCE
    labels = logits_to_labels(expected)
    assert float((logits_to_labels(fp32) == labels).float().mean()) >= LABEL_AGREEMENT
    assert float((logits_to_labels(int8) == labels).float().mean()) >= INT8_LABEL_AGREEMENT


@pytest.mark.slow
@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_flip_tta_and_batches_run_over_the_graph_as_over_pytorch(exports, kind):
    checkpoint, fp32_dir, _ = exports[kind]
    torch_model, cfg = load_model_for_inference(checkpoint, "torch", 1)
    onnx_model, onnx_cfg = load_exported_model(fp32_dir, 1)
    assert config_to_dict(onnx_cfg) == config_to_dict(cfg)  # the sidecar carries the whole config
    images, _ = toy_images((40, 56), count=2)
    expected = predictions(torch_model, cfg, images, tiled=True, tta="flip")
    assert torch.allclose(predictions(onnx_model, cfg, images, tiled=True, tta="flip"), expected,
                          atol=FP32_LOGIT_TOLERANCE)
    batch = torch.randn(3, 3, 24, 32)  # dynamic batch, height and width, away from the traced 1 x 16 x 16
    with torch.no_grad():
        assert torch.allclose(onnx_model(batch), torch_model(batch), atol=FP32_LOGIT_TOLERANCE)
    with pytest.raises(ShapeError, match="multiples of 2\\*\\*depth = 4"):
        onnx_model(torch.randn(1, 3, 18, 16))  # the same user error as the PyTorch model


@pytest.mark.slow
def test_an_ensemble_of_exported_graphs_predicts_as_the_ensemble_of_their_checkpoints(exports):
    checkpoints = [exports[kind][0] for kind in MODEL_KINDS]
    torch_ensemble, cfg = load_ensemble(checkpoints, "torch", 1, "cpu")
    onnx_ensemble, onnx_cfg = load_ensemble([exports[kind][1] for kind in MODEL_KINDS], "onnx", 1)
    assert isinstance(onnx_ensemble, EnsembleModel) and onnx_cfg.data == cfg.data  # the first member's data
    images, _ = toy_images((40, 56), count=2)
    expected = predictions(torch_ensemble, cfg, images, tiled=True, tta="flip")
    assert torch.allclose(predictions(onnx_ensemble, cfg, images, tiled=True, tta="flip"), expected,
                          atol=FP32_LOGIT_TOLERANCE)


@pytest.mark.slow
def test_sidecar_describes_the_graph_and_threads_reach_the_session(exports):
    _, fp32_dir, int8_dir = exports["unet_transformer"]
    assert json.loads((fp32_dir / SIDECAR_NAME).read_text())["model_kind"] == "unet_transformer"
    sidecar = json.loads((fp32_dir / SIDECAR_NAME).read_text())
    assert sidecar["precision"] == "fp32" and sidecar["opset"] == 17 and sidecar["multiple_of"] == 4
    assert sidecar["num_classes"] == 4 and sidecar["in_channels"] == 3 and sidecar["training_size"] == 16
    assert sidecar["normalisation"]["mean"] == 0.5 and len(sidecar["class_colours"]) == 4
    assert sidecar["class_names"] == ["background", "circle", "square", "triangle"]
    assert sidecar["check"]["max_abs_logit_difference"] <= FP32_LOGIT_TOLERANCE
    assert json.loads((int8_dir / SIDECAR_NAME).read_text())["precision"] == "int8"
    with pytest.raises(CheckpointError, match="is an ONNX export directory; run it with --backend onnx"):
        load_model_for_inference(fp32_dir, "torch")
    model, _ = load_exported_model(fp32_dir, num_threads=2)
    options = model.session.get_session_options()
    assert options.intra_op_num_threads == 2 and options.get_session_config_entry(
        "session.intra_op.allow_spinning") == "0"  # idle threads sleep: no cores taken from other processes
    assert torch.get_num_threads() >= 1
    model, _ = load_model_for_inference(fp32_dir, "onnx", 1)
    assert model.session.get_session_options().intra_op_num_threads == 1 and torch.get_num_threads() == 1


@pytest.mark.slow
def test_cli_predict_and_eval_with_the_onnx_backend_match_torch(exports, tmp_path):
    checkpoint = exports["unet_transformer"][0]
    # export.py as a separate process; predict.py and eval.py run as processes in test_seg_training.py, so their
    # --backend onnx runs go in this process.
    export = run_script("export.py", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "export"))
    assert export.returncode == 0, export.stderr
    assert json.loads(export.stdout)["check"]["max_abs_logit_difference"] <= FP32_LOGIT_TOLERANCE
    images, _ = toy_images((40, 56), count=2)
    paths = []
    for index, image in enumerate(images):
        paths.append(tmp_path / f"image{index}.png")
        write_png(paths[-1], image_to_uint8(image))
    predicted = run_script_in_process("predict.py", "--backend", "onnx", "--checkpoint", str(tmp_path / "export"),
                                      *map(str, paths), "--out-dir", str(tmp_path / "onnx"), "--tta", "flip")
    assert predicted.returncode == 0, predicted.stderr
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == [
        "image0_mask.png", "image0_overlay.png", "image1_mask.png", "image1_overlay.png"]
    torch_model, cfg = load_model_for_inference(checkpoint, "torch", 1)
    segmenter = Segmenter(torch_model, cfg, InferenceOptions(tta="flip"))
    for path in paths:
        expected = segmenter.segment(read_image(path, 3))  # [H, W]
        written = read_mask(tmp_path / "onnx" / f"{path.stem}_mask.png", 4)
        assert float((written == expected).float().mean()) >= LABEL_AGREEMENT
    evaluated = run_script_in_process("eval.py", "--backend", "onnx", "--checkpoint", str(tmp_path / "export"),
                                      "--split", "test", "--threads", "1", "--out", str(tmp_path / "metrics.json"))
    assert evaluated.returncode == 0, evaluated.stderr
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    dataset = evaluation_split(cfg, "test")
    expected_scores = evaluate(torch_model, dataset, cfg).scores
    assert metrics["num_images"] == expected_scores["num_images"] == 6
    for key in ("mean_dice", "mean_iou", "pixel_accuracy", "loss"):
        assert metrics[key] == pytest.approx(expected_scores[key], abs=1e-4), key


@pytest.mark.slow
def test_deployed_quality_reports_the_dice_change_against_torch(exports):
    checkpoint, fp32_dir, int8_dir = exports["unet"]
    report = measure_deployed_quality({"torch": str(checkpoint), "onnx_fp32": str(fp32_dir),
                                       "onnx_int8": str(int8_dir)}, "test", 1)
    assert report["torch"]["mean_dice_change"] == 0.0 and report["torch"]["label_agreement_with_torch"] == 1.0
    assert abs(report["onnx_fp32"]["mean_dice_change"]) <= 1e-6
    assert report["onnx_fp32"]["label_agreement_with_torch"] >= LABEL_AGREEMENT
    int8 = report["onnx_int8"]
    assert int8["mean_dice_change"] == pytest.approx(int8["mean_dice"] - report["torch"]["mean_dice"])
    assert INT8_LABEL_AGREEMENT <= int8["label_agreement_with_torch"] <= 1.0


def damage(export_dir, broken, how, other_kind_dir):
    """A copy of export_dir at `broken`, damaged one way; returns the file the error must name."""
    shutil.copytree(export_dir, broken)
    sidecar_path, graph_path = broken / SIDECAR_NAME, broken / GRAPH_NAME
    sidecar = json.loads(sidecar_path.read_text())
    if how == "other_kind":
        shutil.copy(other_kind_dir / GRAPH_NAME, graph_path)
    elif how == "opset":
        sidecar["opset"] = 13
    elif how == "channels":
        sidecar["config"]["data"]["in_channels"] = sidecar["in_channels"] = 1
    elif how == "corrupt_graph":
        graph_path.write_bytes(graph_path.read_bytes()[:500])
    elif how == "missing_graph":
        graph_path.unlink()
    sidecar_path.write_text(json.dumps(sidecar))
    return graph_path


@pytest.mark.slow
@pytest.mark.parametrize("kind", MODEL_KINDS)
@pytest.mark.parametrize("how", ["other_kind", "opset", "channels", "corrupt_graph", "missing_graph"])
def test_mismatched_or_damaged_export_is_an_error_naming_the_file(exports, tmp_path, kind, how):
    other_kind = next(other for other in MODEL_KINDS if other != kind)
    named = damage(exports[kind][1], tmp_path / how, how, exports[other_kind][1])
    with pytest.raises(CheckpointError) as caught:
        load_exported_model(tmp_path / how)
    assert str(named) in str(caught.value)


def test_bad_export_directory_errors_name_the_path(tmp_path):
    with pytest.raises(CheckpointError, match="export directory not found: .*missing"):
        load_exported_model(tmp_path / "missing")
    (tmp_path / "model.pt").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="model.pt is a file; --backend onnx takes an export directory"):
        load_exported_model(tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match=f"{tmp_path} has no export.json"):
        load_exported_model(tmp_path)
    (tmp_path / SIDECAR_NAME).write_text("{not json")
    with pytest.raises(CheckpointError, match=f"cannot read {tmp_path / SIDECAR_NAME}"):
        load_exported_model(tmp_path)
    (tmp_path / SIDECAR_NAME).write_text(json.dumps({"format": "something else"}))
    with pytest.raises(CheckpointError, match="is not a unet_transformer_seg export sidecar"):
        load_exported_model(tmp_path)


def test_missing_onnx_extra_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def without_onnx(name, *args, **kwargs):
        if name in ("onnx", "onnxruntime"):
            raise ImportError(f"No module named '{name}'", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_onnx)
    with pytest.raises(MissingDependencyError, match=r"onnx is not installed: .*unet_transformer_seg\[onnx\]"):
        import_onnx()
