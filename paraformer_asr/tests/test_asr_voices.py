"""Many synthetic voices (paraformer_asr_tools/corpus/voices.py, make_speech_corpus.py --engines, --text,
--stretch-range): the voice split by speaker across engines, the per-engine commands, festival's batches, the engine
draw."""

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from asr_helpers import load_script
from paraformer_asr.errors import DataError, UserError
from paraformer_asr_tools.corpus import synthesis, utterance_plans, voices
from paraformer_asr_tools.corpus.speech_corpus import command_phrases, load_text, normalise_transcript
from paraformer_asr_tools.corpus.voices import Reading, Voice

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "make_speech_corpus.py"
RECORDED = [  # the flite and festival voices of a Debian install (flite; festvox-kallpc16k, -kdlpc16k, -us-slt-hts)
    Voice("flite", "kal", "kal", "en-us"), Voice("flite", "kal16", "kal", "en-us"),
    Voice("flite", "awb", "awb", "en-gb-scotland"), Voice("flite", "rms", "rms", "en-us"),
    Voice("flite", "slt", "slt", "en-us"), Voice("festival", "cmu_us_slt_arctic_hts", "slt", "en-us"),
    Voice("festival", "ked_diphone", "ked", "en-us"), Voice("festival", "kal_diphone", "kal", "en-us"),
]
ESPEAK_VARIANTS = {"train": ["m1", "f1", "m3"], "val": ["f2"], "test": ["m2"]}


def corpus_args(tmp_path, *extra, num_train="300", num_val="60", num_test="60"):
    return load_script("make_speech_corpus").parse_args(
        ["--out", str(tmp_path), "--num-train", num_train, "--num-val", num_val, "--num-test", num_test,
         "--phrases", "commands", *extra])


def test_voice_split_keeps_each_person_of_every_engine_in_one_split():
    for seed in range(20):
        splits = voices.split_speakers(RECORDED, seed, 0.12, 0.15)
        assert Counter(v for split in splits.values() for v in split) == Counter(RECORDED)  # each voice once
        split_of_pair = {}
        for split, chosen in splits.items():
            for voice in chosen:
                assert split_of_pair.setdefault((voice.engine, voice.speaker), split) == split
        split_of_person = {}
        for split, chosen in splits.items():
            for voice in chosen:  # flite's kal, kal16 and festival's kal_diphone are one man
                assert split_of_person.setdefault(voice.speaker, split) == split
        assert [len({v.speaker for v in splits[s]}) for s in ("train", "val", "test")] == [3, 1, 1]  # 5 people
    assert voices.split_speakers(RECORDED, 3, 0.12, 0.15) == voices.split_speakers(RECORDED, 3, 0.12, 0.15)
    assert len({str(voices.split_speakers(RECORDED, seed, 0.12, 0.15)["test"]) for seed in range(20)}) > 2
    with pytest.raises(UserError, match="at least 3 speakers.*festival:kal_diphone"):
        voices.split_speakers([RECORDED[0], RECORDED[-1], RECORDED[3]], 0, 0.12, 0.15)  # kal, kal, rms: 2 people


def test_speaker_behind_a_voice_name():
    names = ["cmu_us_slt_arctic_hts", "kal_diphone", "kal16", "kal", "awb", "nitech_us_bdl_arctic_hts",
             "cmu_us_awb_cg", "rab_diphone"]
    assert [voices.speaker_of(name) for name in names] == ["slt", "kal", "kal", "kal", "awb", "bdl", "awb", "rab"]


def test_planned_utterances_never_share_an_engine_speaker_between_splits(tmp_path):
    args = corpus_args(tmp_path)
    recorded = voices.split_speakers(RECORDED, 0, 0.12, 0.15)
    phrases = utterance_plans.phrases_per_split(command_phrases(), None, 0)[0]
    plans = utterance_plans.plan_utterances(args, {}, ESPEAK_VARIANTS, None, phrases, recorded)
    pairs = {split: {(plan.engine, plan.variant) for plan in plans if plan.split == split}
             for split in ("train", "val", "test")}
    assert not pairs["train"] & pairs["val"] and not pairs["train"] & pairs["test"] and not pairs["val"] & pairs["test"]
    people = {split: {speaker for engine, speaker in pairs[split] if engine != "espeak"} for split in pairs}
    assert not people["train"] & (people["val"] | people["test"])  # a person is not heard in training by another engine
    train = [plan for plan in plans if plan.split == "train"]
    engines = Counter(plan.engine for plan in train)
    assert set(engines) == {"espeak", "flite", "festival"} and all(80 <= n <= 120 for n in engines.values())  # 1/3 each
    for plan in plans:
        if plan.engine == "espeak":
            assert plan.voice == f"{plan.accent}+{plan.variant}"
        else:
            voice = next(v for v in RECORDED if v.engine == plan.engine and v.name == plan.voice)
            assert (plan.variant, plan.accent) == (voice.speaker, voice.accent)
    assert utterance_plans.plan_utterances(args, {}, ESPEAK_VARIANTS, None, phrases, recorded) == plans  # seeded


