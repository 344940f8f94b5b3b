"""Synthesising a spoken corpus with espeak-ng, flite and festival (scripts/make_speech_corpus.py): voices split by
speaker between train/val/test, per-utterance voice, prosody and noise drawn from (seed, split, index), WAVs plus
JSON Lines manifests. The engines themselves are in data/voices.py.

``args`` below is the options namespace of scripts/make_speech_corpus.py (see its --help).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from paraformer_asr.data.audio import read_audio, write_audio
from paraformer_asr.data.resample import resample
from paraformer_asr.data.speech_corpus import (RareWordSet, hold_out_phrases, load_phrases, load_rare_words, load_text,
                                               load_words, parse_accent_list, phrase_vocabulary, rare_word_set,
                                               split_accents, unheard_words)
from paraformer_asr.data.voices import (ENGINES, FESTIVAL_BATCH, Reading, Voice, espeak_command, flite_command,
                                        installed_voices, parse_engines, read_with_festival, run_engine,
                                        split_speakers)
from paraformer_asr.data.word_timing import draw_pauses, join_words
from paraformer_asr.errors import DataError, UserError

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
    (:func:`~paraformer_asr.data.voices.split_speakers`). Each utterance draws an engine among those with a voice
    in its split, uniformly (no draw when there is one), then one of that engine's voices, uniformly.
    accents: the accents each split draws from (default: all of ACCENTS everywhere), spoken by espeak-ng's variants
    (drawn for every utterance, so that the draws after it do not depend on the engine); phrases: the phrases each
    split draws from (:func:`phrases_per_split`); each utterance speaks one, transcribed as itself, instead of the
    vocabulary's tokens; scripted: the sentence of every utterance of each split, by index (the rare-word corpus,
    :func:`~paraformer_asr.data.speech_corpus.rare_word_set`), transcribed as itself. Otherwise an utterance is
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
    (:func:`~paraformer_asr.data.speech_corpus.hold_out_phrases`) and training and validation never do."""
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


def plan_reading(plan: UtterancePlan, text: str, scratch: Path) -> Reading:
    """What the plan's engine is asked to read (``text``), into which raw file of ``scratch``."""
    return Reading(text, scratch / f"{plan.split}_{plan.index:06d}.wav", plan.rate, plan.pitch)


def played_rate(rate: int, stretch: float) -> int:
    """The sample rate at which a recording made at ``rate`` lasts ``stretch`` times as long: its own for 1, else
    rounded to 100 Hz (within 0.6 % of the stretch at 16 kHz), which keeps the resampling ratio's terms small."""
    return rate if stretch == 1.0 else round(rate / stretch / 100) * 100


def speak(plan: UtterancePlan, text: str, sample_rate: int, scratch: Path) -> torch.Tensor:
    """The plan's engine reads ``text`` with its voice, rate and pitch (and word gap: espeak-ng) -> mono waveform
    [N] at sample_rate, ``plan.stretch`` times as long. festival has read it already, in its voice's batch
    (:func:`read_festival_batch`)."""
    reading = plan_reading(plan, text, scratch)
    if plan.engine == "espeak":
        run_engine(espeak_command(plan.voice, reading, plan.word_gap))
    elif plan.engine == "flite":
        run_engine(flite_command(plan.voice, reading))
    samples, rate = read_audio(reading.path)  # [C, N]
    reading.path.unlink()
    return resample(samples.mean(dim=0).double(), played_rate(rate, plan.stretch), sample_rate)  # [N]


def festival_batches(plans: list[UtterancePlan]) -> list[list[UtterancePlan]]:
    """festival's plans grouped by voice, in plan order, at most FESTIVAL_BATCH a group: one festival process
    reads each group."""
    by_voice: dict[str, list[UtterancePlan]] = {}
    for plan in plans:
        if plan.engine == "festival":
            by_voice.setdefault(plan.voice, []).append(plan)
    return [group[start:start + FESTIVAL_BATCH] for group in by_voice.values()
            for start in range(0, len(group), FESTIVAL_BATCH)]


def read_festival_batch(batch: list[UtterancePlan], scratch: Path) -> None:
    """One festival process reads every plan of ``batch`` (one voice) into its raw file."""
    first = batch[0]
    read_with_festival(first.voice, [plan_reading(plan, plan.spoken, scratch) for plan in batch],
                       scratch / f"festival_{first.split}_{first.index:06d}.scm")


