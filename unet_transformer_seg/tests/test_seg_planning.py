"""Planning from the data: object sizes against hand-made shapes, the rules on three kinds of set, values a user set
kept, plan.py writing a config that trains."""

import numpy as np
import pytest
import yaml
from PIL import Image

from unet_transformer_seg.config import auto_keys, load_config
from unet_transformer_seg.planning import object_diameters, plan_config

from seg_helpers import PROJECT_DIR, run_script_in_process

TEMPLATE = PROJECT_DIR / "configs" / "folder.yaml"


def _disk(size, centre, radius):
    yy, xx = np.mgrid[0:size, 0:size]
    return (yy - centre[0]) ** 2 + (xx - centre[1]) ** 2 < radius**2


@pytest.mark.parametrize("radius", [5, 12, 25])
def test_object_diameter_of_a_disk_is_about_its_diameter(radius):
    ids = _disk(96, (48, 48), radius).astype(np.int64)
    (diameter,) = object_diameters(ids).values()
    assert diameter == pytest.approx(2 * radius, rel=0.2)


def test_object_diameter_of_squares():
    ids = np.zeros((64, 64), dtype=np.int64)
    ids[10:30, 10:30] = 1  # side 20
    ids[40:46, 40:46] = 2  # side 6
    ids[0:3, :] = 255  # void band, not an object
    diameters = object_diameters(ids)
    assert sorted(diameters) == [1, 2, 255]  # the void band too; the fingerprint leaves void out
    assert [diameters[1], diameters[2]] == pytest.approx([20 * 20 * 4 / 76, 6 * 6 * 4 / 20])


def _write_set(root, count, make, suffix):
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        (root / split / "images").mkdir(parents=True)
        (root / split / "masks").mkdir(parents=True)
        for index in range(count):
            image, mask = make(rng)
            path = root / split / "images" / f"{split}{index}{suffix}"
            np.save(path, image) if suffix == ".npy" else Image.fromarray(image).save(path)
            Image.fromarray(mask.astype(np.uint8)).save(root / split / "masks" / f"{split}{index}.png")
    return root


def _large_rgb_objects(rng):  # 8-bit RGB, one disk covering much of the image, a void band
    mask = _disk(80, rng.integers(30, 50, 2), rng.integers(18, 26)).astype(np.uint8) * int(rng.integers(1, 3))
    mask[:2] = 255
    return rng.integers(0, 256, (80, 96, 3), dtype=np.uint8)[:, :80], mask


def _small_gray16_objects(rng):  # 16-bit gray, small disks in a large image
    mask = np.zeros((200, 200), dtype=np.uint8)
    for _ in range(6):
        mask[_disk(200, rng.integers(10, 190, 2), 4)] = 1
    return (rng.integers(1000, 1100, (200, 200)) + 3000 * mask.astype(np.int64)).astype(np.uint16), mask


def _binary_0_255(rng):  # 8-bit gray, the foreground stored as 255 (no void)
    mask = _disk(64, rng.integers(20, 44, 2), 6).astype(np.uint8) * 255
    return rng.integers(0, 256, (64, 64), dtype=np.uint8), mask


def _float_two_channels(rng):  # float, 2 channels, a gain of its own per image
    mask = _disk(120, rng.integers(20, 100, 2), 8).astype(np.uint8) * 2
    image = rng.normal(50, 5, (120, 120, 2)) * rng.uniform(0.2, 5.0)
    return image.astype(np.float32), mask


