"""Intensities and channels: every file format keeps its values, any channel count, and the four normalisations
(fixed, dataset statistics counted like numpy, per-image z-score, percentile clipping)."""

import json
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
from PIL import Image

from unet_transformer_seg.checkpointing import load_checkpoint, save_checkpoint
from unet_transformer_seg.config import load_config
from unet_transformer_seg.data.datasets import FolderDataset
from unet_transformer_seg.data.image_io import image_size, read_image, read_mask
from unet_transformer_seg.data.normalization import Normalization, count_statistics
from unet_transformer_seg.data.png16 import unfilter
from unet_transformer_seg.errors import ConfigError, DataError

from seg_helpers import run_script_in_process, tiny_cli_args
from seg_reference import png_filter_reference, write_png16_reference


def _as_chw(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array).permute(2, 0, 1)


def test_float32_tiff_keeps_its_values(tmp_path: Path):
    values = np.array([[0.0, 100.0, 1000.0], [4095.0, -3.5, 1e6]], dtype=np.float32)
    tifffile.imwrite(tmp_path / "ct.tif", values)
    image = read_image(tmp_path / "ct.tif", 1)
    assert image.dtype == torch.float32 and torch.equal(image[0], torch.from_numpy(values))
    assert image_size(tmp_path / "ct.tif") == (2, 3)


@pytest.mark.parametrize("colour_type, samples, channels", [(2, 3, 3), (6, 4, 4), (4, 2, 2)])
def test_16_bit_colour_png_keeps_the_low_byte(tmp_path: Path, colour_type, samples, channels):
    pixels = np.random.default_rng(colour_type).integers(0, 65536, (7, 6, samples)).astype(np.uint16)
    pixels[0, 0] = 257 * np.arange(samples)  # a pixel whose low and high bytes agree
    write_png16_reference(tmp_path / "deep.png", pixels, colour_type)
    image = read_image(tmp_path / "deep.png", channels)
    assert torch.equal(torch.round(image * 65535).to(torch.int64), _as_chw(pixels.astype(np.int64)))
    if colour_type == 6:  # RGBA for a 3-channel model: alpha dropped, colour exact
        assert torch.equal(read_image(tmp_path / "deep.png", 3), image[:3])


def test_png_unfilter_matches_the_reference_filters_on_random_rows():
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, (6, 5, 4)).astype(np.uint8)  # [H, W, bytes per pixel]
    kinds = np.array([4, 3, 1, 2, 0, 4])
    previous, filtered = bytes(20), []
    for row, kind in zip(raw, kinds):
        filtered.append(np.frombuffer(png_filter_reference(row.tobytes(), previous, kind, 4), np.uint8))
        previous = row.tobytes()
    assert np.array_equal(unfilter(np.stack(filtered).reshape(6, 5, 4), kinds), raw)


def test_five_channel_npy_and_two_channel_tiff_stack_keep_their_values(tmp_path: Path):
    rng = np.random.default_rng(0)
    five = rng.normal(100.0, 30.0, (9, 7, 5)).astype(np.float32)  # [H, W, C]
    np.save(tmp_path / "bands.npy", five)
    assert torch.equal(read_image(tmp_path / "bands.npy", 5), _as_chw(five))
    assert image_size(tmp_path / "bands.npy") == (9, 7)
    stack = rng.integers(0, 65536, (2, 8, 11)).astype(np.uint16)  # [C, H, W]: two pages
    tifffile.imwrite(tmp_path / "stack.tif", stack)
    assert torch.equal(torch.round(read_image(tmp_path / "stack.tif", 2) * 65535).long(),
                       torch.from_numpy(stack.astype(np.int64)))
    assert image_size(tmp_path / "stack.tif") == (8, 11)
    signed = rng.integers(-40000, 40000, (5, 4)).astype(np.int32)
    tifffile.imwrite(tmp_path / "signed.tif", signed)
    assert torch.equal(read_image(tmp_path / "signed.tif", 1)[0], torch.from_numpy(signed).float())


@pytest.mark.parametrize("name, array, message", [
    ("huge.tif", np.array([[1, 2**25]], np.int32), "holds the integer 33554432 at (row 0, col 1), beyond 2**24"),
    ("nan.tif", np.array([[1.0, np.nan]], np.float32), "holds nan at (row 0, col 1)"),
    ("wide.npy", np.full((2, 2), 1e300), "holds 1e+300 at (row 0, col 0)"),
    ("cube.npy", np.zeros((2, 2, 2, 2), np.float32), "holds an array of shape (2, 2, 2, 2)"),
])
def test_values_float32_cannot_hold_are_errors_naming_the_file(tmp_path: Path, name, array, message):
    path = tmp_path / name
    np.save(path, array) if name.endswith(".npy") else tifffile.imwrite(path, array)
    with pytest.raises(DataError, match="image .*" + name) as info:
        read_image(path, 1)
    assert message in str(info.value)


def test_channel_count_mismatch_names_the_file(tmp_path: Path):
    np.save(tmp_path / "four.npy", np.zeros((3, 3, 4), np.float32))
    with pytest.raises(DataError, match="four.npy has 4 channels, but data.in_channels = 3"):
        read_image(tmp_path / "four.npy", 3)


def _float_folder(root: Path, count: int = 3):
    rng = np.random.default_rng(3)
    images = []
    for split in ("train", "val"):
        (root / split / "images").mkdir(parents=True)
        (root / split / "masks").mkdir(parents=True)
        for index in range(count):
            image = rng.normal([1000.0, -5.0], [300.0, 2.0], (16 + 8 * index, 16, 2)).astype(np.float32)  # [H, W, 2]
            np.save(root / split / "images" / f"s{index}.npy", image)
            Image.fromarray((image[..., 0] > 1000).astype(np.uint8)).save(root / split / "masks" / f"s{index}.png")
            if split == "train":
                images.append(image.reshape(-1, 2).astype(np.float64))
    return root, np.concatenate(images)  # training pixels [N, 2]


