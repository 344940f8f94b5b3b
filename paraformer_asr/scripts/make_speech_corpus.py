"""Synthesise a spoken corpus with espeak-ng, flite and festival: WAVs plus train/val/test JSON Lines manifests.

Default vocabulary: digit strings of --min-digits .. --max-digits digits. The transcript is the compact digit string
("407"), spoken digit by digit as words ("four zero seven"); the model predicts the transcript's characters.
With --transcript spoken the transcript is what is spoken ("four zero seven"): longer outputs, as in real speech
(the corpus of configs/paraformer_numbers.yaml: 6-12 digits, transcribed as words). Another vocabulary can be given with
--vocab FILE.json, an object mapping each transcript token to the words spoken for it (tokens are joined with --join,
default "" for single characters). --phrases commands speaks short voice-assistant commands instead ("turn on the
kitchen lights", "set a timer for five minutes": 296 phrases, 135 words, paraformer_asr_tools/corpus/speech_corpus.py),
--phrases FILE the phrases of a text file (one per line); the transcript is the phrase. --words keywords draws each
utterance as --min-words .. --max-words words (aliases of --min-digits / --max-digits: a uniform count, words drawn
uniformly with replacement, so in any order) from 30 built-in words (colours, animals, directions, yes / no, digits;
paraformer_asr_tools/corpus/speech_corpus.py), --words FILE from one word per line; the transcript is the words joined
by spaces. --text FILE reads any text, one phrase a line, transcribed as its lower-case words without punctuation ("It's
5 o'clock." -> "it's 5 o'clock").

Voices: --engines espeak,flite,festival (default espeak) reads with every installed English voice of each engine
(paraformer_asr_tools/corpus/voices.py). An espeak-ng voice is an accent (en, en-us, en-gb-scotland, ...) plus a speaker
variant (m1, f3, klatt, ...); flite's voices are those `flite -lv` lists (but awb_time, which only says the time);
festival's those festival's (voice.list) holds in English (diphone and HTS voices). espeak-ng's variants are split
between train, val and test (separately for female and male variants); flite's and festival's voices by the person they
were built from, every voice of a person (flite's kal and kal16, festival's kal_diphone) in one split; so test speakers
are never heard in training. Each utterance draws an engine (uniformly among those with a voice in its split), then one
of its voices. Accents are shared unless --val-accents / --test-accents hold some out: those are spoken only in their
split, never in training; --train-accents limits training (and a split that holds none out) to the accents it names. Per
utterance, an accent, a rate (-s, from --rate-range, default 130 200 words a minute), a pitch (-p, from --pitch-range,
default 25 75), a word gap (-g), a gain, leading silence, white noise (SNR 20-35 dB) and a duration stretch
(--stretch-range, default 1 1: none; by resampling, so pitch follows) are drawn from a generator seeded by (seed, split,
index), so the corpus is identical for a given seed whatever --jobs is. flite and festival take the rate and pitch on
the same scales (as duration and F0 factors); festival reads each voice's utterances in batches, one festival process
per batch of up to 250.

With --test-phrases K (and --phrases or --text) the test split also holds out sentences: K distinct phrases, each made
only of words the other phrases speak, are never spoken in training or validation, and the test split speaks only them;
the script stops with an error if a word of them is missing from the drawn training utterances. corpus.json lists them
("test_phrases"). With --unheard-orders (token draws: --words, --vocab, digits) every val and test transcript is one
that no training utterance has: a val or test draw that repeats a training transcript is drawn again, so short sequences
(a single word: all of them are heard) become rarer there; training is the same as without the option. corpus.json
records "unheard_orders", and per split "heard_in_training" and "words_per_utterance". Every manifest line carries its
voice: "engine", "voice" (what the engine was given: en-us+m1, kal16, kal_diphone), "accent" and "speaker" (the
espeak-ng variant, or the person behind a flite / festival voice), for grouped scores.

With --rare-words names (or a FILE of "rare word<TAB>distractor" lines) the corpus is a small test set for hotwords
(eval.py --hotwords): carrier sentences ("please call {} tomorrow morning", 10 of them) with one slot, filled in train
and val with common words and the distractors, in test with 16 rare words (8 surnames, 8 technical terms:
paraformer_asr_tools/corpus/speech_corpus.py), each paired with a common word that sounds alike. Half of the rare words
(drawn from --seed) are spoken --rare-train-count times (default 3) in training, the others never; the test split goes
round the rare words, every fourth round speaking their distractors instead (so at least 64 test utterances to have
any). Every manifest line has "hotwords": the rare words it speaks ([] for the others); corpus.json lists each rare
word, its distractor and how often training speaks it ("rare_word_list"), and OUT/hotwords.txt every rare word, one a
line (the list for eval.py --hotwords).

With --word-times (and --transcript spoken, or --words) every word is synthesised on its own, trimmed to its audible
part and joined to the next with a pause (paraformer_asr_tools/corpus/word_timing.py); each manifest line then has
"words": [{"word", "start_ms", "end_ms"}], the ground truth of eval.py's word_boundary_mae_ms.

Usage (from paraformer_asr/):
    python scripts/make_speech_corpus.py --out /path/to/speech --num-train 3000 --num-val 300 --num-test 300
    python scripts/make_speech_corpus.py --out /path/to/commands --num-train 1600 --num-val 200 --num-test 300 \
        --phrases commands --val-accents en-gb-x-gbcwmd --test-accents en-gb-scotland,en-029 [--test-phrases 40]
    # the hard development corpus: 1-4 random words, unheard val / test accents and speakers
    python scripts/make_speech_corpus.py --out /path/to/hard --num-train 1600 --num-val 200 --num-test 240 \
        --words keywords --min-words 1 --max-words 4 --sample-rate 22050 --train-accents en-us,en,en-gb-x-rp \
        --val-accents en-gb-x-gbcwmd --test-accents en-gb-scotland,en-029,en-us-nyc --rate-range 130 200 \
        --pitch-range 25 75 --seed 0 [--unheard-orders]
    # the hotword test set: rare names and terms, a few times or never in training, and sound-alike distractors
    python scripts/make_speech_corpus.py --out /path/to/rare --num-train 600 --num-val 64 --num-test 128 \
        --rare-words names --rare-train-count 3
    # many voices of three engines reading the lines of a text file
    python scripts/make_speech_corpus.py --out /path/to/voices --num-train 3000 --num-val 300 --num-test 300 \
        --text phrases.txt --engines espeak,flite,festival --stretch-range 0.9 1.1
Writes OUT/wavs/<split>/<split>_NNNNNN.wav (at --sample-rate, default 16000 Hz), OUT/train.jsonl, OUT/val.jsonl,
OUT/test.jsonl, OUT/corpus.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paraformer_asr.errors import UserError
from paraformer_asr_tools.corpus.synthesis import generate
from paraformer_asr_tools.corpus.utterance_plans import PITCH, RATE_WPM, STRETCH, check_options


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--num-train", type=int, default=3000)
    parser.add_argument("--num-val", type=int, default=300)
    parser.add_argument("--num-test", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-digits", "--min-words", dest="min_digits", type=int, default=1,
                        help="fewest tokens (digits, words) per utterance")
    parser.add_argument("--max-digits", "--max-words", dest="max_digits", type=int, default=7,
                        help="most tokens (digits, words) per utterance")
    parser.add_argument("--jobs", type=int, default=2, help="parallel synthesis processes")
    parser.add_argument("--sample-rate", type=int, default=16000)
    parser.add_argument("--vocab", type=Path, default=None,
                        help="JSON object {transcript token: spoken words}; default: digits 0-9")
    parser.add_argument("--words", default=None,
                        help="'keywords': the 30 built-in words; or a text file with one word per line. Each "
                             "utterance speaks --min-words .. --max-words of them drawn at random, its transcript "
                             "the words joined by spaces")
    parser.add_argument("--join", default=None,
                        help="string between transcript tokens (default: none; a space with --words)")
    parser.add_argument("--transcript", choices=("tokens", "spoken"), default="tokens",
                        help="tokens: the vocabulary's tokens joined with --join ('407'); "
                             "spoken: the spoken words ('four zero seven')")
    parser.add_argument("--phrases", default=None,
                        help="'commands': the built-in short command phrases; or a text file with one phrase per "
                             "line. Each utterance speaks one phrase, its transcript (instead of digits)")
    parser.add_argument("--text", type=Path, default=None,
                        help="a text file, one phrase per line: each utterance reads one, transcribed as its "
                             "lower-case words without punctuation")
    parser.add_argument("--rare-words", default=None,
                        help="'names': the built-in rare words (surnames, terms) and their sound-alikes; or a file "
                             "of 'rare word<TAB>distractor' lines. A hotword test set: carrier sentences, the rare "
                             "words in test (and a few times in training), a 'hotwords' field on every line")
    parser.add_argument("--rare-train-count", type=int, default=3,
                        help="with --rare-words: training utterances of each rare word heard in training (half of "
                             "them; the others are never heard)")
    parser.add_argument("--engines", default="espeak",
                        help="comma-separated synthesisers whose installed voices read the corpus: espeak, flite, "
                             "festival (default: espeak)")
    parser.add_argument("--train-accents", default=None,
                        help="comma-separated accents spoken in training (default: every accent not held out), "
                             "e.g. en-us,en,en-gb-x-rp")
    parser.add_argument("--val-accents", default=None,
                        help="comma-separated accents spoken only in val, never in training (e.g. en-gb-x-gbcwmd)")
    parser.add_argument("--test-accents", default=None,
                        help="comma-separated accents spoken only in test, never in training "
                             "(e.g. en-gb-scotland,en-029)")
    parser.add_argument("--test-phrases", type=int, default=None, metavar="K",
                        help="with --phrases or --text: hold K phrases out of training and validation; the test "
                             "split speaks only them (unheard sentences of known words)")
    parser.add_argument("--unheard-orders", action="store_true",
                        help="every val and test transcript is a token sequence no training utterance has "
                             "(not with --phrases or --text)")
    parser.add_argument("--rate-range", type=int, nargs=2, default=list(RATE_WPM), metavar=("LOW", "HIGH"),
                        help="speaking rate drawn per utterance, words a minute (default: "
                             f"{RATE_WPM[0]} {RATE_WPM[1]})")
    parser.add_argument("--pitch-range", type=int, nargs=2, default=list(PITCH), metavar=("LOW", "HIGH"),
                        help="espeak-ng pitch drawn per utterance, 0-99 (default: "
                             f"{PITCH[0]} {PITCH[1]})")
    parser.add_argument("--stretch-range", type=float, nargs=2, default=list(STRETCH), metavar=("LOW", "HIGH"),
                        help="duration factor drawn per utterance, applied by resampling (pitch follows; default: "
                             f"{STRETCH[0]} {STRETCH[1]}, none)")
    parser.add_argument("--word-times", action="store_true",
                        help="synthesise word by word, joined with pauses, and write each word's times into the "
                             "manifest (needs --transcript spoken or --words)")
    parser.add_argument("--val-voice-fraction", type=float, default=0.12,
                        help="share of speaker variants held out for val")
    parser.add_argument("--test-voice-fraction", type=float, default=0.15,
                        help="share of speaker variants held out for test")
    args = parser.parse_args(argv)
    if args.join is None:
        args.join = " " if args.words is not None else ""
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