@pytest.mark.parametrize("make, suffix, expected", [
    (_large_rgb_objects, ".png", {"data.in_channels": 3, "data.num_classes": 3, "data.ignore_index": 255,
                                  "data.normalize": "fixed", "data.resize_mode": "resize",
                                  "data.foreground_fraction": 0.0}),
    (_small_gray16_objects, ".png", {"data.in_channels": 1, "data.num_classes": 2, "data.ignore_index": None,
                                     "data.normalize": "percentile", "data.resize_mode": "pad",
                                     "data.foreground_fraction": 0.33}),
    (_float_two_channels, ".npy", {"data.in_channels": 2, "data.num_classes": 3, "data.ignore_index": None,
                                   "data.normalize": "per_image", "data.resize_mode": "pad"}),
    (_binary_0_255, ".png", {"data.num_classes": 2, "data.ignore_index": None, "data.mask_values": [0, 255]}),
], ids=["8-bit RGB, large objects", "16-bit gray, small objects", "float, 2 channels, gains", "binary 0/255 masks"])
def test_the_plan_follows_the_data(tmp_path, make, suffix, expected):
    root = _write_set(tmp_path / "set", 6, make, suffix)
    cfg, table = plan_config(load_config(TEMPLATE, [f"data.root={root}"]))
    assert auto_keys(cfg) == []
    for key, value in expected.items():
        section, name = key.split(".")
        assert getattr(getattr(cfg, section), name) == value, (key, table)
        assert key in table
    assert cfg.data.image_size % 2**cfg.model.depth == 0 and 64 <= cfg.data.image_size <= 96
    assert "train.class_weights auto: [" in table
    assert 1000 <= cfg.train.max_steps <= 2000 and 1 <= cfg.train.batch_size <= 16


def test_values_a_user_set_are_kept_and_used(tmp_path):
    root = _write_set(tmp_path / "set", 4, _small_gray16_objects, ".png")
    cfg, table = plan_config(load_config(TEMPLATE, [f"data.root={root}", "data.image_size=64",
                                                    "data.resize_mode=random_crop", "train.batch_size=4"]))
    assert (cfg.data.image_size, cfg.data.resize_mode, cfg.train.batch_size) == (64, "random_crop", 4)
    assert "data.image_size" not in table and "train.batch_size" not in table
    assert cfg.data.foreground_fraction == 0.33  # planned for windows, as the given mode has them


def test_plan_script_writes_a_config_with_every_value_set(tmp_path):
    root = _write_set(tmp_path / "set", 4, _large_rgb_objects, ".png")
    out = tmp_path / "planned.yaml"
    result = run_script_in_process("plan.py", str(root), "--out", str(out), "--class-names", "bg,round,other")
    assert result.returncode == 0, result.stderr
    assert "data.resize_mode" in result.stderr  # the reasoning table
    written = yaml.safe_load(out.read_text())
    assert "auto" not in {value for section in written.values() for value in section.values()
                          if isinstance(value, str)} or written["train"]["class_weights"] == "auto"
    cfg = load_config(out)
    assert cfg.data.class_names == ["bg", "round", "other"] and cfg.data.num_classes == 3
    assert auto_keys(cfg) == []


@pytest.mark.slow
def test_the_template_trains_unedited_on_a_set_smaller_than_a_batch(tmp_path):
    root = _write_set(tmp_path / "set", 3, _small_gray16_objects, ".png")
    result = run_script_in_process("train.py", "--config", "configs/folder.yaml", "--set", f"data.root={root}",
                                   "--set", f"run.output_dir={tmp_path / 'runs'}", "--set", "train.max_steps=4",
                                   "--set", "model.base_channels=4", "--set", "train.num_plot_images=1")
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "runs" / result.stdout.strip().splitlines()[-1].split("/")[-1]
    log = (run_dir / "train.log").read_text()
    assert "auto values planned from the data" in log and "3 train images drawn" in log
    saved = load_config(run_dir / "config.yaml")
    assert auto_keys(saved) == [] and saved.data.resize_mode == "pad"


def test_mask_values_map_stored_values_to_class_ids_and_refuse_others(tmp_path):
    from unet_transformer_seg.data.image_io import read_mask
    from unet_transformer_seg.errors import DataError

    stored = np.array([[0, 255, 128], [255, 0, 7]], dtype=np.uint8)
    Image.fromarray(stored).save(tmp_path / "m.png")
    ids = read_mask(tmp_path / "m.png", 3, ignore_index=7, mask_values=[0, 255, 128])
    assert ids.tolist() == [[0, 1, 2], [1, 0, -1]]  # 7 is void (IGNORE_LABEL -1)
    with pytest.raises(DataError, match=r"holds the value 7 at \(row 1, col 2\), which is not in data.mask_values"):
        read_mask(tmp_path / "m.png", 3, mask_values=[0, 255, 128])
