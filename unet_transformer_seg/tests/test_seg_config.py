from pathlib import Path

import pytest
import yaml

from unet_transformer_seg.config import (
    Config, apply_overrides, config_from_dict, config_to_dict, load_config, save_config,
)
from unet_transformer_seg.errors import ConfigError

from seg_helpers import PROJECT_DIR


@pytest.mark.parametrize("path", sorted((PROJECT_DIR / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_are_valid(path):
    cfg = load_config(path)
    assert isinstance(cfg, Config)


def test_required_configs_exist():
    names = {p.name for p in (PROJECT_DIR / "configs").glob("*.yaml")}
    assert {"quick.yaml", "unet_baseline.yaml", "unet_transformer.yaml"} <= names


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