def test_espeak_only_plans_are_the_same_with_or_without_an_empty_voice_list(tmp_path):
    args = corpus_args(tmp_path)
    plain = utterance_plans.plan_utterances(args, {}, ESPEAK_VARIANTS, None, {s: ["stop"] for s in ESPEAK_VARIANTS})
    empty = utterance_plans.plan_utterances(args, {}, ESPEAK_VARIANTS, None, {s: ["stop"] for s in ESPEAK_VARIANTS},
                                          {split: [] for split in ESPEAK_VARIANTS})
    assert plain == empty and {plan.engine for plan in plain} == {"espeak"}
    assert {plan.stretch for plan in plain} == {1.0}  # the default --stretch-range draws no stretch


def test_stretch_is_drawn_from_its_range_and_played_at_a_rounded_rate(tmp_path):
    args = corpus_args(tmp_path, "--stretch-range", "0.9", "1.1", num_val="0", num_test="0")
    stretches = [plan.stretch for plan in utterance_plans.plan_utterances(args, {}, ESPEAK_VARIANTS, None,
                                                                         {"train": ["stop"]})]
    assert 0.9 <= min(stretches) < 0.92 and 1.08 < max(stretches) <= 1.1
    assert synthesis.played_rate(22050, 1.0) == 22050  # unstretched: the engine's own rate, no rounding
    assert synthesis.played_rate(16000, 1.1) == 14500 and synthesis.played_rate(8000, 0.9) == 8900
    assert abs(16000 / synthesis.played_rate(16000, 1.07) - 1.07) < 0.004


def test_engine_commands_carry_rate_pitch_and_voice():
    reading = Reading("turn it on", Path("/tmp/x.wav"), 175, 50)
    assert voices.espeak_command("en-us+m1", reading, 2) == [
        "espeak-ng", "-v", "en-us+m1", "-s", "175", "-p", "50", "-g", "2", "-w", "/tmp/x.wav", "turn it on"]
    assert voices.flite_command("slt", reading) == [
        "flite", "-voice", "slt", "--setf", "duration_stretch=1.0000", "--setf", "f0_shift=1.0000", "-t", "turn it on",
        "-o", "/tmp/x.wav"]
    slow_high = voices.flite_command("kal16", Reading("-5 it's", Path("y.wav"), 140, 85))
    assert slow_high[4:9:2] == ["duration_stretch=1.2500", "f0_shift=1.4142", "-5 it's"]  # 175/140; 2^(35/70)
    assert voices.duration_factor(350) == 0.5 and voices.f0_factor(50 - 70) == 0.5  # an octave down


def test_festival_script_reads_every_utterance_of_one_voice_in_one_program():
    readings = [Reading('say "hi" \\ there', Path("/s/a.wav"), 175, 50), Reading("two", Path("/s/b.wav"), 350, 120)]
    lines = voices.festival_script("kal_diphone", readings).splitlines()
    assert lines[0] == "(voice_kal_diphone)" and sum(line.startswith("(voice_") for line in lines) == 1
    calls = [line for line in lines if line.startswith("(read_aloud ")]
    assert calls == ['(read_aloud "say \\"hi\\" \\\\ there" "/s/a.wav" 1.0000 1.0000)',
                     '(read_aloud "two" "/s/b.wav" 0.5000 2.0000)']
    assert lines[-2:] == calls  # the utterances come after the definitions, in order


