"""Make a selection set toward real recordings from a manifest: every utterance through a random room, noise, a
microphone's colouring, a recording level and now and then a telephone line (paraformer_asr_tools/corpus/
degraded_set.py; the stages of data/augment.py).

    python scripts/make_degraded_set.py --manifest data/voices/val.jsonl --out data/voices_degraded \\
        [--seed 0] [--long-chars 30] [--set noise.snr_db=[0,10] --set telephone.p=0 ...]

Use a validation split (voices held out of training), never a test split: the set is for choosing. Writes
OUT/wavs/NNNNN.wav, OUT/degraded.jsonl (the manifest's fields, the new audio, ``length``: long or short, for
``eval.py --group-by length``) and OUT/degraded.json (the settings). ``--set KEY=VALUE`` changes a key below
``data.augment`` of the default degradation (every stage on; see ``DEGRADED``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paraformer_asr.cli import progress_bar_wanted, run_main
from paraformer_asr.errors import UserError
from paraformer_asr_tools.corpus.degraded_set import degradation, write_degraded_set


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, required=True, help="JSON Lines manifest to degrade")
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")
    parser.add_argument("--long-chars", type=int, default=30,
                        help="an utterance of this many characters or more is tagged long (default 30)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a key below data.augment, e.g. noise.snr_db=[0,10] (repeatable)")
    args = parser.parse_args(argv)
    if args.long_chars < 1:
        raise UserError(f"--long-chars must be >= 1, got {args.long_chars}")
    summary = write_degraded_set(args.manifest, args.out, degradation(args.manifest, args.set), args.seed,
                                 args.long_chars, show_progress=progress_bar_wanted())
    print(f"{summary['utterances']} utterances ({summary['long']} long) -> {args.out / 'degraded.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
