from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch

from unet_transformer_seg.config import load_config
from unet_transformer_seg.data.datasets import FolderDataset, build_split
from unet_transformer_seg.data.image_io import convert_channels, read_image, read_mask, write_png
from unet_transformer_seg.data.toy_shapes import ToyShapesDataset
from unet_transformer_seg.data.transforms import (
    SegmentationTransform, random_crop, random_flip_rotate, resize_image, resize_mask,
)
from unet_transformer_seg.errors import DataError


# ---------- toy shapes ----------

def test_toy_items_follow_the_contract():
    dataset = ToyShapesDataset(8, image_size=32, seed=3)
    image, mask = dataset[5]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32
    assert mask.shape == (32, 32) and mask.dtype == torch.int64
    assert 0.0 <= float(image.min()) and float(image.max()) <= 1.0
    assert set(mask.unique().tolist()) <= {0, 1, 2, 3}
    assert (mask > 0).any()


def test_toy_sample_is_a_pure_function_of_seed_and_index():
    first, second = ToyShapesDataset(10, 32, seed=1), ToyShapesDataset(10, 32, seed=1)
    for index in (0, 7, 3):
        assert torch.equal(first[index][0], second[index][0]) and torch.equal(first[index][1], second[index][1])
    fresh = ToyShapesDataset(10, 32, seed=1)  # index 4 read first here, after 0, 7 and 3 above: order is no input
    assert torch.equal(fresh[4][0], first[4][0]) and torch.equal(fresh[4][1], first[4][1])
    assert not torch.equal(first[4][0], ToyShapesDataset(10, 32, seed=2)[4][0])
    assert not torch.equal(first[4][0], ToyShapesDataset(10, 32, seed=1, split="val")[4][0])


def test_toy_is_identical_through_dataloader_workers():
    dataset = ToyShapesDataset(12, 16, seed=0)
    serial = torch.cat([batch[0] for batch in torch.utils.data.DataLoader(dataset, batch_size=4)])
    parallel = torch.cat([batch[0] for batch in torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2)])
    assert torch.equal(serial, parallel)


def test_toy_covers_all_classes_and_binary_mode():
    dataset = ToyShapesDataset(40, 32, seed=0)
    seen = set(torch.cat([dataset[i][1].flatten() for i in range(40)]).unique().tolist())
    assert seen == {0, 1, 2, 3}
    binary = ToyShapesDataset(40, 32, seed=0, binary=True)
    assert torch.equal(binary[3][1], (dataset[3][1] > 0).long())
    assert ToyShapesDataset(2, 32, in_channels=1)[0][0].shape == (1, 32, 32)


def test_mixed_sizes_and_fixed_pixel_shape_sizes():
    relative = ToyShapesDataset(4, 64, seed=0, sizes=[(64, 64), (97, 211)])
    fixed = ToyShapesDataset(4, 64, seed=0, sizes=[(64, 64), (97, 211)], shape_size=64)
    assert relative[1][0].shape == (3, 97, 211) and relative[2][1].shape == (64, 64)
    assert relative.size_of(3) == (97, 211)
    assert torch.equal(fixed[0][1], relative[0][1])  # on a 64x64 image, shape_size 64 changes nothing
    big_relative = ToyShapesDataset(8, 64, seed=0, sizes=[(256, 256)])
    big_fixed = ToyShapesDataset(8, 64, seed=0, sizes=[(256, 256)], shape_size=64)
    area = [sum(float((dataset[i][1] > 0).float().mean()) for i in range(8)) for dataset in (big_relative, big_fixed)]
    assert area[1] < area[0] / 8  # same pixel size on a 16x larger image: a far smaller share of it


# ---------- transforms ----------

def _coded_pair(height=12, width=12):
    """Image whose channel 0 encodes the mask: alignment holds iff image[0] == mask / 10 everywhere."""
    mask = torch.randint(0, 4, (height, width))
    image = torch.stack([mask.float() / 10, torch.rand(height, width), torch.rand(height, width)])
    return image, mask


def test_flips_and_rotations_keep_image_and_mask_aligned():
    for seed in range(12):
        image, mask = _coded_pair()
        out_image, out_mask = random_flip_rotate(image, mask, np.random.default_rng(seed), True, True, True)
        assert torch.equal(out_image[0], out_mask.float() / 10)
        candidates = [torch.rot90(m, k, dims=(-2, -1)) for m in (image, image.flip(-1)) for k in range(4)]
        assert any(torch.equal(out_image, candidate) for candidate in candidates)


