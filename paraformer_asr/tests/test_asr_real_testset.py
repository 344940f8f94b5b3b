"""The real-recordings test set (paraformer_asr_tools/corpus/real_recordings.py, scripts/make_real_testset.py) on a fake
file system that mimics the layout of pocketsphinx-testdata, saytime and klettres-data."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile

from asr_helpers import call_script
from paraformer_asr.data.audio import audio_info
from paraformer_asr.errors import DataError
from paraformer_asr_tools.corpus.real_recordings import (FOLDERS, SOURCES, Clip, find_clips, number_words,
                                                         saytime_words, sphinx_transcripts, split_selection,
                                                         tidigits_words)


def tone(seconds: float, rate: int) -> np.ndarray:
    return 0.3 * np.sin(2 * np.pi * 220 * np.arange(round(seconds * rate)) / rate)


def fake_packages(root: Path, sources=SOURCES) -> None:
    """A few files of each package, in its own layout and formats."""
    if "pocketsphinx-testdata" in sources:
        data = root / FOLDERS["pocketsphinx-testdata"]
        (data / "cards").mkdir(parents=True)
        (data / "cards" / "cards.transcription").write_text(
            "<s> ten of clubs  </s> (001)\n<s> Five five </s> (002)\n", encoding="utf-8")
        for name in ("001", "002"):
            soundfile.write(data / "cards" / f"{name}.wav", tone(0.5, 16000), 16000)
        (data / "librivox").mkdir()
        (data / "librivox" / "transcription").write_text("<s> he was not an ill disposed young man </s> (b-0880)\n",
                                                         encoding="utf-8")
        soundfile.write(data / "librivox" / "b-0880.wav", tone(1.0, 22050), 22050)  # resampled to 16 kHz
        (tone(0.75, 16000) * 32767).astype("<i2").tofile(data / "goforward.raw")
        (data / "tidigits").mkdir()
        (tone(0.5, 16000) * 32767).astype("<i2").tofile(data / "tidigits" / "dhd.2934z.raw")
        (data / "numbers.raw").write_bytes(b"\0\0" * 100)  # no transcript: left out
    if "saytime" in sources:
        folder = root / FOLDERS["saytime"]
        folder.mkdir(parents=True)
        for name in ("0", "14", "40", "am", "oclock", "the_time_is"):
            soundfile.write(folder / f"{name}.au", tone(0.25, 8000), 8000, format="RAW", subtype="ULAW")
    if "klettres-data" in sources:
        folder = root / FOLDERS["klettres-data"]
        for path in ("en/alpha/A.ogg", "en/syllab/dog.ogg", "en/syllab/th.ogg", "en_GB/alpha/b.ogg",
                     "en_GB/syllab/well.ogg", "fr/alpha/A.ogg"):
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            soundfile.write(folder / path, tone(0.5, 44100), 44100, format="OGG", subtype="VORBIS")


EXPECTED = [  # (id, text, source, speaker) of the fake packages, in manifest order
    ("pocketsphinx-testdata-cards-001", "ten of clubs", "pocketsphinx-testdata", "pocketsphinx-cards"),
    ("pocketsphinx-testdata-cards-002", "five five", "pocketsphinx-testdata", "pocketsphinx-cards"),
    ("pocketsphinx-testdata-librivox-b-0880", "he was not an ill disposed young man", "pocketsphinx-testdata",
     "pocketsphinx-librivox"),
    ("pocketsphinx-testdata-goforward", "go forward ten meters", "pocketsphinx-testdata", "pocketsphinx-goforward"),
    ("pocketsphinx-testdata-tidigits-dhd.2934z", "two nine three four zero", "pocketsphinx-testdata", "tidigits-dhd"),
    ("saytime-0", "zero", "saytime", "saytime"),
    ("saytime-14", "fourteen", "saytime", "saytime"),
    ("saytime-40", "forty", "saytime", "saytime"),
    ("saytime-am", "a m", "saytime", "saytime"),
    ("saytime-oclock", "o'clock", "saytime", "saytime"),
    ("saytime-the_time_is", "the time is", "saytime", "saytime"),
    ("klettres-data-en-alpha-a", "a", "klettres-data", "klettres-en"),
    ("klettres-data-en-syllab-dog", "dog", "klettres-data", "klettres-en"),
    ("klettres-data-en_GB-alpha-b", "b", "klettres-data", "klettres-en_GB"),
    ("klettres-data-en_GB-syllab-well", "well", "klettres-data", "klettres-en_GB"),
]


def test_fake_packages_give_the_expected_manifest_and_16_khz_wavs(tmp_path):
    fake_packages(tmp_path / "root")
    out = tmp_path / "real"
    result = call_script("make_real_testset.py", "--out", out, "--root", tmp_path / "root", "--seed", "1",
                         cwd=tmp_path)
    assert "15 clips" in result.stdout and "saytime: 6 clips" in result.stdout
    lines = [json.loads(line) for line in (out / "all.jsonl").read_text().splitlines()]
    assert [(line["id"], line["text"], line["source"], line["speaker"]) for line in lines] == EXPECTED
    seconds = {}
    for line in lines:
        assert line["audio"].startswith(f"wavs/{line['source']}/") and line["audio"].endswith(".wav")
        info = audio_info(out / line["audio"])
        assert (info.sample_rate, info.channels) == (16000, 1)
        seconds[line["id"]] = info.num_frames / 16000
    assert seconds["pocketsphinx-testdata-librivox-b-0880"] == pytest.approx(1.0, abs=1e-3)  # 22.05 -> 16 kHz
    assert seconds["saytime-14"] == pytest.approx(0.25, abs=1e-3)  # 8 kHz mu-law -> 16 kHz
    assert seconds["pocketsphinx-testdata-goforward"] == pytest.approx(0.75, abs=1e-3)  # raw 16-bit read as 16 kHz
    assert (out / "texts.txt").read_text().splitlines() == sorted({text for _, text, _, _ in EXPECTED})
    parts = {name: [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
             for name in ("selection", "test")}
    assert sorted(line["id"] for part in parts.values() for line in part) == sorted(line["id"] for line in lines)
    for source in ("pocketsphinx-testdata", "klettres-data"):  # several speakers: split by speaker
        speakers = {name: {line["speaker"] for line in part if line["source"] == source}
                    for name, part in parts.items()}
        assert speakers["selection"] and speakers["test"] and not speakers["selection"] & speakers["test"]
    saytime = Counter(name for name, part in parts.items() for line in part if line["source"] == "saytime")
    assert saytime == {"selection": 2, "test": 4}  # one speaker: split by clip, round(0.25 x 6) set aside
    summary = json.loads((out / "testset.json").read_text())
    assert summary["clips"] == 15 and summary["sources"]["saytime"]["clips"] == 6
    assert summary["sources"]["klettres-data"]["speakers"] == ["klettres-en", "klettres-en_GB"]


def test_missing_packages_are_named_with_their_install_command(tmp_path):
    fake_packages(tmp_path, sources=("saytime",))
    with pytest.raises(DataError, match=r"not installed: pocketsphinx-testdata \(no recordings in .*usr/share/"
                                        r"pocketsphinx/test/data\); klettres-data .*apt-get install "
                                        r"pocketsphinx-testdata klettres-data; or name the installed ones"):
        find_clips(tmp_path, SOURCES)
    assert len(find_clips(tmp_path, ["saytime"])) == 6
    result = call_script("make_real_testset.py", "--out", tmp_path / "o", "--root", tmp_path, cwd=tmp_path,
                         check=False)
    assert result.returncode == 2 and "error: not installed: pocketsphinx-testdata" in result.stderr
    result = call_script("make_real_testset.py", "--out", tmp_path / "o", "--sources", "saytime,festival",
                         cwd=tmp_path, check=False)
    assert result.returncode == 2 and "--sources: unknown package(s) festival" in result.stderr
    assert not (tmp_path / "o").exists()


def test_words_from_file_names_and_transcription_files(tmp_path):
    assert [number_words(n) for n in (0, 13, 20, 42, 99)] == ["zero", "thirteen", "twenty", "forty two",
                                                              "ninety nine"]
    assert [saytime_words(s) for s in ("7", "50", "pm", "oh", "hours", "the_time_is")] == [
        "seven", "fifty", "p m", "oh", "hours", "the time is"]
    assert tidigits_words("man.ah.o789a") == "oh seven eight nine" and tidigits_words("woman.ak.1b") == "one"
    with pytest.raises(DataError, match="does not spell digits"):
        tidigits_words("dhd.29x4")
    path = tmp_path / "t.transcription"
    path.write_text("<s> Eight of SPADES </s> (005)\n\n<s> had he married a more a amiable woman </s> (x-1)\n")
    assert sphinx_transcripts(path) == {"005": "eight of spades", "x-1": "had he married a more a amiable woman"}
    path.write_text("<s> no id here </s>\n")
    with pytest.raises(DataError, match="t.transcription, line 1: expected"):
        sphinx_transcripts(path)


def test_selection_split_is_seeded_and_keeps_test_speakers_apart():
    clips = [Clip("multi", f"s{i % 4}", f"c{i}", "x", Path("x")) for i in range(40)] + \
            [Clip("single", "one", f"d{i}", "x", Path("x")) for i in range(10)]
    for seed in range(10):
        split = split_selection(clips, 0.25, seed)
        assert split == split_selection(clips, 0.25, seed)
        chosen = {clip.speaker for clip in clips if clip.source == "multi" and split[clip.id] == "selection"}
        kept = {clip.speaker for clip in clips if clip.source == "multi" and split[clip.id] == "test"}
        assert len(chosen) == 1 and len(kept) == 3  # 10 clips a speaker: one reaches a quarter of 40
        assert sum(split[f"single-d{i}"] == "selection" for i in range(10)) == 2  # round(2.5): banker's, 2
    assert len({tuple(sorted(split_selection(clips, 0.25, seed).items())) for seed in range(10)}) > 1
    two = [Clip("pair", "a", "1", "x", Path("x")), Clip("pair", "b", "2", "x", Path("x"))]
    assert sorted(split_selection(two, 0.9, 0).values()) == ["selection", "test"]  # one speaker is always tested