def synthesise(plan: UtterancePlan, out: Path, sample_rate: int, scratch: Path,
               word_times: bool = False) -> tuple[float, list[dict] | None]:
    """Synthesise one utterance, post-process, write the WAV. Returns its duration in seconds and, with
    ``word_times``, its timed words."""
    if word_times:
        words = plan.spoken.split()
        pauses, trailing = draw_pauses(len(words) - 1, plan.noise_seed)
        clips = [speak(plan, word, sample_rate, scratch) for word in words]
        try:
            speech, timed = join_words(words, clips, pauses, plan.leading_silence_s, trailing, sample_rate)
        except ValueError as err:
            raise UserError(f"{plan.relative_path}: {err}") from None
    else:
        speech, timed = speak(plan, plan.spoken, sample_rate, scratch), None
        speech = torch.cat([torch.zeros(round(plan.leading_silence_s * sample_rate), dtype=torch.float64), speech])
    speech = speech * (plan.peak / speech.abs().max().clamp(min=1e-9))
    noise = torch.randn(speech.numel(), generator=torch.Generator().manual_seed(plan.noise_seed), dtype=torch.float64)
    noise_rms = speech.square().mean().sqrt() / (10.0 ** (plan.snr_db / 20.0))
    noisy = (speech + noise * noise_rms).clamp(-1.0, 1.0)
    target = out / plan.relative_path
    write_audio(target, noisy, sample_rate)
    return noisy.numel() / sample_rate, timed


def words_per_utterance(plans: list[UtterancePlan]) -> dict[str, int]:
    """{spoken word count: utterances}, counts in increasing order (JSON keys are strings)."""
    counts = Counter(len(plan.spoken.split()) for plan in plans)
    return {str(count): counts[count] for count in sorted(counts)}


def write_manifest(path: Path, plans: list[UtterancePlan], words: list[list[dict] | None],
                   hotwords: list[list[str]] | None = None) -> None:
    """One JSON line per plan: audio, text, id, the voice, timed ``words`` when given, and with ``hotwords`` (the
    rare-word corpus) the rare words each utterance speaks."""
    with path.open("w", encoding="utf-8") as handle:
        for index, (plan, timed) in enumerate(zip(plans, words)):
            record = {"audio": plan.relative_path, "text": plan.text, "id": f"{plan.split}_{plan.index:06d}",
                      "accent": plan.accent, "speaker": plan.variant, "engine": plan.engine, "voice": plan.voice}
            if timed is not None:
                record["words"] = timed
            if hotwords is not None:
                record["hotwords"] = hotwords[index]
            handle.write(json.dumps(record) + "\n")


def rare_word_summary(args, rare: RareWordSet) -> dict:
    """corpus.json's record of a rare-word corpus: the option, and every rare word with its distractor and its count
    of training utterances."""
    return {"rare_words": args.rare_words, "rare_train_count": args.rare_train_count,
            "rare_word_list": [{"word": word, "distractor": rare.distractors[word], "heard_in_training": count}
                               for word, count in rare.heard.items()]}


def synthesise_task(task: list[UtterancePlan], args, scratch: Path) -> list[tuple[float, list[dict] | None]]:
    """Synthesise one task: a single espeak-ng or flite utterance, or a festival batch (:func:`festival_batches`)
    read by one festival process before each of its utterances is post-processed."""
    if task[0].engine == "festival":
        read_festival_batch(task, scratch)
    return [synthesise(plan, args.out, args.sample_rate, scratch, args.word_times) for plan in task]


