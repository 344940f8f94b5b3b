"""Reading a config: YAML or a plain mapping -> Config, with ``--set section.key=value`` overrides applied to the
raw mapping first and every value checked against its key's type (unknown keys and wrong types raise
ConfigError naming the key); validation.py then checks ranges and cross-field rules.

A config file may name another as its base (``base: ../base/paraformer.yaml``, relative to the file that names
it): the base's mapping, itself read with its own base, is merged under the file's keys, section by section
(a key the file sets wins; a list or a scalar replaces the base's whole; a mapping is merged key by key)."""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from paraformer_asr.config.schema import Config
from paraformer_asr.config.validation import validate
from paraformer_asr.errors import ConfigError

BASE_KEY = "base"  # the top-level key of a config file that names the file it starts from


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (ints are accepted for floats)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], key)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"config key '{key}' must be a list, got {value!r}")
        (item_type,) = typing.get_args(tp)
        return [_coerce(item, item_type, f"{key}[{index}]") for index, item in enumerate(value)]
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' must be a mapping, got {value!r}")
        return _build(tp, value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{key}' must be {_type_name(bool)}, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key '{key}' must be {_type_name(int)}, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str) and _looks_like_number(value):
            value = float(value)  # YAML 1.1 reads '1e-3' as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"config key '{key}' must be a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"config key '{key}' must be {_type_name(str)}, got {value!r}")
        return value
    raise TypeError(f"unsupported config annotation {tp!r} for '{key}'")


def _build(cls: type, data: dict, prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            full = f"{prefix}.{key}" if prefix else str(key)
            raise ConfigError(f"unknown config key '{full}' (known keys: {', '.join(sorted(known))})")
    kwargs = {}
    for name, f in known.items():
        if name not in data:
            continue
        full = f"{prefix}.{name}" if prefix else name
        value = _coerce(data[name], hints[name], full)
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            raise ConfigError(f"config key '{full}' must be one of {list(choices)}, got {value!r}")
        kwargs[name] = value
    return cls(**kwargs)


def parse_override(text: str) -> tuple[list[str], Any]:
    """'train.lr=3e-4' -> (['train', 'lr'], 0.0003); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set expects section.key=value, got {text!r}")
    key, raw = text.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if len(parts) < 2:
        raise ConfigError(f"--set key must look like section.key, got {key!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc})") from exc
    return parts, value


def _looks_like_number(text: str) -> bool:
    """True for strings such as '1e-3' (which YAML 1.1 leaves as strings)."""
    try:
        float(text)
    except ValueError:
        return False
    return any(c.isdigit() for c in text)


def _apply_override(raw: dict, parts: list[str], value: Any) -> None:
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {'.'.join(parts)}: '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def config_from_dict(raw: dict, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Build and validate a Config from a plain mapping plus ``section.key=value`` overrides."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config must be a mapping of sections, got {type(raw).__name__}")
    raw = copy.deepcopy(raw)
    for text in overrides:
        _apply_override(raw, *parse_override(text))
    return validate(_build(Config, raw, ""))


def _merge_under(base: dict, own: dict) -> dict:
    """``own`` merged over ``base``, recursively: a key of ``own`` wins, except that two mappings are merged key by
    key; lists and scalars replace the base's whole. Neither argument is changed."""
    merged = copy.deepcopy(base)
    for key, value in own.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge_under(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _read_yaml_mapping(path: Path) -> dict:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must be a mapping of sections, got {type(raw).__name__}")
    return raw


def read_config_mapping(path: str | Path) -> dict:
    """The raw mapping of a config file with its chain of ``base`` files merged under it (nothing checked yet).
    A missing file, a ``base`` that is not a file name, or a chain that comes back to a file raise ConfigError
    naming the file."""
    return _read_with_bases(Path(path), named_by=())


def _read_with_bases(path: Path, named_by: tuple[Path, ...]) -> dict:
    """``path``'s mapping over its bases; ``named_by``: the files (resolved) whose base chain led to it."""
    if not path.is_file():
        base_of = f" (the base of {named_by[-1]})" if named_by else ""
        raise ConfigError(f"config file not found: {path}{base_of}")
    if path.resolve() in named_by:
        chain = " -> ".join(str(file) for file in named_by + (path.resolve(),))
        raise ConfigError(f"config file {path}: its base chain comes back to it ({chain})")
    raw = _read_yaml_mapping(path)
    base = raw.pop(BASE_KEY, None)
    if base is None:
        return raw
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"config file {path}: '{BASE_KEY}' must be the path of another config file relative to "
                          f"it, got {base!r}")
    return _merge_under(_read_with_bases(path.parent / base, named_by + (path.resolve(),)), raw)


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config file and its bases, apply overrides, validate. Raises ConfigError naming file or key."""
    return config_from_dict(read_config_mapping(path), overrides)


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config, every key with its value (bases merged, overrides applied), with no ``base``."""
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8")