def test_festival_batches_group_each_voice_and_cover_every_utterance_once(tmp_path, monkeypatch):
    args = corpus_args(tmp_path, num_train="400", num_val="0", num_test="0")
    festival = [voice for voice in RECORDED if voice.engine == "festival"]
    plans = utterance_plans.plan_utterances(args, {}, {"train": ["m1"]}, None, {"train": ["stop"]},
                                          {"train": festival})
    batches = synthesis.festival_batches(plans)
    per_voice = Counter(plan.voice for plan in plans if plan.engine == "festival")
    assert len(batches) == len(per_voice) == 3 and all(len({plan.voice for plan in b}) == 1 for b in batches)
    assert sorted(p.index for b in batches for p in b) == sorted(p.index for p in plans if p.engine == "festival")
    monkeypatch.setattr(synthesis, "FESTIVAL_BATCH", 40)  # a long voice is read by several processes
    batches = synthesis.festival_batches(plans)
    assert all(len(b) <= 40 for b in batches) and len(batches) == sum(-(-n // 40) for n in per_voice.values())
    assert [p for b in batches for p in b if p.voice == "ked_diphone"] == \
        [p for p in plans if p.voice == "ked_diphone"]  # in plan order


def test_text_file_is_read_as_lower_case_words(tmp_path):
    assert normalise_transcript("It's 5 O'Clock, Mr. Smith!") == "it's 5 o'clock mr smith"
    assert normalise_transcript("  Café—crème ‘quoted’ it’s  ") == "cafe creme quoted it's"
    path = tmp_path / "t.txt"
    path.write_text("Turn ON the lights.\n\n...\nturn on the lights\n", encoding="utf-8")
    assert load_text(path) == ["turn on the lights", "turn on the lights"]
    path.write_text("?!\n", encoding="utf-8")
    with pytest.raises(DataError, match="t.txt holds no words"):
        load_text(path)
    with pytest.raises(DataError, match="cannot read text file .*nope.txt"):
        load_text(tmp_path / "nope.txt")


def test_bad_engine_options_exit_2(tmp_path, capsys):
    script = load_script("make_speech_corpus")

    def run(*args):
        status = script.main(["--out", str(tmp_path / "c"), *args])
        return status, capsys.readouterr().err

    text = tmp_path / "t.txt"
    text.write_text("hello\n", encoding="utf-8")
    status, err = run("--engines", "espeak,sapi")
    assert status == 2 and "--engines: unknown engine(s) sapi (known: espeak, flite, festival)" in err
    status, err = run("--engines", "flite,flite")
    assert status == 2 and "names an engine twice" in err
    status, err = run("--engines", "espeak,flite", "--words", "keywords", "--word-times")
    assert status == 2 and "--word-times reads word by word with espeak-ng only" in err
    status, err = run("--text", str(text), "--phrases", "commands")
    assert status == 2 and "--text excludes --phrases, --words and --vocab" in err
    status, err = run("--text", str(text), "--unheard-orders")
    assert status == 2 and "excludes --phrases and --text" in err
    status, err = run("--stretch-range", "1.2", "0.8")
    assert status == 2 and "--stretch-range needs 0.5 <= LOW <= HIGH <= 2.0, got 1.2 0.8" in err
    assert not (tmp_path / "c" / "train.jsonl").exists()


def test_missing_engine_names_its_package(monkeypatch):
    monkeypatch.setattr(voices.shutil, "which", lambda program: None)
    with pytest.raises(UserError, match=r"flite is not installed \(on Debian/Ubuntu: apt-get install flite\)"):
        voices.flite_voices()
    with pytest.raises(UserError, match="festival is not installed .*festvox-us-slt-hts"):
        voices.festival_voices()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("festival") is None, reason="festival not installed (apt-get install festival)")
def test_festival_reads_two_utterances_in_one_process_and_names_a_bad_voice(tmp_path):
    from paraformer_asr.data.audio import audio_info

    voice = voices.festival_voices()[0].name
    readings = [Reading("one two three", tmp_path / "fast.wav", 350, 50),
                Reading("one two three", tmp_path / "slow.wav", 140, 50)]
    voices.read_with_festival(voice, readings, tmp_path / "batch.scm")
    fast, slow = (audio_info(reading.path) for reading in readings)
    assert fast.num_frames > 0 and slow.num_frames > 1.5 * fast.num_frames  # 2.5 x the duration factor
    with pytest.raises(UserError, match="festival with voice no_such_voice failed .*2 of 2 files unwritten"):
        voices.read_with_festival("no_such_voice", [Reading("hi", tmp_path / f"{i}.wav", 175, 50) for i in range(2)],
                                  tmp_path / "bad.scm")


@pytest.mark.slow
@pytest.mark.skipif(any(shutil.which(p) is None for p in ("espeak-ng", "flite", "festival")),
                    reason="needs espeak-ng, flite and festival (apt-get install espeak-ng flite festival ...)")
def test_tiny_corpus_of_three_engines_is_the_same_whatever_jobs(tmp_path):
    text = tmp_path / "texts.txt"
    text.write_text("go forward ten meters\nseven of clubs\nthe time is\n", encoding="utf-8")
    outputs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        result = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--text", str(text), "--engines",
                                 "espeak,flite,festival", "--num-train", "9", "--num-val", "3", "--num-test", "3",
                                 "--stretch-range", "0.9", "1.1", "--jobs", jobs], capture_output=True, text=True,
                                check=False)
        assert result.returncode == 0, result.stderr
        outputs.append([(out / "train.jsonl").read_text()] +
                       [path.read_bytes() for path in sorted((out / "wavs").rglob("*.wav"))])
    assert outputs[0] == outputs[1]
    lines = [json.loads(line) for line in outputs[0][0].splitlines()]
    assert {line["engine"] for line in lines} <= {"espeak", "flite", "festival"} and len(lines) == 9
    assert all({"engine", "voice", "accent", "speaker"} <= set(line) for line in lines)
