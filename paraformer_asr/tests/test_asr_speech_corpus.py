"""The synthetic corpus's phrases, random words and held-out accents (paraformer_asr_tools/corpus/speech_corpus.py,
make_speech_corpus.py --phrases, --words, --train-accents, --val-accents, --test-accents, --unheard-orders,
--rate-range, --pitch-range)."""

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from paraformer_asr.data.manifest import read_manifest
from paraformer_asr.data.audio import read_audio
from paraformer_asr.errors import DataError
from paraformer_asr_tools.corpus import synthesis, utterance_plans
from paraformer_asr_tools.corpus.speech_corpus import (KEYWORDS, command_phrases, hold_out_phrases, load_phrases,
                                                       load_words, parse_accent_list, phrase_vocabulary, split_accents,
                                                       unheard_words)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "make_speech_corpus.py"
ACCENTS = ["en", "en-us", "en-gb-scotland", "en-029"]
HARD = ["--words", "keywords", "--min-words", "1", "--max-words", "4", "--train-accents", "en-us,en,en-gb-x-rp",
        "--val-accents", "en-gb-x-gbcwmd", "--test-accents", "en-gb-scotland,en-029,en-us-nyc"]  # the hard corpus's
VARIANTS = {"train": ["m1", "f1"], "val": ["f2"], "test": ["m2"]}

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
    accents = split_accents(utterance_plans.ACCENTS, ["en-gb-x-gbcwmd"], ["en-gb-scotland", "en-029"])
    variants = {"train": ["m1", "f1"], "val": ["f2"], "test": ["m2"]}
    vocabulary = utterance_plans.load_vocabulary(None)
    phrases, held_out = utterance_plans.phrases_per_split(command_phrases(), None, 0)
    assert held_out == [] and all(phrases[split] == command_phrases() for split in phrases)
    plans = utterance_plans.plan_utterances(args, vocabulary, variants, accents, phrases)
    used = {split: {plan.voice.split("+")[0] for plan in plans if plan.split == split} for split in accents}
    assert used["train"] <= set(accents["train"]) and len(used["train"]) >= 4
    assert used["val"] == {"en-gb-x-gbcwmd"} and used["test"] == {"en-gb-scotland", "en-029"}
    assert all(plan.text == plan.spoken and plan.text in command_phrases() for plan in plans)
    assert len({plan.text for plan in plans}) > 100  # phrases drawn across the whole set
    again = utterance_plans.plan_utterances(args, vocabulary, variants, accents, phrases)
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
    accents = split_accents(utterance_plans.ACCENTS, [], ["en-029"])
    phrases, held_out = utterance_plans.phrases_per_split(command_phrases(), args.test_phrases, args.seed)
    plans = utterance_plans.plan_utterances(args, utterance_plans.load_vocabulary(None), variants, accents, phrases)
    texts = {split: {plan.text for plan in plans if plan.split == split} for split in ("train", "val", "test")}
    assert texts["test"] <= set(held_out) and len(texts["test"]) > 20
    assert not (texts["train"] | texts["val"]) & set(held_out)
    utterance_plans.check_test_words_heard(plans)  # 400 draws speak every test word
    with pytest.raises(DataError, match="no training utterance speaks: .*raise --num-train"):
        utterance_plans.check_test_words_heard([plan for plan in plans if plan.split != "train"][:1] +
                                             [plan for plan in plans if plan.split == "test"])
    manifest = tmp_path / "test.jsonl"
    test_plans = [plan for plan in plans if plan.split == "test"]
    synthesis.write_manifest(manifest, test_plans, [None] * len(test_plans))
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


def hard_plans(tmp_path, *extra, num_train="1600", num_val="200", num_test="240"):
    """The plans of the hard development corpus (make_speech_corpus.py's docstring) with ``extra`` options."""
    script = load_script("make_speech_corpus")
    args = script.parse_args(["--out", str(tmp_path), "--num-train", num_train, "--num-val", num_val,
                              "--num-test", num_test, *HARD, *extra])
    accents = split_accents(utterance_plans.ACCENTS, parse_accent_list(args.val_accents, "v", utterance_plans.ACCENTS),
                            parse_accent_list(args.test_accents, "t", utterance_plans.ACCENTS),
                            parse_accent_list(args.train_accents, "r", utterance_plans.ACCENTS))
    vocabulary = utterance_plans.load_vocabulary(args.vocab, args.words)
    return utterance_plans.plan_utterances(args, vocabulary, VARIANTS, accents)