def test_random_crop_keeps_alignment_and_size():
    image, mask = _coded_pair(20, 30)
    out_image, out_mask = random_crop(image, mask, 16, np.random.default_rng(0))
    assert out_image.shape == (3, 16, 16) and out_mask.shape == (16, 16)
    assert torch.equal(out_image[0], out_mask.float() / 10)
    small_image, small_mask = _coded_pair(10, 12)
    out_image, out_mask = random_crop(small_image, small_mask, 16, np.random.default_rng(0))
    assert out_image.shape == (3, 16, 16) and set(out_mask.unique().tolist()) <= set(small_mask.unique().tolist())


def test_resize_mask_is_nearest_and_aligned_with_image_blocks():
    mask = torch.tensor([[0, 1], [2, 3]])
    big = resize_mask(mask, (4, 4))
    assert torch.equal(big, mask.repeat_interleave(2, 0).repeat_interleave(2, 1))
    image = mask.float()[None]
    assert torch.allclose(resize_image(image, (4, 4))[0, ::3, ::3], mask.float(), atol=0.3)
    assert set(resize_mask(torch.randint(0, 3, (37, 23)), (16, 16)).unique().tolist()) <= {0, 1, 2}


def test_segmentation_transform_normalises_and_eval_is_deterministic():
    image, mask = _coded_pair(16, 16)
    def normalization(x):
        return (x - 0.5) / 0.25

    transform = SegmentationTransform(8, normalization, train=False)
    out_image, out_mask = transform(image, mask, None)
    assert out_image.shape == (3, 8, 8) and torch.equal(out_mask, mask)  # the mask stays at its own size
    assert torch.allclose(out_image, (resize_image(image, (8, 8)) - 0.5) / 0.25, atol=1e-6)
    native = SegmentationTransform(8, normalization, train=False, resize_mode="pad", resize_for_eval=False)
    out_image, out_mask = native(image, mask, None)
    assert torch.allclose(out_image, (image - 0.5) / 0.25) and torch.equal(out_mask, mask)


def test_training_augmentation_depends_on_epoch_and_index_only():
    cfg = load_config(None, ["data.image_size=16", "data.train_size=8"])
    first, second = build_split(cfg, "train", train=True), build_split(cfg, "train", train=True)
    first.set_epoch(3), second.set_epoch(3)
    assert torch.equal(first[5][0], second[5][0])
    second.set_epoch(4)
    differs = any(not torch.equal(first[i][0], second[i][0]) for i in range(8))
    assert differs


# ---------- image files ----------

def test_png_writer_round_trips_through_the_reader(tmp_path: Path):
    gray = np.arange(48, dtype=np.uint8).reshape(6, 8) * 5
    rgb = np.random.default_rng(0).integers(0, 256, (6, 8, 3)).astype(np.uint8)
    write_png(tmp_path / "g.png", gray)
    write_png(tmp_path / "c.png", rgb)
    assert torch.equal(read_mask(tmp_path / "g.png", 256), torch.from_numpy(gray.astype(np.int64)))
    assert torch.allclose(read_image(tmp_path / "c.png", 3), torch.from_numpy(rgb).permute(2, 0, 1).float() / 255)


def test_channel_conversion():
    rgba = torch.rand(4, 5, 5)
    assert torch.equal(convert_channels(rgba, 3, has_alpha=True), rgba[:3])
    assert torch.equal(convert_channels(rgba, 4, has_alpha=True), rgba)  # alpha kept when the model takes it
    gray = convert_channels(rgba, 1, has_alpha=True)
    expected = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2]
    assert gray.shape == (1, 5, 5) and torch.allclose(gray[0], expected)
    assert torch.equal(convert_channels(gray, 3), gray.expand(3, -1, -1))
    with pytest.raises(DataError, match="x.npy has 4 channels, but data.in_channels = 3"):
        convert_channels(rgba, 3, path="x.npy")  # four channels that are not RGBA: never dropped silently


def _write_folder(root: Path, split="train", count=3, size=(8, 8), mask_values=(0, 1)):
    (root / split / "images").mkdir(parents=True, exist_ok=True)
    (root / split / "masks").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for index in range(count):
        write_png(root / split / "images" / f"img{index}.png", rng.integers(0, 256, (*size, 3)).astype(np.uint8))
        write_png(root / split / "masks" / f"img{index}.png", rng.choice(mask_values, size).astype(np.uint8))


def test_folder_dataset_reads_pairs(tmp_path: Path):
    _write_folder(tmp_path, mask_values=(0, 1, 2))
    dataset = FolderDataset(tmp_path, "train", in_channels=1, num_classes=3)
    image, mask = dataset[1]
    assert len(dataset) == 3 and image.shape == (1, 8, 8) and mask.shape == (8, 8)
    assert dataset.name(1) == "img1"


