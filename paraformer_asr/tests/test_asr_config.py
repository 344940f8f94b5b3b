import dataclasses

import pytest
import yaml

from paraformer_asr.cli import run_main
from paraformer_asr.config import config_from_dict, load_config
from paraformer_asr.errors import ConfigError

from asr_helpers import PROJECT, load_script, tiny_raw_config


def test_shipped_configs_load():
    for name in ("quick.yaml", "paraformer_toy.yaml"):
        cfg = load_config(PROJECT / "configs" / name)
        assert cfg.model.type == "paraformer" and cfg.data.kind == "toy"
    speech = load_config(PROJECT / "configs" / "paraformer_speech.yaml")
    assert speech.data.kind == "manifest" and speech.data.n_mels == 80 and speech.data.spec_augment.time_masks > 0
    assert not speech.model.streaming.enabled
    streaming = load_config(PROJECT / "configs" / "paraformer_streaming.yaml")
    assert streaming.model.streaming.enabled and 0 in streaming.model.streaming.chunk_sizes
    # the same recipe but the glancing ratio, which the streaming config keeps at the value it was measured with
    assert streaming.model == dataclasses.replace(speech.model, streaming=streaming.model.streaming,
                                                  glancing_ratio=streaming.model.glancing_ratio)


def test_overrides_are_parsed_as_yaml_and_checked():
    cfg = config_from_dict({}, ["train.lr=3e-4", "model.subsampling=2x", "train.max_steps=null"])
    assert cfg.train.lr == pytest.approx(3e-4)
    assert cfg.subsampling_factor == 2 and cfg.train.max_steps is None


BAD_CONFIGS = [
    ({"train": {"lrr": 1.0}}, "unknown config key 'train.lrr'"),
    ({"trian": {}}, "unknown config key 'trian'"),
    ({"train": {"lr": -1.0}}, "config key 'train.lr' must be > 0, got -1.0"),
    ({"train": {"batch_size": "big"}}, "config key 'train.batch_size' must be an integer"),
    ({"train": {"batch_size": 0}}, "config key 'train.batch_size' must be >= 1"),
    ({"train": {"amp": "yes"}}, "config key 'train.amp' must be true or false"),
    ({"model": {"d_model": 30, "num_heads": 4}}, "config key 'model.d_model' must be divisible"),
    ({"model": {"subsampling": "3x"}}, "config key 'model.subsampling' must be one of"),
    ({"model": {"type": "rnn"}}, "config key 'model.type' must be one of"),
    ({"model": {"glancing_ratio": 1.5}}, "config key 'model.glancing_ratio' must be in [0, 1]"),
    ({"model": {"decoder_fsmn_kernel": 4}}, "config key 'model.decoder_fsmn_kernel' must be 0 (self-attention) or odd"),
    ({"model": {"decoder_fsmn_kernel": -3}}, "config key 'model.decoder_fsmn_kernel' must be 0 (self-attention)"),
    ({"model": {"type": "transformer_ar", "decoder_fsmn_kernel": 5}},
     "config key 'model.decoder_fsmn_kernel' must be 0 for the autoregressive model"),
    ({"model": {"type": "transformer_ar", "decoder_positions": False}},
     "config key 'model.decoder_positions' must be true for the autoregressive model"),
    ({"data": {"kind": "manifest"}}, "config key 'data.train_manifest' must be set"),
    ({"data": {"toy": {"alphabet": "aab"}}}, "config key 'data.toy.alphabet' must be free of repeated"),
    ({"data": {"toy": {"min_tokens": 5, "max_tokens": 2}}}, "config key 'data.toy.max_tokens'"),
    ({"run": {"device": "tpu"}}, "config key 'run.device' must be one of"),
    ({"data": {"kind": "manifest", "train_manifest": "t.jsonl", "val_manifest": "v.jsonl",
               "voice_perturb": {"max_warp": 1.2}}}, "config key 'data.voice_perturb.max_warp' must be in [0, 1)"),
    ({"data": {"voice_perturb": {"envelope_terms": 4, "envelope_max_db": 6}}},
     "config key 'data.voice_perturb' must be off (zeros) for toy data"),
    ({"data": {"voice_perturb": {"envelope_max_db": -3}}}, "config key 'data.voice_perturb.envelope_max_db' must be"),
    ({"data": {"kind": "manifest", "train_manifest": "t.jsonl", "val_manifest": "v.jsonl", "edge_pad_ms": -50}},
     "config key 'data.edge_pad_ms' must be >= 0"),
    ({"data": {"edge_pad_ms": 300}}, "config key 'data.edge_pad_ms' must be 0 for toy data"),
]


@pytest.mark.parametrize("raw, message", BAD_CONFIGS)
def test_bad_config_raises_config_error_naming_the_key(raw, message):
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    assert message in str(info.value)


def test_train_script_reports_bad_config_with_exit_2(tmp_path, capsys):
    script = load_script("train")
    raw = tiny_raw_config(str(tmp_path / "runs"))
    raw["train"]["lr"] = -1.0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert run_main(script.main, ["--config", str(path)]) == 2
    assert "error: config key 'train.lr' must be > 0, got -1.0" in capsys.readouterr().err
    assert run_main(script.main, ["--config", str(tmp_path / "missing.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err
    assert run_main(script.main, ["--config", str(PROJECT / "configs" / "quick.yaml"), "--set", "train.epochs=x"]) == 2
    assert "config key 'train.epochs' must be an integer" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
