"""scripts/make_hotword_list.py: a hotword list grown to a size with filler words that are never spoken."""

from __future__ import annotations

import json

import pytest

from asr_helpers import call_script, run_script


def write_inputs(tmp_path):
    (tmp_path / "base.txt").write_text("kessler\t3\n# a comment\nlidar\n", encoding="utf-8")
    # a festival lexicon's lines and plain lines, with words the filter must drop
    words = ['("apple" nil (((ae) 1)))', '("banana" n (((b ax) 0)))', "cherry", "Dates", "fig", "grape-fruit",
             "kessler", "lemon", "mango", "x" * 12, "spoken"]
    (tmp_path / "words.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    (tmp_path / "a.wav").write_bytes(b"")
    (tmp_path / "m.jsonl").write_text(json.dumps({"audio": "a.wav", "text": "the spoken lemon"}) + "\n",
                                      encoding="utf-8")


@pytest.mark.slow
def test_the_list_keeps_its_base_and_draws_only_unspoken_plain_words(tmp_path):
    write_inputs(tmp_path)
    run_script("make_hotword_list.py", "--base", "base.txt", "--size", "6", "--out", "out.txt", "--words",
               "words.txt", "--exclude-manifest", "m.jsonl", "--seed", "3", cwd=tmp_path)
    lines = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert lines[:3] == ["kessler\t3", "# a comment", "lidar"]
    fillers = lines[3:]
    assert len(fillers) == 4 and len(set(fillers)) == 4  # 6 entries: 2 listed + 4 drawn
    # usable: apple, banana, cherry, mango (fig is too short, Dates capitalised, grape-fruit not a-z, kessler listed,
    # lemon and spoken spoken in the manifest, the 12 x's too long)
    assert set(fillers) == {"apple", "banana", "cherry", "mango"}


def test_the_draw_depends_on_the_seed_only(tmp_path):
    write_inputs(tmp_path)
    outputs = []
    for seed, out in ((1, "one.txt"), (1, "again.txt"), (2, "two.txt")):
        call_script("make_hotword_list.py", "--base", "base.txt", "--size", "3", "--out", out, "--words",
                    "words.txt", "--seed", seed, cwd=tmp_path)
        outputs.append((tmp_path / out).read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1]
    drawn = {output.splitlines()[-1] for output in outputs}
    assert drawn <= {"apple", "banana", "cherry", "lemon", "mango", "spoken"}


def test_more_fillers_than_the_word_list_has_is_refused_by_name(tmp_path):
    write_inputs(tmp_path)
    result = call_script("make_hotword_list.py", "--base", "base.txt", "--size", "50", "--out", "out.txt",
                         "--words", "words.txt", cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert "--size asks for 48 filler words but the word list has only 6 usable ones" in result.stderr


def test_a_bad_base_list_is_refused_naming_its_line(tmp_path):
    write_inputs(tmp_path)
    (tmp_path / "bad.txt").write_text("kessler\tloud\n", encoding="utf-8")
    result = call_script("make_hotword_list.py", "--base", "bad.txt", "--size", "5", "--out", "out.txt",
                         "--words", "words.txt", cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert "bad.txt, line 1" in result.stderr
    assert not (tmp_path / "out.txt").exists()