def test_folder_errors_name_the_file(tmp_path: Path):
    _write_folder(tmp_path, mask_values=(0, 5))
    (tmp_path / "train" / "masks" / "img2.png").unlink()
    with pytest.raises(DataError, match=r"img2\.png has no mask"):
        FolderDataset(tmp_path, "train", 3, 2)
    _write_folder(tmp_path, mask_values=(0, 5))
    message = r"img0\.png holds class id 5 at \(row \d+, col \d+\), but data.num_classes = 2"
    with pytest.raises(DataError, match=message):
        FolderDataset(tmp_path, "train", 3, 2)[0]
    write_png(tmp_path / "train" / "masks" / "img1.png", np.zeros((4, 4), np.uint8))
    with pytest.raises(DataError, match=r"img1\.png is \(4, 4\) but image .*img1\.png is \(8, 8\)"):
        FolderDataset(tmp_path, "train", 3, 6)[1]
    write_png(tmp_path / "train" / "masks" / "orphan.png", np.zeros((8, 8), np.uint8))
    with pytest.raises(DataError, match=r"orphan\.png has no image"):
        FolderDataset(tmp_path, "train", 3, 6)
    (tmp_path / "train" / "masks" / "orphan.png").unlink()
    with pytest.raises(DataError, match="folder not found"):
        FolderDataset(tmp_path, "val", 3, 6)
    (tmp_path / "empty" / "images").mkdir(parents=True)
    (tmp_path / "empty" / "masks").mkdir(parents=True)
    with pytest.raises(DataError, match="no images"):
        FolderDataset(tmp_path, "empty", 3, 6)
    (tmp_path / "train" / "images" / "img0.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match=r"cannot read image .*img0\.png"):
        FolderDataset(tmp_path, "train", 3, 6)[0]


def test_colour_masks_map_through_the_palette(tmp_path: Path):
    palette = [[0, 0, 0], [255, 0, 0], [0, 128, 255]]
    ids = np.array([[0, 1, 2], [2, 1, 0]])
    write_png(tmp_path / "m.png", np.array(palette, dtype=np.uint8)[ids])
    assert torch.equal(read_mask(tmp_path / "m.png", 3, palette), torch.from_numpy(ids))
    with pytest.raises(DataError, match="colour image; set data.palette"):
        read_mask(tmp_path / "m.png", 3)
    with pytest.raises(DataError, match=r"colour \[0, 128, 255\] at \(row 0, col 2\) not in data.palette"):
        read_mask(tmp_path / "m.png", 2, palette[:2])


def test_gray_and_rgba_images_and_varying_sizes_become_training_tensors(tmp_path: Path):
    _write_folder(tmp_path, count=2, size=(10, 14))
    rgba = np.random.default_rng(1).random((10, 14, 4)).astype(np.float32)
    matplotlib.image.imsave(tmp_path / "train" / "images" / "img1.png", rgba)
    write_png(tmp_path / "train" / "images" / "img0.png", np.full((10, 14), 200, np.uint8))
    cfg = load_config(None, ["data.kind=folder", f"data.root={tmp_path}", "data.image_size=16", "data.num_classes=2"])
    gray = torch.full((3, 16, 16), (200 / 255 - 0.5) / 0.25)  # img0: 200 in every channel, normalised
    rgba_as_read = read_image(tmp_path / "train" / "images" / "img1.png", 3)  # [3, 10, 14]
    masks = [read_mask(tmp_path / "train" / "masks" / f"img{index}.png", 2) for index in range(2)]  # [10, 14]
    for mode in ("resize", "random_crop"):
        cfg.data.resize_mode = mode
        split = build_split(cfg, "train", train=True)
        for index in range(2):
            image, mask = split[index]
            assert image.shape == (3, 16, 16) and mask.shape == (16, 16)
            assert set(mask.unique().tolist()) <= set(masks[index].unique().tolist())
        assert torch.allclose(split[0][0], gray, atol=1e-5)  # flips and crops leave a flat image flat
    cfg.data.hflip = cfg.data.vflip = cfg.data.rot90 = False
    cfg.data.resize_mode = "resize"
    image, mask = build_split(cfg, "train", train=True)[1]  # no random geometry left: the plain resize
    assert torch.allclose(image, resize_image((rgba_as_read - 0.5) / 0.25, (16, 16)), atol=1e-5)
    assert torch.equal(mask, resize_mask(masks[1], (16, 16)))
    evaluation = build_split(cfg, "train", train=False)
    image, full_mask = evaluation[0]
    assert torch.allclose(image, gray, atol=1e-5) and torch.equal(full_mask, masks[0])  # the mask at its own size


def test_jpeg_images_are_read(tmp_path: Path):
    pixels = np.random.default_rng(0).random((9, 11, 3))
    matplotlib.image.imsave(tmp_path / "photo.jpg", pixels)
    image = read_image(tmp_path / "photo.jpg", 3)
    assert image.shape == (3, 9, 11) and image.dtype == torch.float32
    assert 0.0 <= float(image.min()) and float(image.max()) <= 1.0
    assert read_image(tmp_path / "photo.jpg", 1).shape == (1, 9, 11)
