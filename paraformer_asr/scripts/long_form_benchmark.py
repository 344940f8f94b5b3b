"""Time and peak memory of transcribing long recordings as scripts/infer.py does (logic in
paraformer_asr_tools/benchmarks/long_form.py): one fresh process per recording and repeat, start-up and model loading
included.

    python scripts/long_form_benchmark.py --checkpoint CKPT --recordings 1min.wav 8min.wav 30min.wav 60min.wav \
        [--repeats 1] [--out rows.json] [--markdown table.md] [-- infer.py options, e.g. --segment windows]

Prints one JSON line per recording: audio_s, wall_s (median of the repeats), rtf, peak_rss_mb (largest), the load
average before and after. Recordings for it: scripts/make_long_recording.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from paraformer_asr.cli import run_main
from paraformer_asr.errors import ConfigError, DataError
from paraformer_asr_tools.benchmarks.long_form import benchmark_recordings, markdown_rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    infer_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--recordings", nargs="+", required=True, help="audio files to transcribe")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", help="write the rows as JSON here")
    parser.add_argument("--markdown", help="write a Markdown table here")
    args = parser.parse_args(own)
    if args.repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {args.repeats}")
    for recording in args.recordings:
        if not Path(recording).is_file():
            raise DataError(f"recording not found: {recording}")

    rows = benchmark_recordings(args.checkpoint, args.recordings, tuple(infer_args), args.repeats)
    for row in rows:
        print(json.dumps(row))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(markdown_rows(rows), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
