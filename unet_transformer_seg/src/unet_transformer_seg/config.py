"""Config: YAML -> nested dataclasses, strict validation, `--set section.key=value` overrides.

Every field may carry metadata: `choices` (allowed values), `min` / `max` (inclusive bounds), `gt` (strict lower
bound), `auto` (the value `auto` is allowed: `planning.py` sets it from the training data before training). Unknown
keys, wrong types, impossible values and settings that would do nothing in the chosen mode (`INERT_RULES`) raise
ConfigError naming the key, before anything is built. Paths in a config are relative to the current working
directory.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import yaml

from .choices import (
    ATTENTION_KINDS, COMPILE_BACKENDS, DATA_KINDS, DEVICES, LOSS_NAMES, MODEL_TYPES, NORM_KINDS, NORMALIZE_MODES,
    RESIZE_MODES, SCHEDULES, SIGMOID_LOSSES,
)
from .errors import ConfigError


AUTO = "auto"


def _field(default, **rules):
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=rules)
    return field(default=default, metadata=rules)


@dataclass
class RunConfig:
    name: str = _field("run")
    output_dir: str = _field("runs")
    seed: int = _field(0, min=0)
    device: str = _field("auto", choices=DEVICES)
    num_threads: Optional[int] = _field(None, min=1)  # CPU threads for torch; null = PyTorch's default
    debug_checks: bool = _field(False)  # NaN/Inf check on every module's output (slow: one host sync per module)


@dataclass
class AugmentConfig:
    """`data.augment`: spatial and intensity augmentation of training batches, each with its probability per sample
    (nnU-Net's defaults in docs/configuration.md); all probabilities 0 = flips and 90-degree turns only."""

    scale_prob: float = _field(0.0, min=0.0, max=1.0)
    scale_range: List[float] = _field([0.75, 1.25])  # zoom factor, uniform; > 1 zooms in
    rotate_prob: float = _field(0.0, min=0.0, max=1.0)
    rotate_degrees: float = _field(30.0, min=0.0, max=180.0)  # angle uniform in [-rotate_degrees, rotate_degrees]
    brightness_prob: float = _field(0.0, min=0.0, max=1.0)
    brightness_range: List[float] = _field([0.75, 1.25])  # multiplier
    contrast_prob: float = _field(0.0, min=0.0, max=1.0)
    contrast_range: List[float] = _field([0.75, 1.25])  # factor around each image's mean
    gamma_prob: float = _field(0.0, min=0.0, max=1.0)
    gamma_range: List[float] = _field([0.7, 1.5])  # exponent on the image rescaled to [0, 1]
    noise_prob: float = _field(0.0, min=0.0, max=1.0)
    noise_std: float = _field(0.1, min=0.0)  # Gaussian noise, std uniform in [0, noise_std] (normalised units)
    blur_prob: float = _field(0.0, min=0.0, max=1.0)
    blur_sigma: List[float] = _field([0.5, 1.0])  # Gaussian blur, sigma in pixels, uniform

    def spatial(self) -> bool:
        return self.scale_prob > 0 or self.rotate_prob > 0

    def any(self) -> bool:
        return self.spatial() or any(p > 0 for p in (self.brightness_prob, self.contrast_prob, self.gamma_prob,
                                                     self.noise_prob, self.blur_prob))


@dataclass
class DataConfig:
    kind: str = _field("toy", choices=DATA_KINDS)
    root: Optional[str] = _field(None)
    image_size: int = _field(64, min=8, auto=True)
    in_channels: int = _field(3, min=1, auto=True)
    num_classes: int = _field(4, min=2, auto=True)
    class_names: Optional[List[str]] = _field(None)  # one name per class id, for reports; null: the toy set's names, else class_0..
    # toy set only
    train_size: int = _field(2000, min=1)
    val_size: int = _field(200, min=1)
    test_size: int = _field(200, min=1)
    binary: bool = _field(False)
    max_shapes: int = _field(3, min=1)
    noise_std: float = _field(0.05, min=0.0)
    # folder set only: colour of each class id (index = class id), for RGB masks
    palette: Optional[List[List[int]]] = _field(None)
    # folder set only: the mask value of each class id (index = class id), for gray masks not stored as 0..N-1 (0/255)
    mask_values: Optional[List[int]] = _field(None, auto=True)
    # folder set only: mask value that marks pixels no loss or metric looks at (VOC's void label is 255)
    ignore_index: Optional[int] = _field(None, min=0, auto=True)
    # folder set only: k-fold cross-validation over train + val (data/folds.py); fold k in 0..folds-1 validates
    folds: Optional[int] = _field(None, min=2)
    fold: Optional[int] = _field(None, min=0)
    # both
    resize_mode: str = _field("resize", choices=RESIZE_MODES, auto=True)
    hflip: bool = _field(True)
    vflip: bool = _field(True)
    rot90: bool = _field(True)
    # intensities (data/normalization.py): fixed | dataset | per_image | percentile; mean / std: one number or one
    # per channel (fixed), written by training in dataset / percentile mode, as clip_low / clip_high (percentile)
    normalize: str = _field("fixed", choices=NORMALIZE_MODES, auto=True)
    mean: Union[float, List[float]] = _field(0.5)
    std: Union[float, List[float]] = _field(0.25, gt=0.0)
    clip_low: Optional[List[float]] = _field(None)
    clip_high: Optional[List[float]] = _field(None)
    # share of training windows (pad, random_crop) centred on a pixel of a class drawn among those present; nnU-Net: 0.33
    foreground_fraction: float = _field(0.0, min=0.0, max=1.0, auto=True)
    augment: AugmentConfig = field(default_factory=AugmentConfig)


@dataclass
class ModelConfig:
    type: str = _field("unet_transformer", choices=MODEL_TYPES)
    base_channels: int = _field(16, min=1)
    depth: int = _field(3, min=1, max=6)
    norm: str = _field("batch", choices=NORM_KINDS)
    transformer_layers: int = _field(2, min=1)
    num_heads: int = _field(4, min=1)
    mlp_ratio: float = _field(2.0, gt=0.0)
    dropout: float = _field(0.0, min=0.0, max=0.9)
    attention: str = _field("explicit", choices=ATTENTION_KINDS)
    activation_checkpointing: bool = _field(False)
    # auxiliary 1x1 heads on the coarser decoder levels in training, loss weights halving per level; off at inference
    deep_supervision: bool = _field(False)


@dataclass
class TrainConfig:
    epochs: int = _field(10, min=1)
    max_steps: Optional[int] = _field(None, min=1, auto=True)
    batch_size: int = _field(16, min=1, auto=True)
    eval_batch_size: int = _field(64, min=1)
    lr: float = _field(1e-3, gt=0.0)
    weight_decay: float = _field(1e-4, min=0.0)
    warmup_steps: int = _field(50, min=0)
    schedule: str = _field("cosine", choices=SCHEDULES)  # after warm-up: cosine to 0, or (1 - t)**0.9
    ema: bool = _field(False)  # validate and save an exponential moving average of the weights
    ema_decay: float = _field(0.99, gt=0.0, max=0.99999)
    grad_clip: Optional[float] = _field(1.0, gt=0.0)
    amp: bool = _field(False)
    accumulate_steps: int = _field(1, min=1)
    num_workers: int = _field(0, min=0)
    log_every: int = _field(20, min=1)
    val_every_steps: Optional[int] = _field(None, min=1, auto=True)  # null: validate after every epoch
    loss: str = _field("ce_dice", choices=LOSS_NAMES)
    class_weights: Union[str, List[float], None] = _field(None)  # null | auto | [w0, w1, ...]
    dice_include_background: bool = _field(True)
    checkpoint_every: int = _field(0, min=0)
    compile: bool = _field(False)
    compile_backend: str = _field("inductor", choices=COMPILE_BACKENDS)
    detect_anomaly: bool = _field(False)
    num_plot_images: int = _field(4, min=0)


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


_SECTION_CLASSES = {"run": RunConfig, "data": DataConfig, "model": ModelConfig, "train": TrainConfig}


_EXPONENT_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")
_WORDS = {float: "a number", int: "an integer", str: "a string", bool: "true or false", type(None): "null"}


def _type_name(annotation) -> str:
    return getattr(annotation, "__name__", str(annotation)).replace("typing.", "")


def _coerce(key: str, value: Any, annotation) -> Any:
    """Check `value` against a type annotation (int, float, bool, str, Optional[X], List[X]); return it converted."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        alternatives = [a for a in args if a is not type(None)]
        if isinstance(value, (list, tuple)) and List[float] in alternatives:  # item errors name the item
            return _coerce(key, value, List[float])
        for alternative in alternatives:
            try:
                return _coerce(key, value, alternative)
            except ConfigError:
                pass
        names = " or ".join(_WORDS.get(a, "a list") for a in args)
        raise ConfigError(f"config key '{key}' must be {names}, got {type(value).__name__} {value!r}")
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{key}' must be a list, got {type(value).__name__} {value!r}")
        return [_coerce(f"{key}[{i}]", item, args[0]) for i, item in enumerate(value)]
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{key}' must be true or false, got {type(value).__name__} {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key '{key}' must be an integer, got {type(value).__name__} {value!r}")
        return value
    if annotation is float:
        if isinstance(value, str) and _EXPONENT_NUMBER.fullmatch(value):  # YAML 1.1 reads 1e-3 as a string
            return float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config key '{key}' must be a number, got {type(value).__name__} {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"config key '{key}' must be a string, got {type(value).__name__} {value!r}")
        return value
    raise ConfigError(f"config key '{key}' has unsupported type {_type_name(annotation)}")


def _check_rules(key: str, value: Any, rules: Dict[str, Any]) -> None:
    if value is None:
        return
    if isinstance(value, list):  # a per-item rule (data.std: [0.2, 0.3])
        for index, item in enumerate(value):
            _check_rules(f"{key}[{index}]", item, rules)
        return
    if "choices" in rules and value not in rules["choices"]:
        allowed = ", ".join(str(c) for c in rules["choices"])
        raise ConfigError(f"config key '{key}' must be one of {allowed}, got {value!r}")
    if "min" in rules and value < rules["min"]:
        raise ConfigError(f"config key '{key}' must be >= {rules['min']}, got {value!r}")
    if "max" in rules and value > rules["max"]:
        raise ConfigError(f"config key '{key}' must be <= {rules['max']}, got {value!r}")
    if "gt" in rules and not value > rules["gt"]:
        raise ConfigError(f"config key '{key}' must be > {rules['gt']}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"config key '{key}' must be a finite number, got {value!r}")


def _build_section(section: str, values: Any, cls=None):
    """A section (or a nested group such as `data.augment`) from its mapping; `section` is its dotted name."""
    cls = cls or _SECTION_CLASSES[section]
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"config section '{section}' must be a mapping, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        full_key = f"{section}.{key}"
        if key not in known:
            raise ConfigError(f"unknown config key '{full_key}' (known keys: {', '.join(known)})")
        if dataclasses.is_dataclass(hints[key]):
            kwargs[key] = _build_section(full_key, value, hints[key])
            continue
        if value == AUTO and known[key].metadata.get("auto"):
            kwargs[key] = AUTO
            continue
        coerced = _coerce(full_key, value, hints[key])
        _check_rules(full_key, coerced, dict(known[key].metadata))
        kwargs[key] = coerced
    return cls(**kwargs)


def auto_keys(cfg: Config) -> List[str]:
    """The keys still set to `auto` (section.key), in declaration order; `planning.plan_config` resolves them."""
    return [f"{name}.{item.name}" for name in _SECTION_CLASSES for item in dataclasses.fields(getattr(cfg, name))
            if item.metadata.get("auto") and getattr(getattr(cfg, name), item.name) == AUTO]


# (key, when its setting does nothing, why): a key that differs from its default while the condition holds is
# refused. Keys of the other model type (the bottleneck's) or data kind (the toy generator's) are not listed: one file
# switches between them with a single --set.
INERT_RULES = (
    ("data.foreground_fraction", lambda c: c.data.resize_mode == "resize",
     "resize mode shows the whole image, so no window is placed (use data.resize_mode: pad or random_crop)"),
    ("data.mean", lambda c: c.data.normalize == "per_image", "per_image normalisation uses each image's own mean"),
    ("data.std", lambda c: c.data.normalize == "per_image", "per_image normalisation uses each image's own std"),
    ("data.clip_low", lambda c: c.data.normalize != "percentile",  # set together with data.clip_high
     "only data.normalize: percentile clips"),
    ("data.palette", lambda c: c.data.kind == "toy", "the toy set has no mask files"),
    ("data.ignore_index", lambda c: c.data.kind == "toy", "the toy set has no mask files"),
    ("data.mask_values", lambda c: c.data.kind == "toy", "the toy set has no mask files"),
    ("data.folds", lambda c: c.data.kind == "toy", "folds split a folder data set's train + val images"),
    ("data.augment.scale_range", lambda c: c.data.augment.scale_prob == 0, "data.augment.scale_prob is 0"),
    ("data.augment.rotate_degrees", lambda c: c.data.augment.rotate_prob == 0, "data.augment.rotate_prob is 0"),
    ("data.augment.brightness_range", lambda c: c.data.augment.brightness_prob == 0,
     "data.augment.brightness_prob is 0"),
    ("data.augment.contrast_range", lambda c: c.data.augment.contrast_prob == 0, "data.augment.contrast_prob is 0"),
    ("data.augment.gamma_range", lambda c: c.data.augment.gamma_prob == 0, "data.augment.gamma_prob is 0"),
    ("data.augment.noise_std", lambda c: c.data.augment.noise_prob == 0, "data.augment.noise_prob is 0"),
    ("data.augment.blur_sigma", lambda c: c.data.augment.blur_prob == 0, "data.augment.blur_prob is 0"),
    ("train.ema_decay", lambda c: not c.train.ema, "train.ema is false"),
    ("train.compile_backend", lambda c: not c.train.compile, "train.compile is false"),
    ("train.dice_include_background", lambda c: c.train.loss in ("ce", "bce"), "train.loss has no Dice term"),
)


def _default_of(dotted: str):
    """The dataclass default of a key such as `data.augment.noise_std`."""
    *path, name = dotted.split(".")
    cls = _SECTION_CLASSES[path[0]]
    for group in path[1:]:
        cls = typing.get_type_hints(cls)[group]
    item = next(item for item in dataclasses.fields(cls) if item.name == name)
    return item.default_factory() if item.default is dataclasses.MISSING else item.default


def _value_of(cfg: Config, dotted: str):
    value = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _check_inert(cfg: Config) -> None:
    """Refuse a key set away from its default where it would do nothing (`INERT_RULES`)."""
    for key, does_nothing, reason in INERT_RULES:
        value = _value_of(cfg, key)
        if value != AUTO and value != _default_of(key) and does_nothing(cfg):
            raise ConfigError(f"config key '{key}' is set to {value!r} but does nothing here: {reason}; remove it")


def _check_cross_fields(cfg: Config) -> None:
    data, model, train = cfg.data, cfg.model, cfg.train
    if data.kind == "folder" and not data.root:
        raise ConfigError("config key 'data.root' must name a folder when data.kind is folder")
    _check_folds(data)
    unresolved = auto_keys(cfg)
    if unresolved and data.kind != "folder":
        raise ConfigError(f"config key '{unresolved[0]}' is auto, which is planned from a folder data set "
                          f"(data.kind: folder); give the toy set a value")
    if unresolved:  # the rest is checked once planning has set every value
        return
    factor = 2 ** model.depth
    if data.image_size % factor:
        raise ConfigError(
            f"config key 'data.image_size' must be divisible by 2**model.depth = {factor}, got {data.image_size}"
        )
    bottleneck_channels = model.base_channels * factor
    if model.type == "unet_transformer":
        if bottleneck_channels % model.num_heads:
            raise ConfigError(
                f"config key 'model.num_heads' must divide the bottleneck width "
                f"base_channels * 2**depth = {bottleneck_channels}, got {model.num_heads}"
            )
        if bottleneck_channels % 4:
            raise ConfigError(
                f"config key 'model.base_channels' must make the bottleneck width divisible by 4 for the 2D "
                f"positional encoding, got {bottleneck_channels}"
            )
    if data.binary and data.num_classes != 2:
        raise ConfigError(f"config key 'data.num_classes' must be 2 when data.binary is true, got {data.num_classes}")
    if train.loss in SIGMOID_LOSSES and data.num_classes != 2:
        raise ConfigError(f"config key 'train.loss' {train.loss!r} needs data.num_classes 2, got {data.num_classes}")
    if data.ignore_index is not None and data.ignore_index < data.num_classes:
        raise ConfigError(
            f"config key 'data.ignore_index' must not be a class id (0..{data.num_classes - 1}), got "
            f"{data.ignore_index}; VOC-style masks use 255"
        )
    _check_class_weights(train.class_weights, data.num_classes)
    if train.class_weights is not None and train.loss == "dice":
        raise ConfigError("config key 'train.class_weights' weighs the cross-entropy term, and train.loss dice has "
                          "none; set train.class_weights: null, or train.loss: ce_dice")
    _check_intensities(data)
    _check_augment(data.augment)
    if data.class_names is not None:
        if len(data.class_names) != data.num_classes:
            raise ConfigError(f"config key 'data.class_names' must list one name per class ({data.num_classes}), "
                              f"got {len(data.class_names)}")
        if len(set(data.class_names)) != len(data.class_names) or not all(data.class_names):
            raise ConfigError(f"config key 'data.class_names' must hold distinct, non-empty names, got "
                              f"{data.class_names}")
    _check_mask_values(data)
    if data.palette is not None:
        if len(data.palette) != data.num_classes:
            raise ConfigError(
                f"config key 'data.palette' must list one colour per class ({data.num_classes}), "
                f"got {len(data.palette)}"
            )
        for class_id, colour in enumerate(data.palette):
            if len(colour) != 3 or not all(0 <= c <= 255 for c in colour):
                raise ConfigError(f"config key 'data.palette[{class_id}]' must be [r, g, b] in 0..255, got {colour}")
        if len({tuple(c) for c in data.palette}) != len(data.palette):
            raise ConfigError("config key 'data.palette' lists the same colour twice")
    _check_inert(cfg)


def _check_mask_values(data: DataConfig) -> None:
    values = data.mask_values
    if values is None:
        return
    if data.palette is not None:
        raise ConfigError("config keys 'data.mask_values' (gray masks) and 'data.palette' (colour masks) exclude each "
                          "other; set one")
    if len(values) != data.num_classes or len(set(values)) != len(values) or min(values) < 0:
        raise ConfigError(f"config key 'data.mask_values' must list {data.num_classes} distinct values >= 0, one per "
                          f"class (data.num_classes), got {values}")
    if data.ignore_index is not None and data.ignore_index in values:
        raise ConfigError(f"config key 'data.ignore_index' {data.ignore_index} is also a class's value in "
                          f"data.mask_values {values}")


def _check_folds(data: DataConfig) -> None:
    if (data.fold is None) != (data.folds is None):
        raise ConfigError("config keys 'data.fold' and 'data.folds' are set together (train.py --fold K --folds N)")
    if data.fold is not None and data.fold >= data.folds:
        raise ConfigError(f"config key 'data.fold' must be in 0..{data.folds - 1} (data.folds = {data.folds}), got "
                          f"{data.fold}")


def _check_intensities(data: DataConfig) -> None:
    """Per-channel lists as long as data.in_channels, clip_low < clip_high; the toy set draws 1 or 3 channels."""
    if data.kind == "toy" and data.in_channels not in (1, 3):
        raise ConfigError(f"config key 'data.in_channels' must be 1 or 3 for the toy set, got {data.in_channels}")
    for name in ("mean", "std", "clip_low", "clip_high"):
        value = getattr(data, name)
        if isinstance(value, list) and len(value) != data.in_channels:
            raise ConfigError(f"config key 'data.{name}' must be one number or one per channel "
                              f"(data.in_channels = {data.in_channels}), got {len(value)} numbers")
    if (data.clip_low is None) != (data.clip_high is None):
        raise ConfigError("config keys 'data.clip_low' and 'data.clip_high' are set together (or both null)")
    if data.clip_low is not None and not all(low < high for low, high in zip(data.clip_low, data.clip_high)):
        raise ConfigError(f"config key 'data.clip_low' must be below data.clip_high channel by channel, got "
                          f"{data.clip_low} and {data.clip_high}")


def _check_augment(augment: AugmentConfig) -> None:
    """Each `*_range` / `blur_sigma` is [low, high] with 0 < low <= high."""
    for name in ("scale_range", "brightness_range", "contrast_range", "gamma_range", "blur_sigma"):
        bounds = getattr(augment, name)
        if len(bounds) != 2 or not 0 < bounds[0] <= bounds[1] or not all(math.isfinite(b) for b in bounds):
            raise ConfigError(f"config key 'data.augment.{name}' must be [low, high] with 0 < low <= high, "
                              f"got {bounds}")


def _check_class_weights(weights, num_classes: int) -> None:
    if weights is None:
        return
    if isinstance(weights, str):
        if weights != "auto":
            raise ConfigError(
                f"config key 'train.class_weights' must be null, auto or a list of numbers, got {weights!r}"
            )
        return
    if len(weights) != num_classes:
        raise ConfigError(
            f"config key 'train.class_weights' must list one weight per class ({num_classes}), got {len(weights)}"
        )
    for class_id, weight in enumerate(weights):
        if not (weight > 0.0 and math.isfinite(weight)):
            raise ConfigError(
                f"config key 'train.class_weights[{class_id}]' must be a finite number > 0, got {weight}"
            )


def config_from_dict(raw: Any) -> Config:
    """Validate a plain mapping (as read from YAML) and build a Config."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config must be a mapping of sections, got {type(raw).__name__}")
    for section in raw:
        if section not in _SECTION_CLASSES:
            raise ConfigError(f"unknown config section '{section}' (known: {', '.join(_SECTION_CLASSES)})")
    cfg = Config(**{name: _build_section(name, raw.get(name)) for name in _SECTION_CLASSES})
    _check_cross_fields(cfg)
    return cfg


