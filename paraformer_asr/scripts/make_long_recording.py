"""Join the utterances of a manifest into one long recording with pauses, with its reference transcript and word
times (the ground truth of long-form decoding; logic in paraformer_asr_tools/corpus/long_recording.py).

    python scripts/make_long_recording.py --manifest /path/to/test.jsonl --out /path/to/long/test_once.wav
    python scripts/make_long_recording.py --manifest /path/to/test.jsonl --minutes 60 --out /path/to/long/60min.wav

Every utterance once (default), or with --minutes M the utterances in order, from the first again when they run
out, until the recording lasts at least M minutes. Pauses of --pause-min .. --pause-max seconds (uniform, drawn from
--seed) come before every utterance and after the last; --gap says what fills them: white noise at the utterance's
noise floor ('noise', the default), digital silence ('silence'), or nothing ('none': utterances back to back). Writes OUT (16-bit PCM WAV at --sample-rate) and OUT with
suffix .jsonl: one manifest line {"audio", "text", "id", "words" (when every source line has word times, shifted
to the recording's clock), "utterances": [{"id", "start_ms", "end_ms"}]}, ready for eval.py --manifest. Prints a
JSON summary (duration, utterances, passes through the manifest, words).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from paraformer_asr.cli import run_main
from paraformer_asr.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", required=True, help="JSON Lines manifest of the utterances to join")
    parser.add_argument("--out", required=True, help="the recording to write (.wav)")
    parser.add_argument("--minutes", type=float, help="make the recording at least this long (default: every "
                                                      "utterance once)")
    parser.add_argument("--pause-min", type=float, default=0.2, help="shortest pause, seconds")
    parser.add_argument("--pause-max", type=float, default=1.0, help="longest pause, seconds")
    parser.add_argument("--gap", choices=("noise", "silence", "none"), default="noise",
                        help="what fills a pause: noise at the utterance's floor, digital silence, or none (no pause)")
    parser.add_argument("--sample-rate", type=int, default=16000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.minutes is not None and not (math.isfinite(args.minutes) and args.minutes > 0):
        raise ConfigError(f"--minutes must be > 0, got {args.minutes}")
    if not (math.isfinite(args.pause_max) and 0 <= args.pause_min <= args.pause_max):
        raise ConfigError(f"need 0 <= --pause-min <= --pause-max, got {args.pause_min} and {args.pause_max}")
    if args.sample_rate < 1000:
        raise ConfigError(f"--sample-rate must be >= 1000, got {args.sample_rate}")
    if Path(args.out).suffix.lower() != ".wav":
        raise ConfigError(f"--out must name a .wav file, got {args.out}")

    from paraformer_asr_tools.corpus.long_recording import join_utterances
    from paraformer_asr.data.manifest import read_manifest

    summary = join_utterances(read_manifest(args.manifest), args.out, args.sample_rate,
                              (args.pause_min, args.pause_max), args.seed,
                              None if args.minutes is None else args.minutes * 60.0, args.gap)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
