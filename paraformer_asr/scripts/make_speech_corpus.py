"""Synthesise a spoken corpus with espeak-ng: WAVs at 16 kHz plus train/val/test JSON Lines manifests.

Default vocabulary: digit strings of --min-digits .. --max-digits digits. The transcript is the compact digit string
("407"), spoken digit by digit as words ("four zero seven"); the model predicts the transcript's characters.
With --transcript spoken the transcript is what is spoken ("four zero seven"): longer outputs, as in real speech
(the corpus of configs/paraformer_numbers.yaml: 6-12 digits, transcribed as words). Another vocabulary can be given with
--vocab FILE.json, an object mapping each transcript token to the words spoken for it (tokens are joined with --join,
default "" for single characters). --phrases commands speaks short voice-assistant commands instead ("turn on the
kitchen lights", "set a timer for five minutes": 296 phrases, 135 words, data/speech_corpus.py), --phrases FILE the
phrases of a text file (one per line); the transcript is the phrase.

Voices: an espeak-ng voice is an accent (en, en-us, en-gb-scotland, ...) plus a speaker variant (m1, f3, klatt, ...).
Variants are split between train, val and test (separately for female and male variants), so test speakers are
never heard in training. Accents are shared unless --val-accents / --test-accents hold some out: those are spoken
only in their split, never in training. Per utterance, an accent, a rate (-s), a pitch (-p), a word gap (-g),
a gain, leading silence and white noise (SNR 20-35 dB) are drawn from a generator seeded by (seed, split, index), so
the corpus is identical for a given seed whatever --jobs is.

With --test-phrases K (and --phrases) the test split also holds out sentences: K distinct phrases, each made only of
words the other phrases speak, are never spoken in training or validation, and the test split speaks only them; the
script stops with an error if a word of them is missing from the drawn training utterances. corpus.json lists them
("test_phrases"). Every manifest line carries its voice: "accent" and "speaker" (the variant), for grouped scores.

With --word-times (and --transcript spoken) every word is synthesised on its own, trimmed to its audible part and
joined to the next with a pause (data/word_timing.py); each manifest line then has
"words": [{"word", "start_ms", "end_ms"}], the ground truth of eval.py's word_boundary_mae_ms.

Usage (from paraformer_asr/):
    python scripts/make_speech_corpus.py --out /path/to/speech --num-train 3000 --num-val 300 --num-test 300
    python scripts/make_speech_corpus.py --out /path/to/commands --num-train 1600 --num-val 200 --num-test 300 \
        --phrases commands --val-accents en-gb-x-gbcwmd --test-accents en-gb-scotland,en-029 [--test-phrases 40]
Writes OUT/wavs/<split>/<split>_NNNNNN.wav, OUT/train.jsonl, OUT/val.jsonl, OUT/test.jsonl, OUT/corpus.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paraformer_asr.data.espeak_corpus import check_options, generate
from paraformer_asr.errors import UserError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--num-train", type=int, default=3000)
    parser.add_argument("--num-val", type=int, default=300)
    parser.add_argument("--num-test", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-digits", type=int, default=1, help="fewest tokens per utterance")
    parser.add_argument("--max-digits", type=int, default=7, help="most tokens per utterance")
    parser.add_argument("--jobs", type=int, default=2, help="parallel espeak-ng processes")
    parser.add_argument("--sample-rate", type=int, default=16000)
    parser.add_argument("--vocab", type=Path, default=None,
                        help="JSON object {transcript token: spoken words}; default: digits 0-9")
    parser.add_argument("--join", default="", help="string between transcript tokens (default: none)")
    parser.add_argument("--transcript", choices=("tokens", "spoken"), default="tokens",
                        help="tokens: the vocabulary's tokens joined with --join ('407'); "
                             "spoken: the spoken words ('four zero seven')")
    parser.add_argument("--phrases", default=None,
                        help="'commands': the built-in short command phrases; or a text file with one phrase per "
                             "line. Each utterance speaks one phrase, its transcript (instead of digits)")
    parser.add_argument("--val-accents", default=None,
                        help="comma-separated accents spoken only in val, never in training (e.g. en-gb-x-gbcwmd)")
    parser.add_argument("--test-accents", default=None,
                        help="comma-separated accents spoken only in test, never in training "
                             "(e.g. en-gb-scotland,en-029)")
    parser.add_argument("--test-phrases", type=int, default=None, metavar="K",
                        help="with --phrases: hold K phrases out of training and validation; the test split speaks "
                             "only them (unheard sentences of known words)")
    parser.add_argument("--word-times", action="store_true",
                        help="synthesise word by word, joined with pauses, and write each word's times into the "
                             "manifest (needs --transcript spoken)")
    parser.add_argument("--val-voice-fraction", type=float, default=0.12,
                        help="share of speaker variants held out for val")
    parser.add_argument("--test-voice-fraction", type=float, default=0.15,
                        help="share of speaker variants held out for test")
    args = parser.parse_args(argv)
    check_options(args)
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        summary = generate(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    splits = ", ".join(f"{name} {s['utterances']} ({s['hours']:.3f} h)" for name, s in summary["splits"].items())
    print(f"{splits}; {summary['total_hours']:.3f} h in {summary['generation_seconds']:.1f} s")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
