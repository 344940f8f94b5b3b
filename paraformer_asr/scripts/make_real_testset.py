"""Build a small test set of real people's speech from installed Debian packages
(paraformer_asr_tools/corpus/real_recordings.py).

    apt-get install pocketsphinx-testdata saytime klettres-data
    python scripts/make_real_testset.py --out /path/to/real [--sources pocketsphinx-testdata,saytime,klettres-data]
        [--selection-fraction 0.25] [--seed 0]

pocketsphinx-testdata gives read sentences, card names and digit strings, saytime numbers and time words, klettres-data
English letters and short words (two speakers). Every clip is converted to a 16 kHz mono WAV with its transcript as
lower-case words. Writes OUT/wavs/<source>/<clip>.wav, OUT/all.jsonl (every clip: "audio", "text", "id", "source" =
the package, "speaker"), OUT/selection.jsonl and OUT/test.jsonl (a seeded part of the clips set aside to choose models
on, by speaker where a package has several, else by clip; the rest to report), OUT/texts.txt (the distinct
transcripts, one a line: what synthetic voices read for training, make_speech_corpus.py --text) and OUT/testset.json
(clips and minutes per source). A package that is not installed stops the script with an error naming it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paraformer_asr.cli import run_main
from paraformer_asr.errors import UserError
from paraformer_asr_tools.corpus.real_recordings import SOURCES, find_clips, split_selection, write_testset


def parse_sources(text: str) -> list[str]:
    """'saytime,klettres-data' -> ['saytime', 'klettres-data']; UserError naming an unknown package."""
    sources = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in sources if name not in SOURCES]
    if not sources or unknown:
        raise UserError(f"--sources: unknown package(s) {', '.join(unknown) or repr(text)} (known: "
                        f"{', '.join(SOURCES)})")
    return sources


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--sources", default=",".join(SOURCES),
                        help=f"comma-separated packages to read (default: all of {', '.join(SOURCES)})")
    parser.add_argument("--selection-fraction", type=float, default=0.25,
                        help="share of each package's clips set aside as the selection set (default 0.25)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=Path, default=Path("/"),
                        help="the file system root the packages are installed under (default /)")
    args = parser.parse_args(argv)
    if not 0.0 < args.selection_fraction < 1.0:
        raise UserError(f"--selection-fraction must be in (0, 1), got {args.selection_fraction}")
    clips = find_clips(args.root, parse_sources(args.sources))
    summary = write_testset(args.out, clips, split_selection(clips, args.selection_fraction, args.seed))
    for source, counts in summary["sources"].items():
        print(f"{source}: {counts['clips']} clips, {counts['minutes']} min, {len(counts['speakers'])} speaker(s); "
              f"selection {counts['selection']['clips']}, test {counts['test']['clips']}")
    print(f"{summary['clips']} clips, {summary['minutes']} min, {summary['distinct_texts']} distinct texts")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
