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
from paraformer_asr_tools.corpus import utterance_plans

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "make_speech_corpus.py"

from asr_helpers import load_script


def run_script(*args, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False)


@pytest.mark.slow
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


@pytest.mark.slow
def test_bad_arguments_and_missing_espeak_exit_2(tmp_path):
    result = run_script("--out", str(tmp_path), "--min-digits", "0")
    assert result.returncode == 2 and "error: need 1 <= --min-digits" in result.stderr
    env = {**os.environ, "PATH": str(tmp_path)}  # no espeak-ng on this PATH
    result = run_script("--out", str(tmp_path / "x"), "--num-train", "1", env=env)
    assert result.returncode == 2 and "apt-get install espeak-ng" in result.stderr


@pytest.mark.parametrize("transcript", ["tokens", "spoken"])
def test_transcript_is_the_digit_string_or_the_spoken_words(tmp_path, transcript):
    script = load_script("make_speech_corpus")
    args = script.parse_args(["--out", str(tmp_path), "--num-train", "5", "--num-val", "0", "--num-test", "0",
                              "--min-digits", "6", "--max-digits", "12", "--transcript", transcript])
    variants = {"train": ["m1"], "val": ["f1"], "test": ["m2"]}
    plans = utterance_plans.plan_utterances(args, utterance_plans.load_vocabulary(None), variants)
    assert len(plans) == 5
    for plan in plans:
        words = plan.spoken.split(" ")
        assert 6 <= len(words) <= 12 and set(words) <= set(utterance_plans.DIGIT_WORDS.values())
        digits = "".join({word: digit for digit, word in utterance_plans.DIGIT_WORDS.items()}[w] for w in words)
        assert plan.text == (plan.spoken if transcript == "spoken" else digits)


def test_audible_span_and_joined_word_times():
    import torch

    from paraformer_asr_tools.corpus.word_timing import audible_span, draw_pauses, join_words

    rate = 16000
    tone = 0.5 * torch.sin(torch.arange(1600) * 0.3)  # 100 ms
    clip = torch.cat([torch.zeros(800), tone, torch.zeros(1600)])  # 50 ms silence, 100 ms tone, 100 ms silence
    first, last = audible_span(clip, rate)
    assert abs(first - 800) <= 40 and abs(last - 2400) <= 40  # within the 5 ms energy window
    assert audible_span(torch.zeros(100), rate) == (0, 0)
    waveform, words = join_words(["a", "b"], [clip, clip], [0.2], 0.1, 0.05, rate)
    assert [w["word"] for w in words] == ["a", "b"]
    length = (last - first) / rate * 1000
    assert words[0]["start_ms"] == 100.0 and words[0]["end_ms"] == pytest.approx(100.0 + length, abs=0.1)
    assert words[1]["start_ms"] == pytest.approx(words[0]["end_ms"] + 200.0, abs=0.1)
    assert waveform.numel() == round((100 + 2 * length + 200 + 50) * rate / 1000)
    assert draw_pauses(3, 7) == draw_pauses(3, 7) and len(draw_pauses(3, 7)[0]) == 3
    with pytest.raises(ValueError, match="silent"):
        join_words(["a"], [torch.zeros(10)], [], 0.0, 0.0, rate)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed (apt-get install espeak-ng)")
def test_word_times_corpus_has_words_where_the_audio_is_loud(tmp_path):
    import torch

    out = tmp_path / "timed"
    result = run_script("--out", str(out), "--num-train", "2", "--num-val", "0", "--num-test", "0", "--seed", "5",
                        "--min-digits", "2", "--max-digits", "3", "--transcript", "spoken", "--word-times")
    assert result.returncode == 0, result.stderr
    entries = read_manifest(out / "train.jsonl")
    assert json.loads((out / "corpus.json").read_text())["word_times"] is True
    for entry in entries:
        assert [w["word"] for w in entry.words] == entry.text.split()
        samples, rate = read_audio(entry.audio_path)
        samples = samples[0].double()
        times = [t for w in entry.words for t in (w["start_ms"], w["end_ms"])]
        assert times == sorted(times) and 0 <= times[0] and times[-1] <= 1000 * samples.numel() / rate

        def level_db(start_ms, end_ms):
            part = samples[int(start_ms * rate / 1000):int(end_ms * rate / 1000)]
            return float(10 * torch.log10(part.square().mean()))

        for word, following in zip(entry.words, entry.words[1:]):
            pause = level_db(word["end_ms"] + 5, following["start_ms"] - 5)  # noise only
            assert level_db(word["start_ms"], word["end_ms"]) > pause + 15
    refused = run_script("--out", str(tmp_path / "x"), "--word-times")
    assert refused.returncode == 2 and "--transcript spoken" in refused.stderr
