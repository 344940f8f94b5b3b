"""Generated mutations of every shipped config (configs/*.yaml, its bases merged in): a value of the wrong type, an
unknown key, or a number out of range (negative, NaN, infinite) is refused with a ConfigError naming the key, never
a traceback.

Every numeric setting of the package is non-negative, so a negative, NaN or infinite value is always out of range.
"""

import copy
import dataclasses
import math
import re
import typing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paraformer_asr.config import Config, config_from_dict, read_config_mapping
from paraformer_asr.errors import ConfigError

from asr_fuzz import FAST, SLOW

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
SHIPPED = {path.name: read_config_mapping(path) for path in CONFIGS}


def leaf_fields(cls: type = Config, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], typing.Any]]:
    """(key path, annotation) of every setting of the config schema, sections first."""
    found = []
    for name, hint in typing.get_type_hints(cls).items():
        path = prefix + (name,)
        if dataclasses.is_dataclass(hint):
            found.append((path, "section"))
            found += leaf_fields(hint, path)
        else:
            found.append((path, hint))
    return found


FIELDS = leaf_fields()
NUMERIC = [(path, hint) for path, hint in FIELDS if hint in (int, float, typing.Optional[int])]
LETTERS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)  # never a number, never a choice


def wrong_values(hint) -> st.SearchStrategy:
    """Values of a type ``hint`` refuses (None only where the setting is not optional)."""
    scalars = {int: st.one_of(LETTERS, st.floats(0.5, 1e6).filter(lambda v: not v.is_integer()), st.booleans()),
               float: st.one_of(LETTERS, st.booleans()),
               bool: st.one_of(LETTERS, st.integers(-3, 3)),
               str: st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans())}
    containers = st.one_of(st.lists(st.integers(), max_size=2), st.dictionaries(LETTERS, st.integers(), max_size=2))
    if hint == "section":
        return st.one_of(st.integers(), LETTERS, st.lists(st.integers(), max_size=2))
    if hint == list[float] or hint == typing.Optional[list[float]] or hint == list[int]:
        return st.one_of(LETTERS, st.integers(), st.lists(LETTERS, min_size=1, max_size=2))
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    base = args[0] if args else hint
    values = st.one_of(scalars[base], containers)
    return values if args else st.one_of(values, st.none())


def out_of_range(hint) -> st.SearchStrategy:
    if hint in (int, typing.Optional[int]):
        return st.integers(-10**9, -1)
    return st.one_of(st.floats(max_value=-1e-9, allow_infinity=False), st.sampled_from([math.nan, math.inf, -math.inf]))


@st.composite
def mutated_config(draw) -> tuple[str, dict, str]:
    """-> (shipped config name, its mapping with one mutation, the dotted key the error must name)."""
    name = draw(st.sampled_from(sorted(SHIPPED)))
    raw = copy.deepcopy(SHIPPED[name])
    mutation = draw(st.sampled_from(("wrong type", "unknown key", "out of range")))
    if mutation == "unknown key":
        sections = [()] + [path for path, hint in FIELDS if hint == "section"]
        path = draw(st.sampled_from(sections)) + (draw(LETTERS.map(lambda key: "x_" + key)),)
        value = draw(st.integers())
    elif mutation == "wrong type":
        path, hint = draw(st.sampled_from(FIELDS))
        value = draw(wrong_values(hint))
    else:
        path, hint = draw(st.sampled_from(NUMERIC))
        value = draw(out_of_range(hint))
    node = raw
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    return name, raw, ".".join(path)


def check_refused(case: tuple[str, dict, str]) -> None:
    name, raw, key = case
    with pytest.raises(ConfigError) as refused:
        config_from_dict(raw)
    named = re.search(rf"'{re.escape(key)}(\[\d+\])?'", str(refused.value))  # the key, or one item of a list
    assert named, (name, key, str(refused.value))


SHIPPED_NAMES = {"paraformer_librispeech.yaml", "paraformer_numbers.yaml", "paraformer_speech.yaml",
                 "paraformer_streaming.yaml", "paraformer_toy.yaml", "quick.yaml", "transformer_ar_numbers.yaml",
                 "transformer_ar_speech.yaml", "transformer_ar_toy.yaml"}


def test_every_shipped_config_is_valid_and_every_setting_is_generated():
    assert set(SHIPPED) == SHIPPED_NAMES  # a config added or gone is seen here, and the fuzzing covers it
    for raw in SHIPPED.values():
        config_from_dict(raw)
    assert len(NUMERIC) >= 40


@settings(FAST, max_examples=25)
@given(case=mutated_config())
def test_mutated_configs_are_refused_naming_the_key(case):
    check_refused(case)


@pytest.mark.slow
@settings(SLOW, max_examples=500)
@given(case=mutated_config())
def test_mutated_configs_are_refused_naming_the_key_many(case):
    check_refused(case)