def config_to_dict(cfg: Config) -> Dict[str, Any]:
    """Plain nested dict (only str/int/float/bool/None/list) — safe in checkpoints and YAML."""
    return dataclasses.asdict(cfg)


def apply_overrides(raw: Dict[str, Any], overrides: Sequence[str]) -> Dict[str, Any]:
    """Apply `section.key=value` (or `section.group.key=value`, e.g. data.augment.rotate_prob) strings, values parsed
    as YAML, to a raw config mapping, returning a new mapping."""
    merged = {section: dict(values or {}) for section, values in (raw or {}).items()}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects section.key=value, got {item!r}")
        dotted, text = item.split("=", 1)
        parts = dotted.strip().split(".")
        if len(parts) not in (2, 3) or not all(parts):
            raise ConfigError(f"--set key must look like section.key, got {dotted!r}")
        section, key = parts[:2]
        if section not in _SECTION_CLASSES:
            raise ConfigError(f"unknown config section '{section}' in --set {item!r}")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {dotted}: value {text!r} is not valid YAML ({exc})") from None
        if len(parts) == 3:
            group = merged.setdefault(section, {}).get(key)
            group = dict(group) if isinstance(group, dict) else {}
            group[parts[2]] = value
            value = group
        merged.setdefault(section, {})[key] = value
    return merged


def read_yaml(path: str | Path) -> Dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    return raw or {}


def load_config(path: Optional[str | Path], overrides: Sequence[str] = ()) -> Config:
    """Read a YAML file (or start from defaults when path is None), apply overrides, validate."""
    raw = read_yaml(path) if path is not None else {}
    return config_from_dict(apply_overrides(raw, overrides))


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
