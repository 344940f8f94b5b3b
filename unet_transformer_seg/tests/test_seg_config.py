import dataclasses
from pathlib import Path

import pytest
import yaml

from unet_transformer_seg.config import (
    Config, apply_overrides, config_from_dict, config_to_dict, load_config, save_config,
)
from unet_transformer_seg.errors import ConfigError
from unet_transformer_seg.models import UNet, UNetTransformer, build_model

from seg_helpers import PROJECT_DIR


SHIPPED = sorted((PROJECT_DIR / "configs").glob("*.yaml"))


def flatten(mapping, prefix=""):
    """{"data": {"augment": {"rotate_prob": 0.2}}} -> {"data.augment.rotate_prob": 0.2}."""
    flat = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def same_value(loaded, written) -> bool:
    """Equal, and a whole number written for a float key comes back as that float (int keys stay int)."""
    if isinstance(written, list):
        return isinstance(loaded, list) and len(loaded) == len(written) and all(map(same_value, loaded, written))
    return loaded == written and (type(loaded) is type(written) or isinstance(loaded, float))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_config_loads_to_what_its_file_says(path):
    written = flatten(yaml.safe_load(path.read_text()))
    loaded = flatten(config_to_dict(load_config(path)))
    defaults = flatten(config_to_dict(Config()))
    assert set(written) <= set(loaded)  # no key of the file dropped
    for key, value in loaded.items():
        expected = written.get(key, defaults[key])  # a key the file leaves out keeps its dataclass default
        assert same_value(value, expected), (key, value, expected)


def test_the_toy_baseline_is_the_toy_config_with_the_model_type_set():
    path = PROJECT_DIR / "configs" / "toy.yaml"
    transformer, baseline = load_config(path), load_config(path, ["model.type=unet"])
    assert (transformer.model.type, baseline.model.type) == ("unet_transformer", "unet")
    assert type(build_model(baseline)) is UNet and type(build_model(transformer)) is UNetTransformer
    assert dataclasses.replace(baseline, model=dataclasses.replace(baseline.model, type="unet_transformer")) == \
        transformer


def test_set_overrides_reach_the_dataclass_and_leave_the_rest_of_the_file():
    path = PROJECT_DIR / "configs" / "toy.yaml"
    overrides = ["run.seed=7", "data.image_size=96", "data.num_classes=3", "data.hflip=false",
                 "data.augment.blur_prob=0.5", "data.augment.rotate_prob=0.25", "model.type=unet", "train.lr=0.0005",
                 "train.epochs=5", "train.class_weights=[1, 2.5, 4]", "train.lr=0.002"]  # the last of two --set wins
    cfg = load_config(path, overrides)
    assert (cfg.run.seed, cfg.data.image_size, cfg.data.num_classes, cfg.data.hflip) == (7, 96, 3, False)
    assert (cfg.data.augment.rotate_prob, cfg.model.type, cfg.train.lr, cfg.train.epochs) == (0.25, "unet", 0.002, 5)
    assert cfg.train.class_weights == [1.0, 2.5, 4.0] and all(isinstance(w, float) for w in cfg.train.class_weights)
    changed = {"run.seed", "data.image_size", "data.num_classes", "data.hflip", "data.augment.blur_prob",
               "data.augment.rotate_prob", "model.type", "train.lr", "train.epochs", "train.class_weights"}
    before, after = flatten(config_to_dict(load_config(path))), flatten(config_to_dict(cfg))
    assert {key for key in before if before[key] != after[key]} == changed
    assert after["data.augment.blur_prob"] == 0.5  # a second key of the same group does not replace the group


@pytest.mark.parametrize(
    "item, message",
    [
        ("data.augment.blur_prob=1.5", "config key 'data.augment.blur_prob' must be <= 1.0, got 1.5"),
        ("train.class_weights=[1, -2, 1, 1]", "config key 'train.class_weights[1]' must be a finite number > 0"),
        ("data.std=[0.2, 0.0, 0.3]", "config key 'data.std[1]' must be > 0.0, got 0.0"),
        ("model.depth=1.5", "config key 'model.depth' must be an integer, got float 1.5"),
        ("train.schedule=linear", "config key 'train.schedule' must be one of"),
        ("train.lr=1e-3x", "config key 'train.lr' must be a number, got str '1e-3x'"),
    ],
)
def test_bad_set_values_name_the_key(item, message):
    with pytest.raises(ConfigError) as info:
        load_config(PROJECT_DIR / "configs" / "toy.yaml", [item])
    assert message in str(info.value)


def test_bad_values_in_a_file_name_the_key(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  base_channels: 0\n")
    with pytest.raises(ConfigError, match="config key 'model.base_channels' must be >= 1, got 0"):
        load_config(path)


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"train": {"lrr": 0.1}}, "unknown config key 'train.lrr'"),
        ({"trainer": {}}, "unknown config section 'trainer'"),
        ({"train": {"lr": -1.0}}, "config key 'train.lr' must be > 0.0, got -1.0"),
        ({"train": {"batch_size": "8"}}, "config key 'train.batch_size' must be an integer"),
        ({"train": {"batch_size": 2.5}}, "config key 'train.batch_size' must be an integer"),
        ({"train": {"amp": "yes"}}, "config key 'train.amp' must be true or false"),
        ({"data": {"image_size": -64}}, "config key 'data.image_size' must be >= 8"),
        ({"model": {"type": "resnet"}}, "config key 'model.type' must be one of unet, unet_transformer"),
        ({"data": {"image_size": 60}}, "data.image_size' must be divisible by 2**model.depth = 8"),
        ({"model": {"num_heads": 5}}, "model.num_heads' must divide the bottleneck width"),
        ({"data": {"kind": "folder"}}, "data.root' must name a folder"),
        ({"data": {"binary": True}}, "data.num_classes' must be 2 when data.binary is true"),
        ({"data": {"num_classes": 2, "palette": [[0, 0, 0]]}}, "data.palette' must list one colour per class"),
        ({"data": {"std": float("nan")}}, "config key 'data.std' must be > 0.0, got nan"),
        ({"train": {"max_steps": 0}}, "config key 'train.max_steps' must be >= 1"),
        ({"train": {"loss": "dice", "class_weights": "auto"}}, "config key 'train.class_weights' weighs the "
                                                                 "cross-entropy term, and train.loss dice has none"),
    ],
)
def test_bad_values_name_the_key(raw, message):
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    assert message in str(info.value)


def test_set_overrides_are_parsed_as_yaml():
    raw = apply_overrides({"train": {"lr": 0.1}}, ["train.lr=0.5", "train.max_steps=null", "data.palette=[[0,0,0]]"])
    assert raw["train"] == {"lr": 0.5, "max_steps": None}
    assert raw["data"]["palette"] == [[0, 0, 0]]
    cfg = config_from_dict(apply_overrides({}, ["train.epochs=3", "model.type=unet", "data.hflip=false"]))
    assert (cfg.train.epochs, cfg.model.type, cfg.data.hflip) == (3, "unet", False)


@pytest.mark.parametrize("item, message", [("train.lr", "expects section.key=value"), ("lr=1", "section.key"),
                                           ("foo.lr=1", "unknown config section 'foo'")])
def test_bad_set_syntax(item, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides({}, [item])


def test_int_accepted_for_float_and_saved_config_round_trips(tmp_path: Path):
    cfg = config_from_dict({"train": {"lr": 1}})
    assert cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float)
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == config_to_dict(cfg)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="config file not found: nope.yaml"):
        load_config("nope.yaml")
