"""Planning a synthetic spoken corpus (scripts/make_speech_corpus.py): the options checked, the vocabulary, the
voices split by speaker between train/val/test, and one plan per utterance (text, voice, prosody, noise) drawn from
(seed, split, index). corpus/synthesis.py speaks the plans; the engines themselves are in corpus/voices.py.

``args`` below is the options namespace of scripts/make_speech_corpus.py (see its --help).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from paraformer_asr.errors import DataError, UserError
from paraformer_asr_tools.corpus.speech_corpus import hold_out_phrases, load_words, unheard_words
from paraformer_asr_tools.corpus.voices import ENGINES, Voice, parse_engines

DIGIT_WORDS = {
    "0": "zero", "1": "one", "2": "two", "3": "three", "4": "four",
    "5": "five", "6": "six", "7": "seven", "8": "eight", "9": "nine",
}
ACCENTS = ["en", "en-us", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029", "en-us-nyc"]
FEMALE_VARIANTS = ["f1", "f2", "f3", "f4", "f5", "Alicia", "Andrea", "Annie", "anika", "aunty", "belinda", "grandma",
                   "linda", "steph", "steph2", "steph3"]
MALE_VARIANTS = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "Alex", "adam", "Andy", "benjamin", "caleb", "david",
                 "ed", "edward", "Gene", "grandpa", "john", "klatt", "klatt2", "klatt3", "Lee", "max", "Michael",
                 "Mike", "paul", "quincy", "robert", "travis", "victor"]
SPLITS = ("train", "val", "test")
RATE_WPM = (130, 200)  # default --rate-range
PITCH = (25, 75)  # default --pitch-range
STRETCH = (1.0, 1.0)  # default --stretch-range: no resampling stretch, so earlier corpora stay as they were
STRETCH_LIMITS = (0.5, 2.0)
ESPEAK_RATE_WPM = (80, 450)  # what espeak-ng's -s accepts
ESPEAK_PITCH = (0, 99)
UNHEARD_DRAWS = 1000  # --unheard-orders: draws per val / test utterance before giving up
WORD_GAP_10MS = (0, 4)
SNR_DB = (20.0, 35.0)
PEAK = (0.3, 0.95)
LEADING_SILENCE_S = (0.0, 0.15)


@dataclass(frozen=True)
class UtterancePlan:
    split: str
    index: int
    text: str  # transcript (what the model predicts)
    spoken: str  # what the engine reads
    voice: str  # what the engine is given: espeak-ng's accent+variant, a flite or festival voice name
    variant: str  # the speaker (espeak-ng variant, or the person behind a flite / festival voice)
    accent: str
    rate: int  # words a minute
    pitch: int  # espeak-ng's scale, 0-99
    word_gap: int
    snr_db: float
    peak: float
    leading_silence_s: float
    noise_seed: int
    engine: str = "espeak"
    stretch: float = 1.0  # duration factor applied by resampling (> 1: slower and lower)

    @property
    def relative_path(self) -> str:
        return f"wavs/{self.split}/{self.split}_{self.index:06d}.wav"


def check_options(args) -> None:
    """UserError for option values make_speech_corpus.py cannot work with (``args``: its parsed options)."""
    counts = {"--num-train": args.num_train, "--num-val": args.num_val, "--num-test": args.num_test}
    for name, value in counts.items():
        if value < 0:
            raise UserError(f"{name} must be >= 0, got {value}")
    if sum(counts.values()) == 0:
        raise UserError("nothing to generate: all of --num-train, --num-val, --num-test are 0")
    if not 1 <= args.min_digits <= args.max_digits:
        raise UserError(f"need 1 <= --min-digits <= --max-digits, got {args.min_digits} and {args.max_digits}")
    if args.text is not None and (args.phrases is not None or args.words is not None or args.vocab is not None):
        raise UserError("--text excludes --phrases, --words and --vocab: its lines are what is spoken")
    if args.phrases is not None and args.vocab is not None:
        raise UserError("--phrases and --vocab exclude each other: the phrases are what is spoken")
    if args.words is not None and (args.vocab is not None or args.phrases is not None):
        raise UserError("--words excludes --vocab and --phrases: the words are what is spoken")
    if args.words is not None and args.join != " ":
        raise UserError("--words transcribes the words joined by spaces: leave out --join")
    if args.rare_words is not None:
        others = [name for name, value in (("--phrases", args.phrases), ("--text", args.text), ("--words", args.words),
                                           ("--vocab", args.vocab), ("--test-phrases", args.test_phrases))
                  if value is not None] + (["--unheard-orders"] if args.unheard_orders else [])
        if others:
            raise UserError(f"--rare-words makes its own sentences: leave out {', '.join(others)}")
    if args.rare_train_count < 1:
        raise UserError(f"--rare-train-count must be >= 1, got {args.rare_train_count}")
    speaks_phrases = args.phrases is not None or args.text is not None or args.rare_words is not None
    if args.unheard_orders and speaks_phrases:
        raise UserError("--unheard-orders draws token sequences, so it excludes --phrases and --text "
                        "(--test-phrases holds phrases out)")
    if args.test_phrases is not None and not speaks_phrases:
        raise UserError("--test-phrases holds phrases out, so it needs --phrases or --text")
    if args.test_phrases is not None and args.test_phrases < 1:
        raise UserError(f"--test-phrases must be >= 1, got {args.test_phrases}")
    if args.word_times and args.transcript != "spoken" and not speaks_phrases and args.words is None:
        raise UserError("--word-times times the spoken words, so the transcript must be them: add --transcript spoken")
    engines = parse_engines(args.engines)
    if args.word_times and engines != ["espeak"]:
        raise UserError("--word-times reads word by word with espeak-ng only: give --engines espeak")
    if args.jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {args.jobs}")
    if args.sample_rate < 8000:
        raise UserError(f"--sample-rate must be >= 8000, got {args.sample_rate}")
    for name, (low, high), (lowest, highest) in (("--rate-range", args.rate_range, ESPEAK_RATE_WPM),
                                                 ("--pitch-range", args.pitch_range, ESPEAK_PITCH)):
        if not lowest <= low <= high <= highest:
            raise UserError(f"{name} needs {lowest} <= LOW <= HIGH <= {highest}, got {low} {high}")
    low, high = args.stretch_range
    if not STRETCH_LIMITS[0] <= low <= high <= STRETCH_LIMITS[1]:
        raise UserError(f"--stretch-range needs {STRETCH_LIMITS[0]} <= LOW <= HIGH <= {STRETCH_LIMITS[1]}, got "
                        f"{low} {high}")
    for name in ("val_voice_fraction", "test_voice_fraction"):
        if not 0.0 < getattr(args, name) < 0.5:
            raise UserError(f"--{name.replace('_', '-')} must be in (0, 0.5), got {getattr(args, name)}")


def load_vocabulary(path: Path | None, words: str | None = None) -> dict[str, str]:
    """--vocab FILE.json ({token: spoken words}); --words (each word a token spoken as itself); else the digits."""
    if words is not None:
        return {word: word for word in load_words(words)}
    if path is None:
        return dict(DIGIT_WORDS)
    try:
        vocabulary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise DataError(f"cannot read vocabulary {path}: {err}") from None
    if not isinstance(vocabulary, dict) or not vocabulary:
        raise DataError(f"vocabulary {path} must be a non-empty JSON object {{token: spoken words}}")
    for token, spoken in vocabulary.items():
        if not token.strip() or not isinstance(spoken, str) or not spoken.strip():
            raise DataError(f"vocabulary {path}: entry {token!r} needs a non-empty token and spoken text")
    return vocabulary


def espeak_data_folder() -> Path:
    """Check espeak-ng is installed; return its data folder (holds the variant files)."""
    if shutil.which("espeak-ng") is None:
        raise UserError("espeak-ng is not installed (on Debian/Ubuntu: apt-get install espeak-ng)")
    version = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"Data at:\s*(\S+)", version)
    if match is None:
        raise UserError(f"cannot find espeak-ng's data folder in: {version.strip()!r}")
    return Path(match.group(1))


def available(variants: list[str], data_folder: Path) -> list[str]:
    """espeak-ng silently falls back to the default voice for an unknown variant, so check the files."""
    return [variant for variant in variants if (data_folder / "voices" / "!v" / variant).is_file()]


def split_variants(
    female: list[str], male: list[str], seed: int, val_fraction: float, test_fraction: float
) -> dict[str, list[str]]:
    """Disjoint speaker variants per split, female and male variants split separately."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
    splits: dict[str, list[str]] = {split: [] for split in SPLITS}
    for group in (female, male):
        if len(group) < 3:
            raise UserError(f"need at least 3 espeak-ng variants per gender to split by voice, found {group}")
        shuffled = [group[i] for i in rng.permutation(len(group))]
        num_test = max(1, round(test_fraction * len(group)))
        num_val = max(1, round(val_fraction * len(group)))
        splits["test"] += shuffled[:num_test]
        splits["val"] += shuffled[num_test : num_test + num_val]
        splits["train"] += shuffled[num_test + num_val :]
    return splits