def test_built_in_words_and_word_files(tmp_path):
    assert len(KEYWORDS) == len(set(KEYWORDS)) == 30 and load_words("keywords") == KEYWORDS
    assert all(re.fullmatch(r"[a-z]+", word) for word in KEYWORDS)
    assert {"red", "dog", "left", "yes", "no", "zero", "nine"} <= set(KEYWORDS)
    path = tmp_path / "words.txt"
    path.write_text(" apple\n\nbanana \napple\n", encoding="utf-8")
    assert load_words(str(path)) == ["apple", "banana"]
    assert utterance_plans.load_vocabulary(None, str(path)) == {"apple": "apple", "banana": "banana"}
    path.write_text("apple\nice cream\n", encoding="utf-8")
    with pytest.raises(DataError, match="words.txt, line 2: one word per line, got 'ice cream'"):
        load_words(str(path))
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="empty.txt holds no word"):
        load_words(str(tmp_path / "empty.txt"))
    with pytest.raises(DataError, match="cannot read word file .*missing.txt.*'keywords'"):
        load_words(str(tmp_path / "missing.txt"))


def test_word_draws_are_uniform_in_count_and_use_only_the_vocabulary(tmp_path):
    plans = hard_plans(tmp_path, num_train="4000", num_val="0", num_test="0")
    lengths = Counter(len(plan.text.split(" ")) for plan in plans)
    assert sorted(lengths) == [1, 2, 3, 4] and all(abs(n - 1000) < 100 for n in lengths.values())  # 1000 +- 3 sd
    words = Counter(word for plan in plans for word in plan.text.split(" "))
    assert set(words) == set(KEYWORDS)  # only vocabulary words, every one drawn
    expected = sum(words.values()) / 30
    assert all(abs(n - expected) < 4 * expected ** 0.5 for n in words.values())  # uniform over the words
    assert all(plan.spoken == plan.text for plan in plans)  # transcript = the spoken words joined by spaces
    pairs = Counter(tuple(plan.text.split()) for plan in plans if len(plan.text.split()) == 2)
    assert len(pairs) > 600 and any(pair[0] == pair[1] for pair in pairs)  # any order, with replacement
    assert hard_plans(tmp_path, num_train="4000", num_val="0", num_test="0") == plans  # a function of the seed


def test_train_accents_narrow_training_and_held_out_accents_never_reach_it(tmp_path):
    splits = split_accents(ACCENTS, ["en-029"], ["en-gb-scotland"], ["en-us"])
    assert splits == {"train": ["en-us"], "val": ["en-029"], "test": ["en-gb-scotland"]}
    shared = split_accents(ACCENTS, [], [], ["en", "en-us"])  # the splits that hold none out share training's
    assert shared == {split: ["en", "en-us"] for split in ("train", "val", "test")}
    with pytest.raises(DataError, match="both trained on and held out: en-029"):
        split_accents(ACCENTS, [], ["en-029"], ["en", "en-029"])
    plans = hard_plans(tmp_path)
    used = {split: {plan.accent for plan in plans if plan.split == split} for split in ("train", "val", "test")}
    assert used == {"train": {"en-us", "en", "en-gb-x-rp"}, "val": {"en-gb-x-gbcwmd"},
                    "test": {"en-gb-scotland", "en-029", "en-us-nyc"}}
    manifest = tmp_path / "train.jsonl"
    train = [plan for plan in plans if plan.split == "train"]
    synthesis.write_manifest(manifest, train, [None] * len(train))
    lines = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert len(lines) == 1600 and {line["accent"] for line in lines} == {"en-us", "en", "en-gb-x-rp"}
    assert {line["speaker"] for line in lines} == {"m1", "f1"}


def test_unheard_orders_keep_training_and_give_val_and_test_only_unheard_sequences(tmp_path):
    plain, unheard = hard_plans(tmp_path), hard_plans(tmp_path, "--unheard-orders")
    train = [plan for plan in plain if plan.split == "train"]
    assert [plan for plan in unheard if plan.split == "train"] == train  # training is the same corpus
    heard = {plan.text for plan in train}
    assert sum(plan.text in heard for plan in plain if plan.split != "train") > 50  # random draws repeat training
    held_out = [plan for plan in unheard if plan.split != "train"]
    assert len(held_out) == 440 and not {plan.text for plan in held_out} & heard
    assert all(set(plan.text.split()) <= set(KEYWORDS) for plan in held_out)
    assert {plan.accent for plan in held_out if plan.split == "test"} == {"en-gb-scotland", "en-029", "en-us-nyc"}
    assert synthesis.words_per_utterance(held_out)["4"] > 60  # longer draws are kept
    path = tmp_path / "two.txt"
    path.write_text("yes\nno\n", encoding="utf-8")  # 2 single words, both heard in 40 training draws
    with pytest.raises(DataError, match="--unheard-orders: 1000 draws for val utterance 0 all repeat"):
        hard_plans(tmp_path, "--unheard-orders", "--words", str(path), "--max-words", "1", num_train="40")


