"""Grow a hotword list to a given size with words drawn from a word list, to measure biasing against list size:

    python scripts/make_hotword_list.py --base data/rare/hotwords.txt --size 1000 --out data/rare/hotwords_1000.txt
        [--words /usr/share/festival/dicts/cmu/cmudict-0.4.out] [--exclude-manifest data/rare/test.jsonl ...]
        [--min-letters 4] [--max-letters 9] [--seed 0]

The list written holds the --base list's lines first, then --size minus their number of words drawn without
replacement (seeded by --seed) from --words: a plain list (one word a line) or festival's CMU lexicon (its lines
``("word" pos (...))``). Only lower-case words of a-z with --min-letters .. --max-letters letters are drawn, never a
word of the base list or of a transcript of an --exclude-manifest (so the filler entries are never spoken there: an
entry emitted on those manifests is then a false alarm of the list, not a right answer). Exit status 2 for bad
arguments or unreadable files.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from pathlib import Path

from paraformer_asr.cli import run_main
from paraformer_asr.data.manifest import read_manifest
from paraformer_asr.decode.hotwords import DEFAULT_HOTWORD_WEIGHT, read_hotwords
from paraformer_asr.errors import ConfigError

FESTIVAL_LEXICON = "/usr/share/festival/dicts/cmu/cmudict-0.4.out"
LEXICON_ENTRY = re.compile(r'^\("([^"]+)"')


def read_words(path: Path) -> list[str]:
    """The words of a plain word list or a festival lexicon, in file order, each once."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        raise ConfigError(f"cannot read the word list {path}: {err}") from None
    words = []
    for line in lines:
        entry = LEXICON_ENTRY.match(line)
        words.append(entry.group(1) if entry else line.strip())
    return list(dict.fromkeys(word for word in words if word))


def filler_words(candidates: list[str], excluded: set[str], count: int, min_letters: int, max_letters: int,
                 seed: int) -> list[str]:
    """``count`` distinct candidates of a-z only, of min..max letters, none in ``excluded``, drawn with ``seed``."""
    pool = [word for word in candidates if re.fullmatch(f"[a-z]{{{min_letters},{max_letters}}}", word)
            and word not in excluded]
    if count > len(pool):
        raise ConfigError(f"--size asks for {count} filler words but the word list has only {len(pool)} usable ones")
    return random.Random(seed).sample(pool, count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the hotword list to grow (its lines come first, unchanged)")
    parser.add_argument("--size", type=int, required=True, help="entries of the list written")
    parser.add_argument("--out", required=True)
    parser.add_argument("--words", default=FESTIVAL_LEXICON, help="word source: one word a line, or festival's lexicon")
    parser.add_argument("--exclude-manifest", action="append", default=[],
                        help="never draw a word of these manifests' transcripts (repeatable)")
    parser.add_argument("--min-letters", type=int, default=4)
    parser.add_argument("--max-letters", type=int, default=9)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    base = read_hotwords(args.base, DEFAULT_HOTWORD_WEIGHT)  # ConfigError naming the file or its bad line
    base_lines = Path(args.base).read_text(encoding="utf-8").splitlines()
    if args.size < len(base):
        raise ConfigError(f"--size {args.size} is smaller than the base list's {len(base)} entries")
    excluded = {word for entry in base for word in entry.phrase.split()}
    for manifest in args.exclude_manifest:
        excluded.update(word for record in read_manifest(manifest) for word in record.text.split())
    fillers = filler_words(read_words(Path(args.words)), excluded, args.size - len(base), args.min_letters,
                           args.max_letters, args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(base_lines + fillers) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(base)} base entries + {len(fillers)} drawn from {args.words}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
