"""Scoring a model on a loader (used for validation in the loop and by scripts/eval.py)."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from paraformer_asr.data.audio import audio_info, segment_frames
from paraformer_asr.data.manifest import ManifestEntry, read_manifest
from paraformer_asr.data.setup import check_vocabulary
from paraformer_asr.data.tokenizer import Tokenizer
from paraformer_asr.decode.longform import LongFormOptions, transcribe_long
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.decode.search import Transcript, transcribe_batches
from paraformer_asr.decode.timestamps import FrameClock, frame_clock, word_times
from paraformer_asr.errors import ConfigError
from paraformer_asr.inference import LoadedModel, evaluation_loader, evaluation_manifest
from paraformer_asr.metrics import score_transcripts, word_boundary_errors


def evaluate(model: nn.Module, loader: DataLoader, tokenizer: Tokenizer, device: torch.device,
             method: str = "greedy", beam_size: int = 4, lm=None, lm_weight: float = 0.0,
             clock: FrameClock | None = None) -> tuple[dict, list[Transcript], list[str]]:
    """-> (scores: cer, wer, token_accuracy, sequence_accuracy, length_accuracy, num_utterances, rtf;
    transcripts; hypothesis texts). rtf = decoding seconds / seconds of input. With a ``clock`` the
    transcripts carry token times, and when the references have timed words the scores add
    ``word_boundary_mae_ms`` (mean |start| and |end| error over the correctly recognised words) and
    ``word_boundary_words`` (how many words it is measured on)."""
    transcripts, seconds = transcribe_batches(model, loader, device, method, beam_size, lm, lm_weight, clock)
    hyp_texts = [tokenizer.decode(t.hyp_tokens) for t in transcripts]
    scores = score_transcripts([t.ref_tokens for t in transcripts], [t.hyp_tokens for t in transcripts],
                               [t.ref_text for t in transcripts], hyp_texts).to_dict()
    audio_seconds = sum(t.duration_s for t in transcripts)
    scores["rtf"] = seconds / audio_seconds if audio_seconds > 0 else 0.0
    timed = [t for t in transcripts if t.token_times is not None and t.ref_words is not None]
    if timed:
        errors = [error for t in timed for error in word_boundary_errors(t.ref_words, hypothesis_words(tokenizer, t))]
        scores["word_boundary_mae_ms"] = sum(errors) / len(errors) if errors else None
        scores["word_boundary_words"] = len(errors) // 2
    return scores, transcripts, hyp_texts


def hypothesis_words(tokenizer: Tokenizer, transcript: Transcript) -> list[dict]:
    """The timed words of a transcript decoded with timestamps: [{"word", "start_ms", "end_ms"}]."""
    return word_times(tokenizer.pieces(transcript.hyp_tokens), transcript.token_times)


def recording_seconds(entry: ManifestEntry) -> float:
    """Length of a manifest entry's audio (its segment, if it has one) from the file's header."""
    info = audio_info(entry.audio_path)
    _, count = segment_frames(info.sample_rate, info.num_frames, entry.start_s, entry.end_s, str(entry.audio_path))
    return (info.num_frames if count < 0 else count) / info.sample_rate


def evaluate_long_form(loaded, entries: list[ManifestEntry], device: torch.device, options: LongFormOptions,
                       method: str = "greedy", beam_size: int = 4, lm=None, lm_weight: float = 0.0,
                       progress=None) -> tuple[dict, list[dict]]:
    """Score recordings decoded window by window (decode/longform.py), each on its own.

    -> (scores: the keys of :func:`evaluate` (hypothesis token ids re-encoded from the stitched text) with
    rtf = wall seconds of reading, features and decoding / seconds of audio, plus ``windows`` and, for a
    Paraformer, ``word_times_increase`` (every word starts after the previous one ends); predictions: one
    dict per recording, ``id``, ``ref``, ``hyp``, and ``words`` with times for a Paraformer).
    ``progress(entry, windows_done, windows_total)`` is called as windows are decoded."""
    tokenizer = loaded.tokenizer
    results = []
    for entry in entries:
        report = None if progress is None else (lambda done, total, entry=entry: progress(entry, done, total))
        results.append(transcribe_long(loaded, entry.audio_path, device, options, name=f"{entry.where}: "
                                       f"{entry.audio_path}", start_s=entry.start_s, end_s=entry.end_s,
                                       method=method, beam_size=beam_size, lm=lm, lm_weight=lm_weight,
                                       progress=report))
    scores = score_transcripts([tokenizer.encode(entry.text) for entry in entries],
                               [tokenizer.encode(result.text) for result in results],
                               [entry.text for entry in entries], [result.text for result in results]).to_dict()
    audio_seconds = sum(result.duration_s for result in results)
    scores["rtf"] = sum(result.seconds for result in results) / audio_seconds if audio_seconds > 0 else 0.0
    scores["windows"] = sum(result.num_windows for result in results)
    if all(result.words is not None for result in results):
        scores["word_times_increase"] = all(
            a["start_ms"] <= a["end_ms"] <= b["start_ms"] <= b["end_ms"]
            for result in results for a, b in zip(result.words, result.words[1:]))
    timed = [(entry.words, result.words) for entry, result in zip(entries, results)
             if entry.words is not None and result.words is not None]
    if timed:
        errors = [error for ref_words, hyp_words in timed for error in word_boundary_errors(ref_words, hyp_words)]
        scores["word_boundary_mae_ms"] = sum(errors) / len(errors) if errors else None
        scores["word_boundary_words"] = len(errors) // 2
    predictions = []
    for entry, result in zip(entries, results):
        line = {"id": entry.id, "ref": entry.text, "hyp": result.text}
        if result.words is not None:
            line["words"] = result.words
        predictions.append(line)
    return scores, predictions


def evaluate_checkpoint(loaded: LoadedModel, device: torch.device, split: str, manifest: str | None,
                        options: LongFormOptions, decoding: DecodingOptions = DecodingOptions(),
                        batch_size: int = 64, long_form: bool = False, progress=None) -> tuple[dict, list[dict]]:
    """What scripts/eval.py reports: the scores of ``loaded`` on its ``split`` or on ``manifest``, and one
    prediction dict per utterance ({"id", "ref", "hyp"}, plus timed "words" for a Paraformer).

    A manifest with a recording longer than ``options.chunk_seconds`` (or ``long_form``) is decoded recording by
    recording, window by window (:func:`evaluate_long_form`, ``progress`` as there); otherwise in batches.
    ``decoding`` says how (decode/options.py: greedy or beam, with a token n-gram LM when ``lm_order`` > 0)."""
    manifest_path = evaluation_manifest(loaded, split, manifest)
    if long_form and manifest_path is None:
        raise ConfigError("--long-form needs a checkpoint trained on audio")
    entries = None
    if manifest_path is not None:
        entries = read_manifest(manifest_path, skip_bad_files=loaded.cfg.data.skip_bad_files)
        if not long_form and all(recording_seconds(e) <= options.chunk_seconds for e in entries):
            entries = None  # every recording fits in one window: the batched path
    search = decoding.search_arguments(loaded)  # method, beam_size, lm, lm_weight
    if entries is not None:
        check_vocabulary([e.text for e in entries], loaded.tokenizer, manifest_path)
        scores, predictions = evaluate_long_form(loaded, entries, device, options, **search, progress=progress)
        scores["long_form"] = True
    else:
        loader = evaluation_loader(loaded, split, manifest, batch_size)
        clock = frame_clock(loaded.cfg) if loaded.model.gives_timestamps else None
        with torch.no_grad():
            scores, transcripts, hyps = evaluate(loaded.model, loader, loaded.tokenizer, device, **search,
                                                 clock=clock)
        predictions = []
        for transcript, hyp in zip(transcripts, hyps):
            line = {"id": transcript.id, "ref": transcript.ref_text, "hyp": hyp}
            if transcript.token_times is not None:
                line["words"] = hypothesis_words(loaded.tokenizer, transcript)
            predictions.append(line)
    result = {**scores, "decode": decoding.method, "beam_size": decoding.effective_beam_size,
              "lm_order": decoding.lm_order, "lm_weight": search["lm_weight"],
              "checkpoint": str(loaded.path), "dataset": manifest or f"{loaded.cfg.data.kind}:{split}"}
    return result, predictions
