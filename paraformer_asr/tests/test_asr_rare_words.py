"""The rare-word test set of hotword biasing (paraformer_asr_tools/corpus/speech_corpus.py ``rare_word_set``,
make_speech_corpus.py --rare-words, --rare-train-count): which rare words training speaks and how often, the sound-alike
distractors of the test split, the manifest's ``hotwords`` field and eval.py's reading of it."""

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from paraformer_asr.data.manifest import read_manifest
from paraformer_asr.errors import ConfigError, DataError
from paraformer_asr.training.evaluation import manifest_hotwords
from paraformer_asr_tools.corpus import synthesis, utterance_plans
from paraformer_asr_tools.corpus.speech_corpus import (COMMON_FILLERS, DISTRACTOR_SHARE, RARE_CARRIERS, RARE_WORDS,
                                                       load_rare_words, rare_word_set, split_accents)

from asr_helpers import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "make_speech_corpus.py"
COUNTS = {"train": 120, "val": 10, "test": 4 * len(RARE_WORDS)}


def slot_of(sentence: str) -> str:
    """The words a carrier's slot was filled with."""
    for carrier in RARE_CARRIERS:
        before, after = carrier.split("{}")
        if sentence.startswith(before) and sentence.endswith(after):
            return sentence[len(before):len(sentence) - len(after)]
    raise AssertionError(f"{sentence!r} is no carrier sentence")


def test_the_built_in_rare_words_and_their_distractors():
    rare, distractors = zip(*RARE_WORDS)
    assert len(RARE_WORDS) == 16 and len(set(rare)) == 16 and len(set(distractors)) == 16
    assert not set(rare) & (set(distractors) | set(COMMON_FILLERS))
    assert set("abcdefghijklmnopqrstuvwxyz") <= set("".join(carrier.format("") for carrier in RARE_CARRIERS))


def test_half_the_rare_words_are_heard_a_few_times_in_training_and_the_rest_never():
    corpus = rare_word_set(RARE_WORDS, COUNTS, train_count=3, seed=0)
    assert {split: len(texts) for split, texts in corpus.sentences.items()} == COUNTS
    spoken = Counter(slot_of(text) for text in corpus.sentences["train"])
    assert sorted(corpus.heard.values()) == [0] * 8 + [3] * 8
    assert all(spoken[word] == count for word, count in corpus.heard.items())
    for split in ("train", "val"):
        for text, hotwords in zip(corpus.sentences[split], corpus.hotwords[split]):
            assert hotwords == ([slot_of(text)] if slot_of(text) in corpus.heard else [])
    assert not any(corpus.hotwords["val"])  # validation speaks common words only
    other = rare_word_set(RARE_WORDS, COUNTS, train_count=3, seed=1)
    assert other.heard != corpus.heard and rare_word_set(RARE_WORDS, COUNTS, 3, seed=0) == corpus


def test_the_test_split_goes_round_the_rare_words_with_every_fourth_round_their_distractors():
    corpus = rare_word_set(RARE_WORDS, COUNTS, train_count=3, seed=0)
    for index, (text, hotwords) in enumerate(zip(corpus.sentences["test"], corpus.hotwords["test"])):
        word, distractor = RARE_WORDS[index % 16]
        if index // 16 == DISTRACTOR_SHARE - 1:
            assert slot_of(text) == distractor and hotwords == []
        else:
            assert slot_of(text) == word and hotwords == [word]
    assert corpus.distractors == dict(RARE_WORDS)
    written = set("".join(corpus.sentences["train"]))
    assert set("".join(corpus.sentences["test"])) <= written  # a character model can write every test sentence


def test_rare_word_files_and_what_cannot_be_made(tmp_path):
    path = tmp_path / "rare.txt"
    path.write_text("okonkwo\toak tree\n\n new  york \nzbigniew\tbig news\n", encoding="utf-8")
    assert load_rare_words(str(path)) == [("okonkwo", "oak tree"), ("new york", None), ("zbigniew", "big news")]
    corpus = rare_word_set(load_rare_words(str(path)), {"train": 30, "val": 0, "test": 12}, 2, seed=0)
    assert [slot_of(text) for text in corpus.sentences["test"]][-3:] == ["oak tree", "new york", "big news"]
    for content, problem in [("a\tb\tc\n", "line 1: give 'rare word<TAB>distractor' or 'rare word'"),
                             ("a\nb\n\na\tc\n", "line 4: 'a' is listed twice"), ("\n \n", "holds no rare word")]:
        path.write_text(content, encoding="utf-8")
        with pytest.raises(DataError, match=problem):
            load_rare_words(str(path))
    with pytest.raises(DataError, match="cannot read rare-word file"):
        load_rare_words(str(tmp_path / "gone.txt"))
    with pytest.raises(DataError, match="need 24 training utterances; --num-train is 20"):
        rare_word_set(RARE_WORDS, {"train": 20, "val": 0, "test": 16}, 3, seed=0)
    with pytest.raises(DataError, match="characters no training sentence has: 'é'"):  # seed 1: josé is never heard
        rare_word_set([("josé", None), ("bob", None)], {"train": 200, "val": 0, "test": 2}, 1, seed=1)


