"""Write JSON Lines manifests for a corpus in a standard layout.

    python scripts/prepare_corpus.py librispeech SRC --out DIR [--skip-bad]
        SRC: a LibriSpeech subset (SPEAKER/CHAPTER/*.flac with SPEAKER-CHAPTER.trans.txt) or a folder of subsets
        (e.g. LibriSpeech/ holding train-clean-100/ and dev-clean/) -> DIR/<subset>.jsonl for each
    python scripts/prepare_corpus.py kaldi SRC --out DIR [--skip-bad]
        SRC: a Kaldi data dir (wav.scp with file paths, text, optional segments) or a folder of data dirs
        -> DIR/<data dir>.jsonl for each (segments become "start_s" / "end_s"; relative wav.scp paths are
        resolved against the current directory)

Every audio file's header is read. Missing or unreadable files stop with an error that counts them and names the
first few; --skip-bad leaves them out and counts them instead. Prints one JSON summary line per manifest.
"""

from __future__ import annotations

import argparse
import json
import sys

from paraformer_asr.cli import run_main
from paraformer_asr.data.corpora import prepare_kaldi, prepare_librispeech
from paraformer_asr.training.run_folder import setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("layout", choices=("librispeech", "kaldi"), help="the corpus layout")
    parser.add_argument("src", help="the corpus folder (one subset / data dir, or a folder of them)")
    parser.add_argument("--out", required=True, help="folder for the manifests")
    parser.add_argument("--skip-bad", action="store_true",
                        help="leave out utterances whose audio is missing or unreadable (counted in the summary)")
    args = parser.parse_args(argv)
    setup_logging(None)
    prepare = prepare_librispeech if args.layout == "librispeech" else prepare_kaldi
    for summary in prepare(args.src, args.out, skip_bad=args.skip_bad):
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
