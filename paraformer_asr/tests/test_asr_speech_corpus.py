"""The synthetic corpus's phrases and held-out accents (data/speech_corpus.py, make_speech_corpus.py --phrases,
--val-accents, --test-accents)."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paraformer_asr.data import espeak_corpus
from paraformer_asr.data.manifest import read_manifest
from paraformer_asr.data.speech_corpus import (command_phrases, hold_out_phrases, load_phrases, parse_accent_list,
                                               phrase_vocabulary, split_accents, unheard_words)
from paraformer_asr.errors import DataError

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "make_speech_corpus.py"
ACCENTS = ["en", "en-us", "en-gb-scotland", "en-029"]

from asr_helpers import load_script


def test_command_phrases_are_distinct_plain_words_with_the_promised_counts():
    phrases = command_phrases()
    assert len(phrases) == len(set(phrases)) == 296  # the counts the script's help and the README give
    assert len(phrase_vocabulary(phrases)) == 135
    assert all(re.fullmatch(r"[a-z]+( [a-z]+)*", phrase) for phrase in phrases)  # no apostrophes, single spaces
    assert {"turn on the kitchen lights", "set a timer for five minutes",
            "what is the weather tomorrow in paris"} <= set(phrases)
    assert 3 <= sum(len(p.split()) for p in phrases) / len(phrases) <= 8  # short commands
    assert load_phrases("commands") == phrases


def test_phrase_file_is_read_line_by_line_and_bad_files_are_named(tmp_path):
    path = tmp_path / "phrases.txt"
    path.write_text("open  the door\n\n  close the door \nopen  the door\n", encoding="utf-8")
    assert load_phrases(str(path)) == ["open the door", "close the door", "open the door"]
    (tmp_path / "empty.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(DataError, match="empty.txt holds no phrase"):
        load_phrases(str(tmp_path / "empty.txt"))
    with pytest.raises(DataError, match="cannot read phrase file .*missing.txt"):
        load_phrases(str(tmp_path / "missing.txt"))


def test_held_out_accents_never_reach_training():
    splits = split_accents(ACCENTS, ["en-us"], ["en-gb-scotland", "en-029"])
    assert splits == {"train": ["en"], "val": ["en-us"], "test": ["en-gb-scotland", "en-029"]}
    assert split_accents(ACCENTS, [], []) == {split: ACCENTS for split in ("train", "val", "test")}
    assert split_accents(ACCENTS, [], ["en-029"])["val"] == ["en", "en-us", "en-gb-scotland"]  # val shares training's
    with pytest.raises(DataError, match="both val and test: en-us"):
        split_accents(ACCENTS, ["en-us"], ["en-us"])
    with pytest.raises(DataError, match="training needs at least one"):
        split_accents(ACCENTS, ["en", "en-us"], ["en-gb-scotland", "en-029"])
    assert parse_accent_list(" en-029, en ", "--test-accents", ACCENTS) == ["en-029", "en"]
    assert parse_accent_list(None, "--test-accents", ACCENTS) == []
    with pytest.raises(DataError, match="--test-accents: unknown accent.*en-xx"):
        parse_accent_list("en-xx", "--test-accents", ACCENTS)


def test_plans_speak_phrases_with_each_splits_accents(tmp_path):
    script = load_script("make_speech_corpus")
    args = script.parse_args(["--out", str(tmp_path), "--num-train", "200", "--num-val", "40", "--num-test", "60",
                              "--phrases", "commands"])
    accents = split_accents(espeak_corpus.ACCENTS, ["en-gb-x-gbcwmd"], ["en-gb-scotland", "en-029"])
    variants = {"train": ["m1", "f1"], "val": ["f2"], "test": ["m2"]}
    vocabulary = espeak_corpus.load_vocabulary(None)
    phrases, held_out = espeak_corpus.phrases_per_split(command_phrases(), None, 0)
    assert held_out == [] and all(phrases[split] == command_phrases() for split in phrases)
    plans = espeak_corpus.plan_utterances(args, vocabulary, variants, accents, phrases)
    used = {split: {plan.voice.split("+")[0] for plan in plans if plan.split == split} for split in accents}
    assert used["train"] <= set(accents["train"]) and len(used["train"]) >= 4
    assert used["val"] == {"en-gb-x-gbcwmd"} and used["test"] == {"en-gb-scotland", "en-029"}
    assert all(plan.text == plan.spoken and plan.text in command_phrases() for plan in plans)
    assert len({plan.text for plan in plans}) > 100  # phrases drawn across the whole set
    again = espeak_corpus.plan_utterances(args, vocabulary, variants, accents, phrases)
    assert again == plans


def test_held_out_phrases_are_unheard_sentences_of_known_words():
    phrases = command_phrases()
    kept, held_out = hold_out_phrases(phrases, 40, seed=3)
    assert len(held_out) == len(set(held_out)) == 40 and len(kept) == len(phrases) - 40
    assert not set(held_out) & set(kept) and set(held_out) | set(kept) == set(phrases)
    assert unheard_words(kept, held_out) == []  # every held-out word is still spoken by a kept phrase
    assert hold_out_phrases(phrases, 40, seed=3) == (kept, held_out)  # a function of the seed
    assert hold_out_phrases(phrases, 40, seed=4)[1] != held_out
    # A phrase whose word no other phrase speaks is never held out; when too few qualify, the error says so.
    assert hold_out_phrases(["open the door", "close the door", "open the window"], 1, 0)[1] == ["open the door"]
    with pytest.raises(DataError, match="only 1 phrases can be held out"):
        hold_out_phrases(["open the door", "close the door", "open the window"], 2, 0)
    with pytest.raises(DataError, match="--test-phrases must be between 1 and 2"):
        hold_out_phrases(["a b", "b c", "c a"], 3, 0)
    assert unheard_words(["open the door"], ["open the window", "the door"]) == ["window"]


def test_test_split_speaks_only_held_out_phrases_and_lines_carry_the_voice(tmp_path):
    script = load_script("make_speech_corpus")
    args = script.parse_args(["--out", str(tmp_path), "--num-train", "400", "--num-val", "40", "--num-test", "60",
                              "--phrases", "commands", "--test-phrases", "30", "--seed", "2"])
    variants = {"train": ["m1", "f1"], "val": ["f2"], "test": ["m2"]}
    accents = split_accents(espeak_corpus.ACCENTS, [], ["en-029"])
    phrases, held_out = espeak_corpus.phrases_per_split(command_phrases(), args.test_phrases, args.seed)
    plans = espeak_corpus.plan_utterances(args, espeak_corpus.load_vocabulary(None), variants, accents, phrases)
    texts = {split: {plan.text for plan in plans if plan.split == split} for split in ("train", "val", "test")}
    assert texts["test"] <= set(held_out) and len(texts["test"]) > 20
    assert not (texts["train"] | texts["val"]) & set(held_out)
    espeak_corpus.check_test_words_heard(plans)  # 400 draws speak every test word
    with pytest.raises(DataError, match="no training utterance speaks: .*raise --num-train"):
        espeak_corpus.check_test_words_heard([plan for plan in plans if plan.split != "train"][:1] +
                                             [plan for plan in plans if plan.split == "test"])
    manifest = tmp_path / "test.jsonl"
    test_plans = [plan for plan in plans if plan.split == "test"]
    espeak_corpus.write_manifest(manifest, test_plans, [None] * len(test_plans))
    lines = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert {(line["accent"], line["speaker"]) for line in lines} == {("en-029", "m2")}


def test_conflicting_or_bad_phrase_and_accent_options_exit_2(tmp_path, capsys):
    script = load_script("make_speech_corpus")

    def run(*args):
        status = script.main(["--out", str(tmp_path / "c"), *args])
        return status, capsys.readouterr().err

    vocab = tmp_path / "v.json"
    vocab.write_text('{"a": "alpha"}', encoding="utf-8")
    status, err = run("--phrases", "commands", "--vocab", str(vocab))
    assert status == 2 and "--phrases and --vocab exclude each other" in err
    status, err = run("--test-phrases", "5")
    assert status == 2 and "--test-phrases holds phrases out, so it needs --phrases" in err
    status, err = run("--phrases", "commands", "--test-phrases", "0")
    assert status == 2 and "--test-phrases must be >= 1" in err
    if shutil.which("espeak-ng") is not None:  # the next checks come after the espeak-ng check
        status, err = run("--phrases", str(tmp_path / "nope.txt"), "--num-train", "1")
        assert status == 2 and "cannot read phrase file" in err
        status, err = run("--test-accents", "en-xx", "--num-train", "1")
        assert status == 2 and "--test-accents: unknown accent(s) en-xx" in err
        status, err = run("--phrases", "commands", "--test-phrases", "20", "--num-train", "2")  # stops before synthesis
        assert status == 2 and "no training utterance speaks" in err
    assert not (tmp_path / "c" / "train.jsonl").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed (apt-get install espeak-ng)")
def test_tiny_commands_corpus_holds_accents_out(tmp_path):
    out = tmp_path / "commands"
    result = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--num-train", "3", "--num-val", "1",
                             "--num-test", "2", "--phrases", "commands", "--val-accents", "en-gb-x-gbcwmd",
                             "--test-accents", "en-gb-scotland,en-029", "--seed", "4"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "corpus.json").read_text())
    assert summary["distinct_phrases"] == 296 and summary["phrases"] == "commands"
    assert summary["test_phrases"] == []
    assert summary["splits"]["val"]["accents_used"] == ["en-gb-x-gbcwmd"]
    assert set(summary["splits"]["test"]["accents_used"]) <= {"en-gb-scotland", "en-029"}
    assert not set(summary["splits"]["train"]["accents_used"]) & {"en-gb-x-gbcwmd", "en-gb-scotland", "en-029"}
    for split in ("train", "val", "test"):
        assert all(entry.text in command_phrases() for entry in read_manifest(out / f"{split}.jsonl"))
    tags = [json.loads(line) for line in (out / "test.jsonl").read_text().splitlines()]
    assert {line["accent"] for line in tags} <= {"en-gb-scotland", "en-029"} and all(line["speaker"] for line in tags)