def test_plans_speak_the_sentences_and_the_manifest_lists_their_hotwords(tmp_path):
    script = load_script("make_speech_corpus")
    args = script.parse_args(["--out", str(tmp_path), "--num-train", "120", "--num-val", "10", "--num-test", "64",
                              "--rare-words", "names"])
    corpus = rare_word_set(load_rare_words(args.rare_words), COUNTS, args.rare_train_count, args.seed)
    variants = {"train": ["m1", "f1"], "val": ["f2"], "test": ["m2"]}
    accents = split_accents(utterance_plans.ACCENTS, [], [])
    plans = utterance_plans.plan_utterances(args, utterance_plans.load_vocabulary(None), variants, accents,
                                          scripted=corpus.sentences)
    for split in COUNTS:
        assert [plan.text for plan in plans if plan.split == split] == corpus.sentences[split]
        assert all(plan.spoken == plan.text for plan in plans)
    test_plans = [plan for plan in plans if plan.split == "test"]
    manifest = tmp_path / "test.jsonl"
    synthesis.write_manifest(manifest, test_plans, [None] * len(test_plans), corpus.hotwords["test"])
    for plan in test_plans:  # read_manifest checks that the audio files exist, not what they hold
        (tmp_path / plan.relative_path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / plan.relative_path).touch()
    assert manifest_hotwords(str(manifest)) == {
        f"test_{index:06d}": hotwords for index, hotwords in enumerate(corpus.hotwords["test"])}
    summary = synthesis.rare_word_summary(args, corpus)
    assert summary["rare_train_count"] == 3 and len(summary["rare_word_list"]) == 16
    assert summary["rare_word_list"][0] == {"word": "brenner", "distractor": "banner",
                                            "heard_in_training": corpus.heard["brenner"]}


def test_a_bad_hotwords_field_is_named_with_its_line(tmp_path):
    (tmp_path / "a.wav").write_bytes(b"")  # read_manifest checks the file exists, not what it holds
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"audio": "a.wav", "text": "x"}) + "\n", encoding="utf-8")
    assert manifest_hotwords(str(manifest)) is None
    manifest.write_text(json.dumps({"audio": "a.wav", "text": "x", "hotwords": "kessler"}) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"m.jsonl:1: the field 'hotwords' must be a list of phrases, got "
                                          r"'kessler'"):
        manifest_hotwords(str(manifest))


def test_conflicting_rare_word_options_exit_2(tmp_path, capsys):
    script = load_script("make_speech_corpus")
    for extra, problem in [(["--phrases", "commands"], "--rare-words makes its own sentences: leave out --phrases"),
                           (["--unheard-orders"], "leave out --unheard-orders"),
                           (["--rare-train-count", "0"], "--rare-train-count must be >= 1, got 0")]:
        status = script.main(["--out", str(tmp_path / "c"), "--rare-words", "names", *extra])
        assert status == 2 and problem in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed (apt-get install espeak-ng)")
def test_a_tiny_rare_word_corpus_is_synthesised_with_its_hotwords(tmp_path):
    out = tmp_path / "rare"
    result = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--num-train", "10", "--num-val", "1",
                             "--num-test", "3", "--rare-words", "names", "--rare-train-count", "1", "--seed", "3"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "corpus.json").read_text())
    assert summary["rare_words"] == "names" and sum(w["heard_in_training"] for w in summary["rare_word_list"]) == 8
    lines = [json.loads(line) for line in (out / "test.jsonl").read_text().splitlines()]
    assert [line["hotwords"] for line in lines] == [["brenner"], ["marlowe"], ["kessler"]]
    assert all(line["hotwords"][0] in line["text"].split() for line in lines)
    assert len(read_manifest(out / "train.jsonl")) == 10
    assert (out / "hotwords.txt").read_text().split("\n")[:3] == ["brenner", "marlowe", "kessler"]
