"""Generated bad input (hypothesis, derandomised): image and mask files of every Pillow mode, 16-bit, float, palette,
RGBA, `.npy`, truncated, 1x1 to larger than the training window, masks of another size or with class ids beyond
num_classes; and random mutations of every shipped config. Each case ends in a clear error naming the file (or the
config key), or in exactly the values written and a prediction of the image's size: never another exception, never
a silently wrong value. The fast tier runs FAST_CASES cases per test, the slow tier SLOW_CASES."""

import copy
import dataclasses
import string
import tempfile
import typing
from pathlib import Path

import numpy as np
import pytest
import tifffile
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from PIL import Image

from unet_transformer_seg.config import _SECTION_CLASSES, config_from_dict, load_config, read_yaml
from unet_transformer_seg.data.datasets import FolderDataset
from unet_transformer_seg.data.image_io import read_image
from unet_transformer_seg.errors import ConfigError, DataError
from unet_transformer_seg.inference import Segmenter
from unet_transformer_seg.labels import IGNORE_LABEL
from unet_transformer_seg.models import build_model

from seg_helpers import PROJECT_DIR
from seg_reference import write_png16_reference

FAST_CASES, SLOW_CASES = 20, 250  # per test of files; the config tests run as many cases as both file tests
WINDOW = 16  # training window of the tiny models; generated images reach past it
NUM_CLASSES = 4


def fuzz_settings(cases: int):
    return settings(max_examples=cases, derandomize=True, deadline=None, database=None,
                    phases=[Phase.explicit, Phase.generate, Phase.shrink],  # no failure-explanation patch files
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ---------- image files ----------

# (Pillow mode, format): samples written -> (values read_image must return [H, W, C], has alpha)
LOSSLESS = {
    ("1", "PNG"), ("1", "TIFF"), ("1", "BMP"), ("L", "PNG"), ("L", "TIFF"), ("L", "BMP"), ("LA", "PNG"),
    ("LA", "TIFF"), ("P", "PNG"), ("P", "TIFF"), ("RGB", "PNG"), ("RGB", "TIFF"), ("RGB", "BMP"), ("RGBA", "PNG"),
    ("RGBA", "TIFF"), ("I;16", "PNG"), ("I;16", "TIFF"), ("I", "TIFF"), ("F", "TIFF"),
}
APPROXIMATE = {("L", "JPEG"), ("RGB", "JPEG"), ("CMYK", "TIFF"), ("CMYK", "JPEG"), ("YCbCr", "TIFF"),
               ("LAB", "TIFF"), ("PA", "TIFF")}  # colour-space conversions or lossy: shape and finiteness only
IMAGE_KINDS = sorted(LOSSLESS | APPROXIMATE) + [("png16", "RGB"), ("png16", "RGBA"), ("npy", "float"),
                                               ("npy", "int"), ("npy", "bool"), ("tiff", "stack")]
SUFFIX = {"PNG": ".png", "TIFF": ".tif", "BMP": ".bmp", "JPEG": ".jpg"}


def _pillow_image(mode: str, rng: np.random.Generator, height: int, width: int):
    """(a Pillow image of `mode`, the values read_image must return [H, W, C] or None, has alpha)."""
    if mode == "1":
        bits = rng.random((height, width)) < 0.5
        return Image.fromarray(bits), bits[..., None].astype(np.float32), False
    if mode in ("I;16", "I", "F"):
        dtype = {"I;16": np.uint16, "I": np.int32, "F": np.float32}[mode]
        if mode == "F":
            values = rng.normal(0.0, 1000.0, (height, width)).astype(np.float32)
            values[rng.random((height, width)) < 0.02] = rng.choice([np.nan, np.inf, -np.inf])
        else:
            info = np.iinfo(dtype)
            values = rng.integers(info.min, info.max, (height, width), endpoint=True).astype(dtype)
            if mode == "I" and rng.random() < 0.5:
                values //= 2**8  # mostly within float32's exact integers
        expected = values.astype(np.float32) / 65535.0 if mode == "I;16" else values.astype(np.float32)
        return Image.fromarray(values), expected[..., None], False
    if mode == "P":
        indices = rng.integers(0, 6, (height, width)).astype(np.uint8)
        palette = rng.integers(0, 256, (6, 3)).astype(np.uint8)
        image = Image.fromarray(indices, mode="L").convert("P")
        image.putpalette(palette.reshape(-1).tolist())
        return image, palette[indices].astype(np.float32) / 255.0, False
    samples = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4, "CMYK": 4, "YCbCr": 3, "LAB": 3, "PA": 2}[mode]
    pixels = rng.integers(0, 256, (height, width, samples)).astype(np.uint8)
    if mode == "PA":
        image = Image.fromarray(pixels[..., 0], mode="L").convert("P").convert("PA")
        return image, None, True
    base_mode = mode if mode in ("L", "LA", "RGB", "RGBA") else {3: "RGB", 4: "RGBA"}[samples]
    image = Image.fromarray(pixels[..., 0] if samples == 1 else pixels, mode=base_mode)
    if base_mode != mode:
        image = image.convert(mode) if mode != "CMYK" else Image.frombytes("CMYK", image.size, pixels.tobytes())
        return image, None, False
    return image, pixels.astype(np.float32) / 255.0, mode in ("LA", "RGBA")


