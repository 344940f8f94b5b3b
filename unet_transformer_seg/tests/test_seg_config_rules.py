"""Config rules beyond types and ranges: settings that would do nothing are refused (INERT_RULES), `auto` values wait
for planning, folds come as a pair."""

import pytest

from unet_transformer_seg.config import INERT_RULES, auto_keys, load_config
from unet_transformer_seg.errors import ConfigError

from seg_helpers import PROJECT_DIR

# one non-default value per rule's key, and the overrides that make the rule's condition hold
INERT_CASES = {
    "data.foreground_fraction": ("0.3", ["data.resize_mode=resize"]),
    "data.mean": ("0.4", ["data.normalize=per_image"]),
    "data.std": ("0.3", ["data.normalize=per_image"]),
    "data.clip_low": ("[0.0, 0.0, 0.0]", ["data.normalize=dataset", "data.clip_high=[1.0, 1.0, 1.0]"]),
    "data.palette": ("[[0, 0, 0], [1, 1, 1], [2, 2, 2], [3, 3, 3]]", ["data.kind=toy"]),
    "data.ignore_index": ("255", ["data.kind=toy"]),
    "data.mask_values": ("[0, 255, 7, 9]", ["data.kind=toy"]),
    "data.folds": ("5", ["data.kind=toy", "data.fold=0"]),
    "data.augment.scale_range": ("[0.8, 1.2]", []),
    "data.augment.rotate_degrees": ("10", []),
    "data.augment.brightness_range": ("[0.8, 1.2]", []),
    "data.augment.contrast_range": ("[0.8, 1.2]", []),
    "data.augment.gamma_range": ("[0.8, 1.2]", []),
    "data.augment.noise_std": ("0.2", []),
    "data.augment.blur_sigma": ("[0.3, 0.6]", []),
    "train.ema_decay": ("0.9", ["train.ema=false"]),
    "train.compile_backend": ("eager", ["train.compile=false"]),
    "train.dice_include_background": ("false", ["train.loss=ce"]),
}


def test_every_inert_rule_has_a_case():
    assert sorted(INERT_CASES) == sorted(key for key, _, _ in INERT_RULES)


@pytest.mark.parametrize("key", sorted(INERT_CASES))
def test_a_key_that_does_nothing_is_refused_naming_it(key):
    value, condition = INERT_CASES[key]
    with pytest.raises(ConfigError, match=f"config key '{key}' is set to .* but does nothing here"):
        load_config(None, [*condition, f"{key}={value}"])


def test_the_same_key_is_accepted_where_it_acts():
    cfg = load_config(None, ["data.resize_mode=pad", "data.foreground_fraction=0.3", "data.augment.noise_prob=0.5",
                             "data.augment.noise_std=0.2", "train.ema=true", "train.ema_decay=0.9"])
    assert (cfg.data.foreground_fraction, cfg.data.augment.noise_std, cfg.train.ema_decay) == (0.3, 0.2, 0.9)


@pytest.mark.parametrize("path", sorted((PROJECT_DIR / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_no_shipped_config_holds_an_inert_key(path):
    # load_config refuses an inert key; a config with `auto` values is checked again once planned, so plan it
    # with stand-in values here
    overrides = {"data.num_classes": "4", "data.in_channels": "3", "data.image_size": "64", "data.resize_mode": "pad",
                 "data.normalize": "fixed", "data.foreground_fraction": "0.33", "data.ignore_index": "255", "data.mask_values": "null",
                 "train.batch_size": "8", "train.max_steps": "100", "train.val_every_steps": "10"}
    cfg = load_config(path)
    load_config(path, [f"{key}={overrides[key]}" for key in auto_keys(cfg)])


def test_auto_is_kept_for_a_folder_set_and_listed():
    cfg = load_config(None, ["data.kind=folder", "data.root=somewhere", "data.image_size=auto",
                             "train.batch_size=auto"])
    assert cfg.data.image_size == "auto" and auto_keys(cfg) == ["data.image_size", "train.batch_size"]


def test_auto_on_the_toy_set_or_on_a_key_without_a_plan_is_refused():
    with pytest.raises(ConfigError, match="'data.image_size' is auto, which is planned from a folder data set"):
        load_config(None, ["data.image_size=auto"])
    with pytest.raises(ConfigError, match="config key 'train.lr' must be a number, got str 'auto'"):
        load_config(None, ["data.kind=folder", "data.root=x", "train.lr=auto"])


def test_folds_come_as_a_pair_and_the_fold_is_in_range():
    with pytest.raises(ConfigError, match="'data.fold' and 'data.folds' are set together"):
        load_config(None, ["data.kind=folder", "data.root=x", "data.folds=5"])
    with pytest.raises(ConfigError, match=r"'data.fold' must be in 0..4 \(data.folds = 5\), got 5"):
        load_config(None, ["data.kind=folder", "data.root=x", "data.folds=5", "data.fold=5"])
    cfg = load_config(None, ["data.kind=folder", "data.root=x", "data.folds=5", "data.fold=4"])
    assert (cfg.data.fold, cfg.data.folds) == (4, 5)


def test_numbers_in_exponent_notation_are_numbers():
    # YAML 1.1 reads 1e-3 (no dot) as a string; the config takes it as the number it means
    cfg = load_config(None, ["train.lr=1e-3", "train.weight_decay=5E-5"])
    assert (cfg.train.lr, cfg.train.weight_decay) == (1e-3, 5e-5)


def test_reading_a_config_imports_neither_torch_nor_numpy():
    # the scripts validate a config before the slow import of torch; a fresh interpreter shows what config.py pulls in
    import subprocess
    import sys

    code = "import sys, unet_transformer_seg.config; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
