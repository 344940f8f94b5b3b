"""The degraded selection set (paraformer_asr_tools/corpus/degraded_set.py, scripts/make_degraded_set.py): every
utterance keeps its length, text and fields, sounds different, gets its length tag; the same seed gives the same
files; bad settings and a missing manifest stop naming them."""

import json

import numpy as np
import soundfile

from asr_helpers import call_script, run_script
from paraformer_asr_tools.corpus.degraded_set import DEGRADED, PEAK, degradation


def _tiny_manifest(tmp_path) -> list[dict]:
    """Three utterances (a chirp at 16 kHz, one at 8 kHz, one segment of a longer file) with extra fields."""
    rng = np.random.default_rng(0)
    (tmp_path / "wavs").mkdir()
    records = []
    for name, rate, seconds, text in (("a", 16000, 0.6, "yes"), ("b", 8000, 0.9, "go forward ten meters and stop"),
                                      ("c", 16000, 1.5, "no")):
        t = np.arange(int(rate * seconds)) / rate
        wave = 0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t) + 0.01 * rng.standard_normal(t.shape)
        soundfile.write(tmp_path / "wavs" / f"{name}.wav", wave.astype(np.float32), rate, subtype="PCM_16")
        records.append({"audio": f"wavs/{name}.wav", "text": text, "id": name, "speaker": f"s{name}"})
    records[2].update(start_s=0.25, end_s=1.0)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def test_degraded_set_keeps_lengths_texts_and_fields_and_is_seeded(tmp_path):
    records = _tiny_manifest(tmp_path)
    run_script("make_degraded_set.py", "--manifest", "in.jsonl", "--out", "deg", "--long-chars", "20", cwd=tmp_path)
    lines = [json.loads(line) for line in (tmp_path / "deg" / "degraded.jsonl").read_text().splitlines()]
    assert [line["text"] for line in lines] == [r["text"] for r in records]
    assert [line["speaker"] for line in lines] == ["sa", "sb", "sc"]
    assert [line["length"] for line in lines] == ["short", "long", "short"]
    assert "start_s" not in lines[2] and "end_s" not in lines[2]  # the new file is the segment
    for line, samples in zip(lines, (9600, 14400, 12000)):  # 16 kHz; b resampled from 8 kHz; c's 0.75 s segment
        wave, rate = soundfile.read(line["audio"])
        assert rate == 16000 and wave.shape == (samples,) and np.abs(wave).max() <= PEAK + 1e-4
    original, _ = soundfile.read(tmp_path / "wavs" / "a.wav")
    degraded, _ = soundfile.read(lines[0]["audio"])
    assert np.abs(degraded - original).mean() > 0.01  # it sounds different
    summary = json.loads((tmp_path / "deg" / "degraded.json").read_text())
    assert summary["utterances"] == 3 and summary["long"] == 1 and summary["seed"] == 0
    assert summary["augment"]["reverb"]["p"] == DEGRADED["reverb"]["p"]

    for out, seed in (("once", 0), ("again", 0), ("other", 1)):  # in this process: the same thread count each time
        call_script("make_degraded_set.py", "--manifest", "in.jsonl", "--out", out, "--seed", seed, cwd=tmp_path)
    for name in ("00000.wav", "00001.wav", "00002.wav"):
        first = (tmp_path / "once" / "wavs" / name).read_bytes()
        assert (tmp_path / "again" / "wavs" / name).read_bytes() == first
        assert (tmp_path / "other" / "wavs" / name).read_bytes() != first


def test_settings_override_the_default_degradation_and_bad_ones_are_named(tmp_path):
    _tiny_manifest(tmp_path)
    changed = degradation(tmp_path / "in.jsonl", ["noise.snr_db=[0,5]", "telephone.p=0"])
    assert changed.noise.snr_db == [0.0, 5.0] and changed.telephone.p == 0.0 and changed.reverb.p == 1.0
    for flag, message in ((["--set", "noise.bogus=1"], "unknown config key 'data.augment.noise.bogus'"),
                          (["--set", "noise.p=3"], "'data.augment.noise.p' must be in [0, 1]"),
                          (["--long-chars", "0"], "--long-chars must be >= 1")):
        result = call_script("make_degraded_set.py", "--manifest", "in.jsonl", "--out", "x", *flag, cwd=tmp_path,
                             check=False)
        assert result.returncode == 2 and message in result.stderr, result.stderr
    result = call_script("make_degraded_set.py", "--manifest", "nope.jsonl", "--out", "x", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "manifest not found: nope.jsonl" in result.stderr
    assert not (tmp_path / "x").exists()