def write_image_case(kind, rng, height, width, folder: Path):
    """Write one generated image; returns (path, expected values [H, W, C] or None when only approximate, has alpha)."""
    first, second = kind
    if first == "png16":
        samples = 3 if second == "RGB" else 4
        values = rng.integers(0, 65536, (height, width, samples)).astype(np.uint16)
        path = folder / "image.png"
        write_png16_reference(path, values, 2 if samples == 3 else 6)
        return path, values.astype(np.float32) / 65535.0, samples == 4
    if first == "npy":
        path = folder / "image.npy"
        channels = int(rng.integers(1, 6))
        if second == "float":
            values = rng.normal(0.0, 1e4, (height, width, channels))
            values[rng.random(values.shape) < 0.01] = rng.choice([np.nan, np.inf, 1e39])
        elif second == "int":
            values = rng.integers(-2**26, 2**26, (height, width, channels)) // int(rng.choice([1, 8]))
        else:
            values = rng.random((height, width, channels)) < 0.5
        np.save(path, values)
        with np.errstate(over="ignore"):  # 1e39 becomes inf in float32, as the reader is expected to make it
            return path, values.astype(np.float32), False
    if first == "tiff":
        channels = int(rng.integers(2, 6))
        values = rng.normal(500.0, 200.0, (channels, height, width)).astype(np.float32)  # [C, H, W] pages
        path = folder / "image.tif"
        # 3 or 4 planes as planar RGB(A), other counts as grey pages: tifffile's current defaults, stated so that its
        # announced change of default (grey pages for all) does not change what the test writes
        rgb = channels in (3, 4)
        tifffile.imwrite(path, values, photometric="rgb" if rgb else "minisblack",
                         planarconfig="separate" if rgb else None)
        return path, values.transpose(1, 2, 0), False
    image, expected, alpha = _pillow_image(first, rng, height, width)
    path = folder / f"image{SUFFIX[second]}"
    image.save(path, format=second)
    if (first, second) in APPROXIMATE or (first == "RGBA" and second == "BMP"):
        expected = None
    return path, expected, alpha