def test_dataset_statistics_equal_a_numpy_count(tmp_path: Path):
    root, pixels = _float_folder(tmp_path / "d")
    base = FolderDataset(root, "train", in_channels=2, num_classes=2)
    statistics = count_statistics(base, "dataset", seed=0)
    assert np.allclose(statistics["mean"], pixels.mean(axis=0), rtol=1e-12)
    assert np.allclose(statistics["std"], pixels.std(axis=0), rtol=1e-9)
    clipped = count_statistics(base, "percentile", seed=0)  # fewer pixels than the sample size: all of them
    low, high = np.percentile(pixels, [0.5, 99.5], axis=0)
    assert np.allclose(clipped["clip_low"], low) and np.allclose(clipped["clip_high"], high)
    assert np.allclose(clipped["mean"], np.clip(pixels, low, high).mean(axis=0))


def test_normalisation_modes():
    image = torch.tensor([[[0.0, 2.0], [4.0, 6.0]], [[10.0, 10.0], [10.0, 50.0]]])  # [2, 2, 2]
    cfg = load_config(None, ["data.kind=folder", "data.root=x", "data.in_channels=2", "data.mean=[1.0, 2.0]",
                             "data.std=[2.0, 4.0]"])
    fixed = Normalization.from_config(cfg.data)(image)
    assert torch.allclose(fixed[0], (image[0] - 1.0) / 2.0) and torch.allclose(fixed[1], (image[1] - 2.0) / 4.0)
    cfg.data.normalize = "per_image"
    z = Normalization.from_config(cfg.data)(image[None])[0]  # a batch works as one image does
    assert torch.allclose(z.mean(dim=(1, 2)), torch.zeros(2), atol=1e-6)
    assert torch.allclose(z.std(dim=(1, 2), correction=0), torch.ones(2), atol=1e-6)
    assert torch.equal(Normalization.from_config(cfg.data)(torch.full((1, 3, 3), 7.0)), torch.zeros(1, 3, 3))
    cfg.data.normalize, cfg.data.clip_low, cfg.data.clip_high = "percentile", [1.0, 10.0], [5.0, 20.0]
    clipped = Normalization.from_config(cfg.data)(image)
    assert torch.allclose(clipped[0] * 2.0 + 1.0, image[0].clamp(1.0, 5.0))
    assert torch.allclose(clipped[1] * 4.0 + 2.0, image[1].clamp(10.0, 20.0))


@pytest.mark.parametrize("overrides, message", [
    (["data.mean=[0.1, 0.2]"], "config key 'data.mean' must be one number or one per channel (data.in_channels = 3)"),
    (["data.std=[1.0, 0.0, 1.0]"], "config key 'data.std[1]' must be > 0.0, got 0.0"),
    (["data.clip_low=[0, 0, 0]"], "'data.clip_low' and 'data.clip_high' are set together"),
    (["data.clip_low=[0, 5, 0]", "data.clip_high=[1, 1, 1]"], "'data.clip_low' must be below data.clip_high"),
    (["data.in_channels=5"], "config key 'data.in_channels' must be 1 or 3 for the toy set"),
    (["data.normalize=zscore"], "config key 'data.normalize' must be one of fixed, dataset, per_image, percentile"),
])
def test_bad_intensity_settings_name_the_key(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    assert message in str(info.value)


@pytest.mark.slow
def test_dataset_statistics_reach_the_checkpoint_and_a_cuda_checkpoint_evaluates_on_cpu(tmp_path: Path):
    root, pixels = _float_folder(tmp_path / "d")
    # The scripts run in this process: each runs as a separate process in test_seg_training.py.
    trained = run_script_in_process("train.py", "--config", "configs/quick.yaml",
                                    *tiny_cli_args(tmp_path, "data.kind=folder", f"data.root={root}",
                                                   "data.in_channels=2", "data.num_classes=2",
                                                   "data.normalize=dataset", "train.batch_size=2", "train.epochs=1",
                                                   "train.num_plot_images=1"))
    assert trained.returncode == 0, trained.stderr
    run_dir = Path(trained.stdout.strip().splitlines()[-1])
    checkpoint = run_dir / "checkpoints" / "best.pt"
    state = load_checkpoint(checkpoint)
    assert np.allclose(state["config"]["data"]["mean"], pixels.mean(axis=0), rtol=1e-12)
    assert np.allclose(state["config"]["data"]["std"], pixels.std(axis=0), rtol=1e-9)
    assert "intensity statistics of the 3 training images (dataset): mean [" in (run_dir / "train.log").read_text()
    state["config"]["run"]["device"] = "cuda"  # as if trained on a GPU
    save_checkpoint({key: value for key, value in state.items() if key != "format"}, tmp_path / "gpu.pt")
    moved = run_script_in_process("eval.py", "--checkpoint", str(tmp_path / "gpu.pt"), "--device", "cpu")
    assert moved.returncode == 0, moved.stderr
    metrics = json.loads(moved.stdout)
    assert metrics["inference"]["device"] == "cpu"
    assert metrics["mean_dice"] == pytest.approx(state["history"][-1]["val_mean_dice"], abs=1e-6)
    image = root / "val" / "images" / "s2.npy"
    predicted = run_script_in_process("predict.py", "--checkpoint", str(tmp_path / "gpu.pt"), str(image), "--out-dir",
                                      str(tmp_path / "p"), "--device", "cpu")
    assert predicted.returncode == 0, predicted.stderr
    assert read_mask(tmp_path / "p" / "s2_mask.png", 2).shape == (32, 16)
