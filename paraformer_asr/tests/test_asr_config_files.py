"""Config files and their bases: every shipped config resolves to the values frozen in
fixtures/shipped_configs_resolved.json (a config rewritten over a base must train exactly the same model; a new
config is added to the fixture as it is shipped), and the ``base`` key merges a base file under the file naming
it, recursively, with errors that name the file."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from paraformer_asr.config import config_from_dict, load_config, read_config_mapping, save_config
from paraformer_asr.errors import ConfigError

from asr_helpers import PROJECT

CONFIGS = PROJECT / "configs"
FROZEN = json.loads((Path(__file__).parent / "fixtures" / "shipped_configs_resolved.json").read_text(encoding="utf-8"))


def differences(expected: dict, actual: dict, prefix: str = "") -> list[str]:
    """Every dotted key whose value differs between two nested mappings, with both values."""
    found = []
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key, "<absent>"), actual.get(key, "<absent>")
        if isinstance(want, dict) and isinstance(got, dict):
            found += differences(want, got, f"{prefix}{key}.")
        elif want != got or type(want) is not type(got):
            found.append(f"{prefix}{key}: frozen {want!r}, now {got!r}")
    return found


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_shipped_config_resolves_to_its_frozen_values(name):
    resolved = json.loads(json.dumps(dataclasses.asdict(load_config(CONFIGS / name))))
    assert differences(FROZEN[name], resolved) == []


def test_every_shipped_config_is_frozen():
    assert {path.name for path in CONFIGS.glob("*.yaml")} == set(FROZEN)


def test_every_base_file_is_the_base_of_a_shipped_config():
    named = set()
    for path in CONFIGS.glob("*.yaml"):
        base = yaml.safe_load(path.read_text(encoding="utf-8")).get("base")
        if base:
            named.add((CONFIGS / base).resolve())
    assert {path.resolve() for path in (CONFIGS / "base").glob("*.yaml")} <= named


def test_differences_reports_changed_missing_and_retyped_values():
    assert differences({"a": {"b": 1, "c": 2.0}}, {"a": {"b": 1, "c": 2.0}}) == []
    assert differences({"a": {"b": 1, "c": 2.0}}, {"a": {"b": 3, "c": 2}}) == ["a.b: frozen 1, now 3",
                                                                               "a.c: frozen 2.0, now 2"]
    assert differences({"a": 1}, {}) == ["a: frozen 1, now '<absent>'"]


def write(path: Path, mapping: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(mapping), encoding="utf-8")
    return path


def test_a_file_overrides_its_base_key_by_key_and_sections_merge(tmp_path):
    write(tmp_path / "base.yaml", {"model": {"d_model": 64, "num_heads": 4, "streaming": {"left_chunks": 2}},
                                   "train": {"epochs": 3, "lr": 0.01}, "run": {"name": "from_base"}})
    task = write(tmp_path / "task.yaml", {"base": "base.yaml", "train": {"epochs": 2},
                                          "model": {"d_model": 32, "streaming": {"left_chunks": 1}}})
    assert read_config_mapping(task) == {"model": {"d_model": 32, "num_heads": 4, "streaming": {"left_chunks": 1}},
                                         "train": {"epochs": 2, "lr": 0.01}, "run": {"name": "from_base"}}
    cfg = load_config(task)
    assert (cfg.model.d_model, cfg.model.num_heads, cfg.model.streaming.left_chunks) == (32, 4, 1)
    assert (cfg.train.epochs, cfg.train.lr, cfg.run.name) == (2, 0.01, "from_base")


def test_lists_and_nulls_replace_the_bases_value_whole(tmp_path):
    write(tmp_path / "base.yaml", {"data": {"kind": "manifest", "train_manifest": "t.jsonl", "val_manifest": "v.jsonl",
                                            "speed_perturb": [0.9, 1.0, 1.1]},
                                   "model": {"streaming": {"enabled": True, "chunk_sizes": [8, 16, 0]}}})
    task = write(tmp_path / "task.yaml", {"base": "base.yaml", "data": {"speed_perturb": None},
                                          "model": {"streaming": {"chunk_sizes": [4]}}})
    cfg = load_config(task)
    assert cfg.data.speed_perturb is None and cfg.model.streaming.chunk_sizes == [4]


def test_a_base_chain_resolves_each_base_relative_to_the_file_naming_it(tmp_path):
    write(tmp_path / "bases" / "root.yaml", {"train": {"epochs": 5, "lr": 0.01, "batch_size": 8}})
    write(tmp_path / "bases" / "middle.yaml", {"base": "root.yaml", "train": {"lr": 0.02, "batch_size": 4}})
    task = write(tmp_path / "tasks" / "task.yaml", {"base": "../bases/middle.yaml", "train": {"batch_size": 2}})
    train = load_config(task).train
    assert (train.epochs, train.lr, train.batch_size) == (5, 0.02, 2)


def test_overrides_win_over_the_file_and_its_base(tmp_path):
    write(tmp_path / "base.yaml", {"train": {"epochs": 5, "lr": 0.01}})
    task = write(tmp_path / "task.yaml", {"base": "base.yaml", "train": {"epochs": 4}})
    train = load_config(task, ["train.epochs=3", "train.lr=0.5"]).train
    assert (train.epochs, train.lr) == (3, 0.5)


def test_a_missing_base_names_the_file_that_names_it(tmp_path):
    task = write(tmp_path / "task.yaml", {"base": "nowhere.yaml"})
    with pytest.raises(ConfigError, match=r"config file not found: .*nowhere\.yaml \(the base of .*task\.yaml\)"):
        load_config(task)


@pytest.mark.parametrize("base", [["a.yaml"], 3, ""])
def test_a_base_that_is_not_a_file_name_is_refused(tmp_path, base):
    task = write(tmp_path / "task.yaml", {"base": base})
    with pytest.raises(ConfigError, match=r"config file .*task\.yaml: 'base' must be the path of another config"):
        load_config(task)


def test_a_base_chain_that_comes_back_is_refused_naming_the_files(tmp_path):
    write(tmp_path / "a.yaml", {"base": "b.yaml"})
    write(tmp_path / "b.yaml", {"base": "a.yaml"})
    with pytest.raises(ConfigError, match=r"config file .*a\.yaml: its base chain comes back to it "
                                          r"\(.*a\.yaml -> .*b\.yaml -> .*a\.yaml\)"):
        load_config(tmp_path / "a.yaml")
    write(tmp_path / "self.yaml", {"base": "self.yaml"})
    with pytest.raises(ConfigError, match="self.yaml: its base chain comes back to it"):
        load_config(tmp_path / "self.yaml")


def test_a_file_that_is_not_a_mapping_is_refused_naming_it(tmp_path):
    (tmp_path / "list.yaml").write_text("- train\n- model\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config file .*list\.yaml must be a mapping of sections, got list"):
        load_config(tmp_path / "list.yaml")


def test_the_saved_config_is_the_resolved_one_and_loads_alone(tmp_path):
    cfg = load_config(CONFIGS / "paraformer_streaming.yaml", ["train.epochs=2"])
    save_config(cfg, tmp_path / "config.yaml")
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text(encoding="utf-8"))
    assert "base" not in saved and saved == dataclasses.asdict(cfg)
    assert config_from_dict(saved) == cfg and load_config(tmp_path / "config.yaml") == cfg