def test_rate_and_pitch_ranges_are_drawn_from_and_default_to_the_old_ones(tmp_path):
    plans = hard_plans(tmp_path, "--rate-range", "150", "160", "--pitch-range", "40", "41", num_val="0",
                       num_test="0", num_train="300")
    assert {plan.rate for plan in plans} == set(range(150, 161)) and {plan.pitch for plan in plans} == {40, 41}
    args = load_script("make_speech_corpus").parse_args(["--out", str(tmp_path)])
    assert args.rate_range == [130, 200] and args.pitch_range == [25, 75] and args.join == ""


def test_conflicting_or_bad_word_and_voice_options_exit_2(tmp_path, capsys):
    script = load_script("make_speech_corpus")

    def run(*args):
        status = script.main(["--out", str(tmp_path / "c"), *args])
        return status, capsys.readouterr().err

    status, err = run("--words", "keywords", "--phrases", "commands")
    assert status == 2 and "--words excludes --vocab and --phrases" in err
    status, err = run("--words", "keywords", "--join", "_")
    assert status == 2 and "--words transcribes the words joined by spaces" in err
    status, err = run("--phrases", "commands", "--unheard-orders")
    assert status == 2 and "--unheard-orders draws token sequences, so it excludes --phrases" in err
    status, err = run("--rate-range", "200", "130")
    assert status == 2 and "--rate-range needs 80 <= LOW <= HIGH <= 450, got 200 130" in err
    status, err = run("--pitch-range", "25", "120")
    assert status == 2 and "--pitch-range needs 0 <= LOW <= HIGH <= 99" in err
    if shutil.which("espeak-ng") is not None:  # the next checks come after the espeak-ng check
        status, err = run("--train-accents", "en,en-029", "--test-accents", "en-029", "--num-train", "1")
        assert status == 2 and "both trained on and held out: en-029" in err
        status, err = run("--words", str(tmp_path / "nope.txt"), "--num-train", "1")
        assert status == 2 and "cannot read word file" in err
    assert not (tmp_path / "c" / "train.jsonl").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed (apt-get install espeak-ng)")
def test_tiny_hard_corpus_has_random_words_unheard_voices_and_22050_hz(tmp_path):
    out = tmp_path / "hard"
    result = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--num-train", "6", "--num-val", "3",
                             "--num-test", "3", *HARD, "--sample-rate", "22050", "--rate-range", "130", "200",
                             "--pitch-range", "25", "75", "--unheard-orders", "--seed", "1"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "corpus.json").read_text())
    assert summary["words"] == "keywords" and summary["unheard_orders"] is True and summary["sample_rate"] == 22050
    assert summary["rate_range"] == [130, 200] and summary["pitch_range"] == [25, 75]
    assert summary["splits"]["val"]["heard_in_training"] == summary["splits"]["test"]["heard_in_training"] == 0
    lines = {split: [json.loads(line) for line in (out / f"{split}.jsonl").read_text().splitlines()]
             for split in ("train", "val", "test")}
    assert {line["accent"] for line in lines["train"]} <= {"en-us", "en", "en-gb-x-rp"}
    assert {line["accent"] for line in lines["val"]} == {"en-gb-x-gbcwmd"}
    assert {line["accent"] for line in lines["test"]} <= {"en-gb-scotland", "en-029", "en-us-nyc"}
    assert not {line["text"] for line in lines["test"]} & {line["text"] for line in lines["train"]}
    for split, entries in lines.items():
        assert len(entries) == {"train": 6, "val": 3, "test": 3}[split]
        assert not {line["speaker"] for line in entries} - set(summary["splits"][split]["variants"])
        for entry in entries:
            assert 1 <= len(entry["text"].split(" ")) <= 4 and set(entry["text"].split(" ")) <= set(KEYWORDS)
            samples, rate = read_audio(out / entry["audio"])
            assert rate == 22050 and samples.shape[0] == 1 and 0.3 < samples.shape[1] / rate < 10
