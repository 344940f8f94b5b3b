"""Synthesising a spoken corpus with espeak-ng, flite and festival (scripts/make_speech_corpus.py): every planned
utterance (corpus/utterance_plans.py) read by its engine, stretched, padded and mixed with noise, written as WAVs
plus JSON Lines manifests and a corpus.json summary.

``args`` below is the options namespace of scripts/make_speech_corpus.py (see its --help).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from paraformer_asr.data.audio import read_audio, write_audio
from paraformer_asr.data.resample import resample
from paraformer_asr.errors import UserError
from paraformer_asr_tools.corpus.speech_corpus import (RareWordSet, load_phrases, load_rare_words, load_text,
                                                       parse_accent_list, phrase_vocabulary, rare_word_set,
                                                       split_accents)
from paraformer_asr_tools.corpus.utterance_plans import (ACCENTS, FEMALE_VARIANTS, MALE_VARIANTS, SPLITS, UtterancePlan,
                                                         available, check_test_words_heard, espeak_data_folder,
                                                         load_vocabulary, phrases_per_split, plan_utterances,
                                                         split_variants)
from paraformer_asr_tools.corpus.voices import (FESTIVAL_BATCH, Reading, espeak_command, flite_command,
                                                installed_voices, parse_engines, read_with_festival, run_engine,
                                                split_speakers)
from paraformer_asr_tools.corpus.word_timing import draw_pauses, join_words


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
