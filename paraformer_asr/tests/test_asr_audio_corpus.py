"""scripts/make_speech_corpus.py on a tiny run: valid WAVs and manifests, speaker variants disjoint across splits."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paraformer_asr.data.manifest import read_manifest
from paraformer_asr.data.audio import read_audio

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "make_speech_corpus.py"


def run_script(*args, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed (apt-get install espeak-ng)")
def test_tiny_corpus_is_valid_and_split_by_voice(tmp_path):
    out = tmp_path / "speech"
    result = run_script("--out", str(out), "--num-train", "2", "--num-val", "2", "--num-test", "2", "--seed", "3",
                        "--min-digits", "2", "--max-digits", "4", "--jobs", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(out)
    summary = json.loads((out / "corpus.json").read_text())
    used = {}
    for split in ("train", "val", "test"):
        entries = read_manifest(out / f"{split}.jsonl")
        assert len(entries) == 2 and summary["splits"][split]["utterances"] == 2
        for entry in entries:
            assert entry.text.isdigit() and 2 <= len(entry.text) <= 4
            samples, rate = read_audio(entry.audio_path)
            assert rate == 16000 and samples.shape[0] == 1
            assert 0.3 < samples.shape[1] / rate < 10 and samples.abs().max() > 0.2
        used[split] = set(summary["splits"][split]["variants_used"])
        assert used[split] <= set(summary["splits"][split]["variants"])
        assert summary["splits"][split]["hours"] > 0
    variants = [set(summary["splits"][split]["variants"]) for split in ("train", "val", "test")]
    assert not (variants[0] & variants[1] or variants[0] & variants[2] or variants[1] & variants[2])
    assert not any(name.startswith("espeak_") for name in os.listdir(out))  # scratch folder removed


def test_bad_arguments_and_missing_espeak_exit_2(tmp_path):
    result = run_script("--out", str(tmp_path), "--min-digits", "0")
    assert result.returncode == 2 and "error: need 1 <= --min-digits" in result.stderr
    env = {**os.environ, "PATH": str(tmp_path)}  # no espeak-ng on this PATH
    result = run_script("--out", str(tmp_path / "x"), "--num-train", "1", env=env)
    assert result.returncode == 2 and "apt-get install espeak-ng" in result.stderr


def _corpus_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("asr_corpus_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("transcript", ["tokens", "spoken"])
def test_transcript_is_the_digit_string_or_the_spoken_words(tmp_path, transcript):
    script = _corpus_script()
    args = script.parse_args(["--out", str(tmp_path), "--num-train", "5", "--num-val", "0", "--num-test", "0",
                              "--min-digits", "6", "--max-digits", "12", "--transcript", transcript])
    variants = {"train": ["m1"], "val": ["f1"], "test": ["m2"]}
    plans = script.plan_utterances(args, script.load_vocabulary(None), variants)
    assert len(plans) == 5
    for plan in plans:
        words = plan.spoken.split(" ")
        assert 6 <= len(words) <= 12 and set(words) <= set(script.DIGIT_WORDS.values())
        digits = "".join({word: digit for digit, word in script.DIGIT_WORDS.items()}[w] for w in words)
        assert plan.text == (plan.spoken if transcript == "spoken" else digits)