def _truncate(path: Path, fraction: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


_MODELS = {}


def tiny_segmenter(channels: int, resize_mode: str) -> Segmenter:
    """An untrained tiny model (cached): what matters here is that any image comes back as labels of its size."""
    key = (channels, resize_mode)
    if key not in _MODELS:
        cfg = load_config(None, [f"data.image_size={WINDOW}", "model.base_channels=4", "model.depth=2",
                                 "model.transformer_layers=1", "model.num_heads=2", f"data.in_channels={channels}",
                                 "data.kind=folder", "data.root=unused", "data.normalize=per_image",
                                 f"data.resize_mode={resize_mode}", "train.eval_batch_size=4"])
        torch.manual_seed(0)
        _MODELS[key] = Segmenter(build_model(cfg).eval(), cfg)
    return _MODELS[key]


def check_image_case(tmp_path: Path, kind, seed: int, height: int, width: int, channels: int,
                     truncate_at, resize_mode: str) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # one folder per generated case
    rng = np.random.default_rng(seed)
    path, expected, has_alpha = write_image_case(kind, rng, height, width, folder)
    if truncate_at is not None:
        _truncate(path, truncate_at)
    try:
        image = read_image(path, channels)
    except DataError as error:
        assert str(path) in str(error)
        return
    assert image.shape == (channels, height, width) and image.dtype == torch.float32
    assert torch.isfinite(image).all()
    if expected is not None:
        assert np.isfinite(expected).all(), f"{path}: non-finite values read without an error"
        if expected.shape[2] == channels:  # no channel conversion: every value as written
            assert torch.equal(image, torch.from_numpy(expected).permute(2, 0, 1)), f"{path}: values changed"
        elif has_alpha and expected.shape[2] - 1 == channels:
            assert torch.equal(image, torch.from_numpy(expected[..., :-1]).permute(2, 0, 1)), f"{path}: alpha"
    if channels in (1, 3):
        labels = tiny_segmenter(channels, resize_mode).segment(image)
        assert labels.shape == (height, width) and labels.dtype == torch.int64
        assert int(labels.min()) >= 0 and int(labels.max()) < NUM_CLASSES


image_cases = st.tuples(
    st.sampled_from(IMAGE_KINDS), st.integers(0, 2**16), st.integers(1, WINDOW + 20), st.integers(1, WINDOW + 20),
    st.integers(1, 5), st.one_of(st.none(), st.none(), st.floats(0.0, 0.98)), st.sampled_from(["resize", "pad"]),
)


@fuzz_settings(FAST_CASES)
@given(case=image_cases)
def test_generated_images_read_exactly_or_fail_naming_the_file(tmp_path, case):
    check_image_case(tmp_path, *case)


@pytest.mark.slow
@fuzz_settings(SLOW_CASES)
@given(case=image_cases)
def test_generated_images_read_exactly_or_fail_naming_the_file_many(tmp_path, case):
    check_image_case(tmp_path, *case)


# ---------- mask files ----------

MASK_KINDS = [("L", "PNG"), ("L", "TIFF"), ("L", "BMP"), ("P", "PNG"), ("P", "TIFF"), ("I;16", "PNG"),
              ("I;16", "TIFF"), ("1", "PNG"), ("1", "TIFF"), ("RGB", "PNG"), ("RGBA", "PNG"), ("LA", "PNG"),
              ("I", "TIFF"), ("F", "TIFF"), ("png16", "PNG")]


def write_mask_case(kind, rng, height, width, high: int, path: Path) -> np.ndarray:
    """Write a mask of ids 0..high (and sometimes 255); returns the ids written [H, W] int64."""
    mode, file_format = kind
    ids = rng.integers(0, high + 1, (height, width))
    if rng.random() < 0.3:
        ids[rng.random((height, width)) < 0.2] = 255
    if mode == "1":
        ids = ids % 2
        Image.fromarray(ids.astype(bool)).save(path, format=file_format)
    elif mode in ("RGB", "RGBA", "LA"):
        gray = ids.astype(np.uint8)
        coloured = rng.random() < 0.2  # then not gray: needs a palette, which this case lacks
        planes = [gray, gray if not coloured else 255 - gray, gray]
        planes = {"RGB": planes, "RGBA": planes + [np.full_like(gray, 200)], "LA": [gray, np.full_like(gray, 9)]}[mode]
        Image.fromarray(np.stack(planes, axis=-1), mode=mode).save(path, format=file_format)
        if coloured and mode != "LA" and (255 - gray != gray).any():
            ids = None
    elif mode == "png16":  # 16-bit gray + alpha: exact ids; 16-bit RGB: refused
        gray_alpha = rng.random() < 0.5
        samples = np.stack([ids, np.full_like(ids, 65535)] if gray_alpha else [ids, ids, ids], axis=-1)
        write_png16_reference(path, samples.astype(np.uint16), 4 if gray_alpha else 2)
        ids = ids if gray_alpha else None
    elif mode == "F":
        Image.fromarray(ids.astype(np.float32)).save(path, format=file_format)
        ids = None  # a float mask is refused
    else:
        dtype = {"L": np.uint8, "P": np.uint8, "I;16": np.uint16, "I": np.int32}[mode]
        image = Image.fromarray(ids.astype(dtype))
        if mode == "P":
            image = image.convert("P")
            image.putpalette([value for k in range(256) for value in (k, 255 - k, k // 2)])
        image.save(path, format=file_format)
    return ids


def check_mask_case(tmp_path: Path, kind, seed: int, height: int, width: int, high: int, ignore: bool,
                    image_size_delta: int, truncate_at) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    (root / "train" / "images").mkdir(parents=True)
    (root / "train" / "masks").mkdir(parents=True)
    rng = np.random.default_rng(seed)
    mask_path = root / "train" / "masks" / f"m{SUFFIX[kind[1]]}"
    image_path = root / "train" / "images" / "m.png"
    ids = write_mask_case(kind, rng, height, width, high, mask_path)
    Image.fromarray(np.zeros((height + image_size_delta, width), np.uint8)).save(image_path)
    if truncate_at is not None:
        _truncate(mask_path, truncate_at)
    dataset = FolderDataset(root, "train", in_channels=1, num_classes=NUM_CLASSES,
                            ignore_index=255 if ignore else None)
    try:
        _, mask = dataset[0]
    except DataError as error:
        assert str(mask_path) in str(error) or str(image_path) in str(error)
        if ids is not None and truncate_at is None and image_size_delta == 0:
            invalid = (ids >= NUM_CLASSES) & ~((ids == 255) & ignore)
            assert invalid.any(), f"{mask_path}: a valid mask was refused: {error}"
        return
    assert ids is not None, f"{mask_path}: read although it cannot be a valid mask"
    assert image_size_delta == 0, "a mask of another size than its image was accepted"
    expected = torch.from_numpy(np.where((ids == 255) & ignore, IGNORE_LABEL, ids))
    assert torch.equal(mask, expected), f"{mask_path}: class ids changed"


mask_cases = st.tuples(
    st.sampled_from(MASK_KINDS), st.integers(0, 2**16), st.integers(1, 24), st.integers(1, 24),
    st.integers(1, NUM_CLASSES + 2), st.booleans(), st.sampled_from([0, 0, 0, 1, -1]),
    st.one_of(st.none(), st.none(), st.floats(0.0, 0.98)),
).filter(lambda case: case[2] + case[6] >= 1)


@fuzz_settings(FAST_CASES // 2)
@given(case=mask_cases)
def test_generated_masks_read_exactly_or_fail_naming_the_file(tmp_path, case):
    check_mask_case(tmp_path, *case)


@pytest.mark.slow
@fuzz_settings(SLOW_CASES)
@given(case=mask_cases)
def test_generated_masks_read_exactly_or_fail_naming_the_file_many(tmp_path, case):
    check_mask_case(tmp_path, *case)


# ---------- configs ----------

SHIPPED = {path.name: read_yaml(path) for path in sorted((PROJECT_DIR / "configs").glob("*.yaml"))}
FIELDS = [(section, item.name, typing.get_type_hints(cls)[item.name], dict(item.metadata))
          for section, cls in _SECTION_CLASSES.items() for item in dataclasses.fields(cls)]
ANY_SCALAR = st.one_of(st.integers(), st.floats(), st.text(max_size=5), st.booleans(), st.none())


def _wrong_type(annotation):
    """Values that no coercion of `annotation` accepts."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = type(None) in typing.get_args(annotation)
    kinds = {a if typing.get_origin(a) is None else list for a in (args or [annotation])}
    choices = [st.dictionaries(st.text(max_size=3), st.integers(), min_size=1, max_size=2)]
    if not optional:
        choices.append(st.none())
    if str not in kinds:
        choices.append(st.text(max_size=5))
    if list not in kinds:
        choices.append(st.lists(st.integers(), max_size=2))
    if not kinds & {bool, str}:
        choices.append(st.booleans())
    if not kinds & {int, float, str}:
        choices.append(st.integers())
    if kinds == {int}:
        choices.append(st.floats().filter(lambda x: not float(x).is_integer()))
    return st.one_of(choices)


def _out_of_range(annotation, rules):
    base = [a for a in (typing.get_args(annotation) or (annotation,)) if a is not type(None)][0]
    choices = []
    if "choices" in rules:
        choices.append(st.text(max_size=8).filter(lambda value: value not in rules["choices"]))
    lower = rules.get("min", rules.get("gt"))
    if lower is not None:
        below = st.integers(max_value=lower - 1) if base is int else st.floats(max_value=lower, exclude_max="min" in rules)
        choices.append(below)
    if "max" in rules:
        choices.append(st.integers(min_value=rules["max"] + 1) if base is int else
                       st.floats(min_value=rules["max"], exclude_min=True))
    if base is float:
        choices.append(st.sampled_from([float("nan"), float("inf")]))
    return st.one_of(choices)


RANGED = [field for field in FIELDS if field[3] and typing.get_origin(field[2]) is not typing.Union
          or field[3] and type(None) in typing.get_args(field[2]) and len(typing.get_args(field[2])) == 2]


@st.composite
def config_mutations(draw):
    """(a shipped config with one mutation, the text the error must contain)."""
    raw = copy.deepcopy(SHIPPED[draw(st.sampled_from(sorted(SHIPPED)))])
    kind = draw(st.sampled_from(["wrong type", "wrong type", "unknown key", "out of range", "out of range",
                                 "section not a mapping"]))
    if kind == "unknown key":
        section = draw(st.sampled_from(sorted(_SECTION_CLASSES)))
        known = {item.name for item in dataclasses.fields(_SECTION_CLASSES[section])}
        key = draw(st.text(string.ascii_lowercase + "_", min_size=1, max_size=10).filter(lambda k: k not in known))
        raw.setdefault(section, {})[key] = draw(ANY_SCALAR)
        return raw, f"unknown config key '{section}.{key}'"
    if kind == "section not a mapping":
        section = draw(st.sampled_from(sorted(_SECTION_CLASSES)))
        raw[section] = draw(st.one_of(st.integers(), st.text(min_size=1, max_size=4), st.lists(st.integers(),
                                                                                              min_size=1)))
        return raw, f"config section '{section}' must be a mapping"
    section, key, annotation, rules = draw(st.sampled_from(FIELDS if kind == "wrong type" else RANGED))
    raw.setdefault(section, {})[key] = draw(_wrong_type(annotation) if kind == "wrong type"
                                            else _out_of_range(annotation, rules))
    return raw, f"'{section}.{key}"


def check_config_mutation(mutation) -> None:
    raw, expected = mutation
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    assert expected in str(info.value)


@fuzz_settings(FAST_CASES)
@given(mutation=config_mutations())
def test_mutated_shipped_configs_are_refused_naming_the_key(mutation):
    check_config_mutation(mutation)


@pytest.mark.slow
@fuzz_settings(2 * SLOW_CASES)
@given(mutation=config_mutations())
def test_mutated_shipped_configs_are_refused_naming_the_key_many(mutation):
    check_config_mutation(mutation)