def plan_utterances(args, vocabulary: dict[str, str], variants: dict[str, list[str]],
                    accents: dict[str, list[str]] | None = None, phrases: dict[str, list[str]] | None = None,
                    voices: dict[str, list[Voice]] | None = None, scripted: dict[str, list[str]] | None = None):
    """Every utterance's text and synthesis settings, a pure function of (seed, split, index).

    variants: the espeak-ng variants of each split; voices: the flite and festival voices of each split
    (:func:`~paraformer_asr_tools.corpus.voices.split_speakers`). Each utterance draws an engine among those with a
    voice in its split, uniformly (no draw when there is one), then one of that engine's voices, uniformly.
    accents: the accents each split draws from (default: all of ACCENTS everywhere), spoken by espeak-ng's variants
    (drawn for every utterance, so that the draws after it do not depend on the engine); phrases: the phrases each
    split draws from (:func:`phrases_per_split`); each utterance speaks one, transcribed as itself, instead of the
    vocabulary's tokens; scripted: the sentence of every utterance of each split, by index (the rare-word corpus,
    :func:`~paraformer_asr_tools.corpus.speech_corpus.rare_word_set`), transcribed as itself. Otherwise an utterance is
    --min-digits .. --max-digits tokens (a uniform count) drawn uniformly with replacement; with
    ``args.unheard_orders`` a val or test draw whose transcript a training utterance has is drawn again (training is
    planned first and is the same with or without it)."""
    tokens = sorted(vocabulary)
    accents = accents or {split: ACCENTS for split in SPLITS}
    plans = []
    heard: set[str] = set()  # the training transcripts
    for split_index, (split, count) in enumerate(zip(SPLITS, (args.num_train, args.num_val, args.num_test))):
        for index in range(count):
            rng = np.random.default_rng(np.random.SeedSequence([args.seed, split_index, index]))
            if scripted is not None:
                spoken = text = scripted[split][index]
            elif phrases is None:
                for _ in range(UNHEARD_DRAWS):
                    length = int(rng.integers(args.min_digits, args.max_digits + 1))
                    chosen = [tokens[i] for i in rng.integers(0, len(tokens), size=length)]
                    spoken = " ".join(vocabulary[token] for token in chosen)
                    text = spoken if args.transcript == "spoken" else args.join.join(chosen)
                    if split == "train" or not args.unheard_orders or text not in heard:
                        break
                else:
                    raise DataError(f"--unheard-orders: {UNHEARD_DRAWS} draws for {split} utterance {index} all "
                                    f"repeat a training transcript (raise --max-digits / --max-words or give more "
                                    f"tokens)")
            else:
                spoken = text = phrases[split][int(rng.integers(0, len(phrases[split])))]
            if split == "train":
                heard.add(text)
            pools = voice_pools(variants[split], (voices or {}).get(split, []))
            pool = pools[int(rng.integers(0, len(pools)))] if len(pools) > 1 else pools[0]
            voice = pool[int(rng.integers(0, len(pool)))]
            accent = accents[split][int(rng.integers(0, len(accents[split])))]
            espeak = voice.engine == "espeak"
            plans.append(UtterancePlan(
                split=split,
                index=index,
                text=text,
                spoken=spoken,
                voice=f"{accent}+{voice.name}" if espeak else voice.name,
                variant=voice.speaker,
                accent=accent if espeak else voice.accent,
                rate=int(rng.integers(args.rate_range[0], args.rate_range[1] + 1)),
                pitch=int(rng.integers(args.pitch_range[0], args.pitch_range[1] + 1)),
                word_gap=int(rng.integers(WORD_GAP_10MS[0], WORD_GAP_10MS[1] + 1)),
                snr_db=float(rng.uniform(*SNR_DB)),
                peak=float(rng.uniform(*PEAK)),
                leading_silence_s=float(rng.uniform(*LEADING_SILENCE_S)),
                noise_seed=int(rng.integers(0, 2**63 - 1)),
                engine=voice.engine,
                stretch=float(rng.uniform(*args.stretch_range)),
            ))
    return plans


