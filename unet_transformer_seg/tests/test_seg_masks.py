"""Mask files: every supported format gives the same class ids; void pixels (ignore_index) count in no metric."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from unet_transformer_seg.config import load_config
from unet_transformer_seg.data.image_io import read_image, read_mask, write_label_png
from unet_transformer_seg.errors import DataError
from unet_transformer_seg.labels import IGNORE_LABEL, class_colours
from unet_transformer_seg.training.evaluate import evaluate, evaluation_split

IDS = np.array([[0, 1, 2, 3, 3], [3, 2, 1, 0, 0], [1, 1, 3, 2, 0]])
PALETTE = [[0, 0, 0], [200, 30, 30], [30, 200, 30], [30, 30, 200]]


def _indexed(ids: np.ndarray) -> Image.Image:
    image = Image.fromarray(ids.astype(np.uint8))
    image.putpalette([value for colour in PALETTE for value in colour] + [255, 255, 255] * 252)
    return image


MASK_FORMATS = {
    "8-bit gray": lambda ids: Image.fromarray(ids.astype(np.uint8)),
    "16-bit gray": lambda ids: Image.fromarray(ids.astype(np.uint16)),
    "indexed colour": _indexed,
    "gray stored as RGB": lambda ids: Image.fromarray(np.repeat(ids.astype(np.uint8)[..., None], 3, axis=2)),
    "gray stored as RGBA": lambda ids: Image.fromarray(np.dstack([ids.astype(np.uint8)] * 3 + [np.full(ids.shape, 255,
                                                                                                     np.uint8)])),
}


@pytest.mark.parametrize("suffix", [".png", ".tif", ".bmp"])
@pytest.mark.parametrize("name", list(MASK_FORMATS))
def test_every_mask_format_reads_as_the_same_ids(tmp_path: Path, name, suffix):
    if suffix == ".bmp" and name == "16-bit gray":
        pytest.skip("BMP has no 16-bit gray")
    path = tmp_path / f"mask{suffix}"
    MASK_FORMATS[name](IDS).save(path)
    assert torch.equal(read_mask(path, 4), torch.from_numpy(IDS))


def test_rgb_masks_map_through_the_palette_and_binary_masks_read_from_one_bit(tmp_path: Path):
    Image.fromarray(np.array(PALETTE, dtype=np.uint8)[IDS]).save(tmp_path / "rgb.png")
    assert torch.equal(read_mask(tmp_path / "rgb.png", 4, PALETTE), torch.from_numpy(IDS))
    binary = IDS % 2
    Image.fromarray(binary.astype(bool)).save(tmp_path / "one_bit.png")
    assert Image.open(tmp_path / "one_bit.png").mode == "1"
    Image.fromarray(binary.astype(np.uint8)).save(tmp_path / "eight_bit.png")
    assert torch.equal(read_mask(tmp_path / "one_bit.png", 2), read_mask(tmp_path / "eight_bit.png", 2))
    assert torch.equal(read_mask(tmp_path / "one_bit.png", 2), torch.from_numpy(binary))


def test_sixteen_bit_ids_are_kept_exactly_and_out_of_range_ids_name_the_pixel(tmp_path: Path):
    ids = np.array([[0, 300], [600, 900]], dtype=np.uint16)
    Image.fromarray(ids).save(tmp_path / "wide.png")
    assert read_mask(tmp_path / "wide.png", 1000).tolist() == [[0, 300], [600, 900]]
    with pytest.raises(DataError, match=r"wide\.png holds class id 300 at \(row 0, col 1\), but data.num_classes = 4"):
        read_mask(tmp_path / "wide.png", 4)


def test_void_255_needs_ignore_index_and_then_reads_as_ignored(tmp_path: Path):
    ids = IDS.copy()
    ids[1, 2:4] = 255
    _indexed(ids).save(tmp_path / "voc.png")
    with pytest.raises(DataError, match=r"holds class id 255 at \(row 1, col 2\).*set data.ignore_index: 255"):
        read_mask(tmp_path / "voc.png", 4)
    mask = read_mask(tmp_path / "voc.png", 4, ignore_index=255)
    assert mask[1, 2:4].tolist() == [IGNORE_LABEL, IGNORE_LABEL]
    assert torch.equal(mask[ids != 255], torch.from_numpy(IDS[ids != 255]))


def test_predicted_masks_are_indexed_pngs_of_class_ids_with_class_colours(tmp_path: Path):
    labels = torch.from_numpy(IDS)
    write_label_png(tmp_path / "pred.png", labels, 4)
    written = Image.open(tmp_path / "pred.png")
    assert written.mode == "P" and np.array_equal(np.asarray(written), IDS)
    assert written.getpalette()[:12] == class_colours(4).reshape(-1).tolist()
    write_label_png(tmp_path / "many.png", torch.tensor([[0, 299], [1000, 7]]), 1200)  # too many for a palette
    assert read_mask(tmp_path / "many.png", 1200).tolist() == [[0, 299], [1000, 7]]


def test_images_of_every_mode_read_to_unit_range(tmp_path: Path):
    rgb = np.random.default_rng(0).integers(0, 256, (6, 7, 3)).astype(np.uint8)
    expected = torch.from_numpy(rgb).permute(2, 0, 1).float() / 255
    Image.fromarray(rgb).save(tmp_path / "rgb.png")
    Image.fromarray(rgb).save(tmp_path / "rgb.tif")
    Image.fromarray(rgb).save(tmp_path / "rgb.bmp")
    for name in ("rgb.png", "rgb.tif", "rgb.bmp"):
        assert torch.allclose(read_image(tmp_path / name, 3), expected)
    Image.fromarray(rgb).convert("P").save(tmp_path / "indexed.png")  # an indexed image is read as its colours
    assert read_image(tmp_path / "indexed.png", 3).shape == (3, 6, 7)
    gray16 = (np.arange(42, dtype=np.uint16).reshape(6, 7) * 1500)
    Image.fromarray(gray16).save(tmp_path / "gray16.png")
    assert torch.allclose(read_image(tmp_path / "gray16.png", 1)[0], torch.from_numpy(gray16 / 65535.0).float())


class IdsFromIntensity(torch.nn.Module):
    """Predicts class round(gray * 255 / 60) of the (de-normalised) first channel: images encode predictions."""

    def __init__(self, mean: float, std: float):
        super().__init__()
        self.mean, self.std = mean, std
        self.anchor = torch.nn.Parameter(torch.zeros(()))  # gives the module a device

    def forward(self, images):
        value = (images[:, :1] * self.std + self.mean) * 255.0 / 60.0  # [B, 1, H, W]
        centres = torch.arange(4, dtype=images.dtype).view(1, 4, 1, 1)
        return -(value - centres).square() * 10.0 + self.anchor


def test_void_pixels_count_in_no_metric(tmp_path: Path):
    rng = np.random.default_rng(0)
    root = tmp_path / "voc"
    truths, predictions = [], []
    for split_dir in (root / "val" / "images", root / "val" / "masks"):
        split_dir.mkdir(parents=True)
    for index in range(3):
        truth = rng.integers(0, 4, (12, 10)).astype(np.uint8)
        truth[rng.random((12, 10)) < 0.3] = 255  # void
        predicted = np.where(rng.random((12, 10)) < 0.6, truth % 4, rng.integers(0, 4, (12, 10))).astype(np.uint8)
        Image.fromarray((predicted * 60).astype(np.uint8)).save(root / "val" / "images" / f"im{index}.png")
        _indexed(truth).save(root / "val" / "masks" / f"im{index}.png")
        truths.append(truth)
        predictions.append(predicted)
    cfg = load_config(None, ["data.kind=folder", f"data.root={root}", "data.image_size=8", "data.in_channels=1",
                             "data.ignore_index=255", "data.resize_mode=pad", "model.depth=2"])
    model = IdsFromIntensity(cfg.data.mean, cfg.data.std)
    scores = evaluate(model, evaluation_split(cfg, "val"), cfg).scores
    # independent count on the file contents, void pixels skipped
    truth, predicted = np.stack(truths), np.stack(predictions)
    valid = truth != 255
    assert scores["pixel_accuracy"] == pytest.approx(float((truth == predicted)[valid].mean()))
    for class_id in range(4):
        true_pos = np.sum((truth == class_id) & (predicted == class_id) & valid)
        false_pos = np.sum((truth != class_id) & (predicted == class_id) & valid)
        false_neg = np.sum((truth == class_id) & (predicted != class_id) & valid)
        assert scores["per_class_iou"][class_id] == pytest.approx(true_pos / (true_pos + false_pos + false_neg))
        assert scores["per_class_dice"][class_id] == pytest.approx(2 * true_pos / (2 * true_pos + false_pos
                                                                                   + false_neg))
    assert scores["num_images"] == 3