def generate(args) -> dict:
    vocabulary = load_vocabulary(args.vocab, args.words)
    engines = parse_engines(args.engines)
    variants: dict[str, list[str]] = {split: [] for split in SPLITS}
    if "espeak" in engines:
        data_folder = espeak_data_folder()
        variants = split_variants(
            available(FEMALE_VARIANTS, data_folder), available(MALE_VARIANTS, data_folder), args.seed,
            args.val_voice_fraction, args.test_voice_fraction,
        )
    recorded = [voice for engine in engines if engine != "espeak" for voice in installed_voices(engine)]
    voices = (split_speakers(recorded, args.seed, args.val_voice_fraction, args.test_voice_fraction) if recorded
              else {split: [] for split in SPLITS})
    accents = split_accents(ACCENTS, parse_accent_list(args.val_accents, "--val-accents", ACCENTS),
                            parse_accent_list(args.test_accents, "--test-accents", ACCENTS),
                            parse_accent_list(args.train_accents, "--train-accents", ACCENTS))
    phrases = (load_text(args.text) if args.text is not None else
               load_phrases(args.phrases) if args.phrases is not None else None)
    per_split, held_out = phrases_per_split(phrases, args.test_phrases, args.seed)
    rare = None
    if args.rare_words is not None:
        counts = {"train": args.num_train, "val": args.num_val, "test": args.num_test}
        rare = rare_word_set(load_rare_words(args.rare_words), counts, args.rare_train_count, args.seed)
    plans = plan_utterances(args, vocabulary, variants, accents, per_split, voices,
                            rare.sentences if rare is not None else None)
    if held_out:
        check_test_words_heard(plans)
    for split in SPLITS:
        (args.out / "wavs" / split).mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # the parallelism is across utterances
    started = time.perf_counter()
    show_progress = sys.stdout.isatty() and not os.environ.get("CI")
    tasks = festival_batches(plans) + [[plan] for plan in plans if plan.engine != "festival"]  # long ones first
    done = {}
    with tempfile.TemporaryDirectory(prefix="synth_", dir=args.out) as scratch, \
            ThreadPoolExecutor(max_workers=args.jobs) as pool, \
            tqdm(total=len(plans), desc="synthesising", unit="utt", disable=not show_progress) as progress:
        for task, task_results in zip(tasks, pool.map(lambda task: synthesise_task(task, args, Path(scratch)), tasks)):
            done.update(zip(task, task_results))
            progress.update(len(task))
    results = [done[plan] for plan in plans]
    durations = [duration for duration, _ in results]
    heard = {plan.text for plan in plans if plan.split == "train"}
    elapsed = time.perf_counter() - started
    text_source = ({"phrases": args.phrases, "text": None if args.text is None else str(args.text),
                    "distinct_phrases": len(set(phrases)),
                    "distinct_words": len(phrase_vocabulary(phrases)), "test_phrases": held_out}
                   if phrases is not None else rare_word_summary(args, rare) if rare is not None else
                   {"words": args.words, "vocabulary": vocabulary, "join": args.join, "transcript": args.transcript,
                    "min_tokens": args.min_digits, "max_tokens": args.max_digits,
                    "unheard_orders": args.unheard_orders})
    summary = {"seed": args.seed, "sample_rate": args.sample_rate, **text_source, "word_times": args.word_times,
               "engines": engines, "accents": ACCENTS, "rate_range": list(args.rate_range),
               "pitch_range": list(args.pitch_range), "stretch_range": list(args.stretch_range),
               "generation_seconds": round(elapsed, 2), "jobs": args.jobs, "splits": {}}
    for split in SPLITS:
        chosen = [(plan, duration) for plan, duration in zip(plans, durations) if plan.split == split]
        split_plans = [plan for plan, _ in chosen]
        write_manifest(args.out / f"{split}.jsonl", split_plans,
                       [timed for plan, (_, timed) in zip(plans, results) if plan.split == split],
                       rare.hotwords[split] if rare is not None else None)
        seconds = sum(duration for _, duration in chosen)
        summary["splits"][split] = {
            "utterances": len(chosen),
            "hours": round(seconds / 3600, 4),
            "mean_duration_s": round(seconds / len(chosen), 3) if chosen else 0.0,
            "variants": variants[split],
            "variants_used": sorted({plan.variant for plan in split_plans}),
            "voices": [f"{voice.engine}:{voice.name}" for voice in voices[split]],  # flite's and festival's
            "engines_used": dict(sorted(Counter(plan.engine for plan in split_plans).items())),
            "accents": accents[split],
            "accents_used": sorted({plan.accent for plan in split_plans}),
            "distinct_phrases": len({plan.text for plan in split_plans}),
            "words_per_utterance": words_per_utterance(split_plans),
        }
        if split != "train":  # how many of its transcripts training also speaks (0 with --unheard-orders)
            summary["splits"][split]["heard_in_training"] = sum(plan.text in heard for plan in split_plans)
    summary["total_hours"] = round(sum(s["hours"] for s in summary["splits"].values()), 4)
    summary["example"] = asdict(plans[0])
    (args.out / "corpus.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if rare is not None:  # the list eval.py --hotwords reads: every rare word, one a line
        (args.out / "hotwords.txt").write_text("".join(f"{word}\n" for word in rare.heard), encoding="utf-8")
    return summary