def voice_pools(variants: list[str], voices: list[Voice]) -> list[list[Voice]]:
    """The voices of one split, one list per engine that has any, in the order of ENGINES: the espeak-ng
    ``variants`` (their accent is drawn apart) and the flite and festival ``voices``."""
    every = [Voice("espeak", variant, variant) for variant in variants] + list(voices)
    pools = [[voice for voice in every if voice.engine == engine] for engine in ENGINES]
    return [pool for pool in pools if pool]


def phrases_per_split(phrases: list[str] | None, test_phrases: int | None,
                      seed: int) -> tuple[dict[str, list[str]] | None, list[str]]:
    """The phrases each split draws from and those held out for the test split (``--test-phrases``): without it
    every split draws from all of them; with it the test split speaks only the held-out phrases
    (:func:`~paraformer_asr_tools.corpus.speech_corpus.hold_out_phrases`) and training and validation never do."""
    if phrases is None:
        return None, []
    if test_phrases is None:
        return {split: phrases for split in SPLITS}, []
    kept, held_out = hold_out_phrases(phrases, test_phrases, seed)
    return {"train": kept, "val": kept, "test": held_out}, held_out


def check_test_words_heard(plans: list[UtterancePlan]) -> None:
    """DataError when a test utterance speaks a word that no training utterance speaks."""
    unheard = unheard_words([plan.text for plan in plans if plan.split == "train"],
                            [plan.text for plan in plans if plan.split == "test"])
    if unheard:
        raise DataError(f"the held-out test phrases use words that no training utterance speaks: "
                        f"{', '.join(unheard[:10])} (raise --num-train or lower --test-phrases)")
