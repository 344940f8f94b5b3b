"""Scoring a model on a loader (used for validation in the loop and by scripts/eval.py)."""

from __future__ import annotations

import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from paraformer_asr.data.audio import audio_info, segment_frames
from paraformer_asr.data.manifest import ManifestEntry, read_manifest, read_manifest_records
from paraformer_asr.data.setup import check_vocabulary
from paraformer_asr.data.tokenizer import Tokenizer
from paraformer_asr.decode.longform import LongFormOptions, transcribe_long
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.decode.search import Transcript, transcribe_batches
from paraformer_asr.decode.timestamps import FrameClock, frame_clock, word_times
from paraformer_asr.errors import ConfigError
from paraformer_asr.inference import LoadedModel, evaluation_loader, evaluation_manifest
from paraformer_asr.metrics import hotword_scores, score_transcripts, word_boundary_errors
from paraformer_asr.training.calibration import same_set


def evaluate(model: nn.Module, loader: DataLoader, tokenizer: Tokenizer, device: torch.device,
             method: str = "greedy", beam_size: int = 4, lm=None, lm_weight: float = 0.0,
             clock: FrameClock | None = None, length_candidates: int = 0, count_prior: float = 0.0,
             ctc_score_weight: float = 0.0, hotwords=None, lexicon=None, length_penalty: float = 1.0,
             phrases=None) -> tuple[dict, list[Transcript], list[str]]:
    """-> (scores: cer, wer, token_accuracy, sequence_accuracy, length_accuracy, num_utterances, rtf;
    transcripts; hypothesis texts). rtf = decoding seconds / seconds of input. With a ``clock`` the
    transcripts carry token times, and when the references have timed words the scores add
    ``word_boundary_mae_ms`` (mean |start| and |end| error over the correctly recognised words) and
    ``word_boundary_words`` (how many words it is measured on). The search options are :func:`transcribe_batches`'
    (``hotwords``: a HotwordTrie; ``lexicon``: a LexiconAutomaton; ``phrases``: PhraseCandidates)."""
    transcripts, seconds = transcribe_batches(model, loader, device, method, beam_size, lm, lm_weight, clock,
                                              length_candidates, count_prior, ctc_score_weight, hotwords, lexicon,
                                              length_penalty, phrases)
    hyp_texts = [tokenizer.decode(t.hyp_tokens) for t in transcripts]
    scores = score_transcripts([t.ref_tokens for t in transcripts], [t.hyp_tokens for t in transcripts],
                               [t.ref_text for t in transcripts], hyp_texts).to_dict()
    audio_seconds = sum(t.duration_s for t in transcripts)
    scores["rtf"] = seconds / audio_seconds if audio_seconds > 0 else 0.0
    scores.update(word_boundary_scores([(t.ref_words, hypothesis_words(tokenizer, t)) for t in transcripts
                                        if t.token_times is not None and t.ref_words is not None]))
    return scores, transcripts, hyp_texts


def word_boundary_scores(timed: list[tuple[list[dict], list[dict]]]) -> dict:
    """(reference words, hypothesis words) of each utterance with timed words on both sides -> {} when there is
    none, else ``word_boundary_mae_ms`` (mean |start| and |end| error in ms over the correctly recognised words,
    None when no word is) and ``word_boundary_words`` (how many words it is measured on)."""
    if not timed:
        return {}
    errors = [error for ref_words, hyp_words in timed for error in word_boundary_errors(ref_words, hyp_words)]
    return {"word_boundary_mae_ms": sum(errors) / len(errors) if errors else None,
            "word_boundary_words": len(errors) // 2}


def oracle_length_hypotheses(model: nn.Module, loader: DataLoader, device: torch.device,
                             transcripts: list[Transcript], beam_size: int = 1, lm=None,
                             lm_weight: float = 0.0, hotwords=None) -> list[list[int]]:
    """Each transcript's hypothesis had its token count been right: kept when its count already is, otherwise
    decoded again given the true count (``model.oracle_length_decode``, the Paraformer's) by the search that made
    ``transcripts`` (greedy, or beam ``beam_size`` fused with ``lm`` and biased toward ``hotwords``; the CTC score,
    which ranks counts, is left out). ``transcripts`` come from decoding ``loader`` (same order)."""
    oracle: list[list[int]] = []
    with torch.no_grad():
        for batch in loader:
            batch = batch.to(device)
            tokens, lengths = model.oracle_length_decode(batch.features, batch.feat_mask, batch.tokens,
                                                         batch.token_lengths, beam_size, lm, lm_weight, hotwords)
            oracle.extend(row[:n] for row, n in zip(tokens.cpu().tolist(), lengths.cpu().tolist()))
    return [t.hyp_tokens if len(t.hyp_tokens) == len(t.ref_tokens) else fixed for t, fixed in zip(transcripts, oracle)]


def count_diagnostics(model: nn.Module, loader: DataLoader, tokenizer: Tokenizer, device: torch.device,
                      transcripts: list[Transcript], group_values: list[str] | None = None, beam_size: int = 1,
                      lm=None, lm_weight: float = 0.0, hotwords=None) -> dict:
    """What separates counting from recognising: ``oracle_length_cer`` (the CER had every token count been right,
    :func:`oracle_length_hypotheses` with the search ``beam_size``, ``lm``, ``lm_weight``, ``hotwords`` that made
    ``transcripts``; models with ``oracle_length_decode`` only) and, with ``group_values`` (one per transcript),
    ``groups``: the scores of every group of utterances (plus its oracle_length_cer)."""
    refs = [t.ref_tokens for t in transcripts]
    ref_texts = [t.ref_text for t in transcripts]
    hyps = [t.hyp_tokens for t in transcripts]
    oracle = oracle_length_hypotheses(model, loader, device, transcripts, beam_size, lm, lm_weight, hotwords) \
        if hasattr(model, "oracle_length_decode") else None

    def scores_of(rows: list[int]) -> dict:
        scores = score_transcripts([refs[i] for i in rows], [hyps[i] for i in rows], [ref_texts[i] for i in rows],
                                   [tokenizer.decode(hyps[i]) for i in rows]).to_dict()
        if oracle is not None:
            scores["oracle_length_cer"] = score_transcripts(
                [refs[i] for i in rows], [oracle[i] for i in rows], [ref_texts[i] for i in rows],
                [tokenizer.decode(oracle[i]) for i in rows]).cer
        return scores

    everything = scores_of(list(range(len(transcripts))))
    result = {"oracle_length_cer": everything["oracle_length_cer"]} if oracle is not None else {}
    if group_values is not None:
        rows_of: dict[str, list[int]] = {}
        for row, value in enumerate(group_values):
            rows_of.setdefault(value, []).append(row)
        result["groups"] = {value: scores_of(rows) for value, rows in sorted(rows_of.items())}
    return result


def manifest_field(path: str, key: str) -> dict[str, str]:
    """utterance id -> the value of field ``key`` of its line in the JSON Lines manifest ``path`` (as text).
    ConfigError naming the line when one has no such field."""
    values = {}
    for entry, record in read_manifest_records(path):
        if key not in record:
            raise ConfigError(f"--group-by {key}: {entry.where} has no field '{key}' (fields: {', '.join(record)})")
        values[entry.id] = str(record[key])
    return values


def manifest_hotwords(path: str, skip_bad_files: bool = False) -> dict[str, list[str]] | None:
    """utterance id -> the phrases of the ``hotwords`` field of its line in the JSON Lines manifest ``path`` (a
    rare-word test set: make_speech_corpus.py --rare-words); None when no line has the field, [] for a line without
    it. ConfigError naming the line when the field is not a list of phrases."""
    values, found = {}, False
    for entry, record in read_manifest_records(path, skip_bad_files):
        found = found or "hotwords" in record
        phrases = record.get("hotwords", [])
        if not isinstance(phrases, list) or not all(isinstance(p, str) and p.split() for p in phrases):
            raise ConfigError(f"{entry.where}: the field 'hotwords' must be a list of phrases, got {phrases!r}")
        values[entry.id] = phrases
    return values if found else None


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
                       length_candidates: int = 0, count_prior: float = 0.0, ctc_score_weight: float = 0.0,
                       hotwords=None, lexicon=None, length_penalty: float = 1.0, phrases=None,
                       progress=None) -> tuple[dict, list[dict]]:
    """Score recordings decoded window by window (decode/longform/), each on its own.

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
                                       length_candidates=length_candidates, count_prior=count_prior,
                                       ctc_score_weight=ctc_score_weight, hotwords=hotwords, lexicon=lexicon,
                                       length_penalty=length_penalty, phrases=phrases, progress=report))
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
    scores.update(word_boundary_scores([(entry.words, result.words) for entry, result in zip(entries, results)
                                        if entry.words is not None and result.words is not None]))
    predictions = []
    for entry, result in zip(entries, results):
        line = {"id": entry.id, "ref": entry.text, "hyp": result.text}
        if result.words is not None:
            line["words"] = result.words
        predictions.append(line)
    return scores, predictions


def evaluate_checkpoint(loaded: LoadedModel, device: torch.device, split: str, manifest: str | None,
                        options: LongFormOptions, decoding: DecodingOptions = DecodingOptions(),
                        batch_size: int = 64, long_form: bool = False, progress=None,
                        group_by: str | None = None) -> tuple[dict, list[dict]]:
    """What scripts/eval.py reports: the scores of ``loaded`` on its ``split`` or on ``manifest``, and one
    prediction dict per utterance ({"id", "ref", "hyp"}, plus timed "words" for a Paraformer).
    Utterance-level evaluation adds :func:`count_diagnostics` (``oracle_length_cer``; ``groups`` by the manifest
    field ``group_by``). When the set is the one the CIF's scale was calibrated on, the scores gain
    ``calibration_in_sample: true`` and a warning goes to stderr.

    A manifest with a recording longer than ``options.chunk_seconds`` (or ``long_form``) is decoded recording by
    recording, window by window (:func:`evaluate_long_form`, ``progress`` as there); otherwise in batches.
    ``decoding`` says how (decode/options.py: greedy or beam, with a token n-gram LM when ``lm_order`` > 0, biased
    toward a hotword list). With a hotword list the scores add ``hotwords`` (the phrases listed) and, on a manifest
    whose lines carry ``hotwords`` (the rare words each utterance speaks), :func:`hotword_scores`' recall, precision
    and counts (the phrases scored: every utterance's hotwords and the list's)."""
    manifest_path = evaluation_manifest(loaded, split, manifest)
    if long_form and manifest_path is None:
        raise ConfigError("--long-form needs a checkpoint trained on audio")
    entries = None
    if manifest_path is not None:
        entries = read_manifest(manifest_path, skip_bad_files=loaded.cfg.data.skip_bad_files)
        if not long_form and all(recording_seconds(e) <= options.chunk_seconds for e in entries):
            entries = None  # every recording fits in one window: the batched path
    search = decoding.search_arguments(loaded)  # method, beam_size, lm, lm_weight and the rescoring options
    if group_by is not None and manifest_path is None:
        raise ConfigError(f"--group-by {group_by} needs a manifest (toy data has no fields to group by)")
    if entries is not None:
        if group_by is not None:
            raise ConfigError(f"--group-by {group_by} works on utterance-level evaluation, not on long recordings")
        check_vocabulary([e.text for e in entries], loaded.tokenizer, manifest_path)
        scores, predictions = evaluate_long_form(loaded, entries, device, options, **search, progress=progress)
        scores["long_form"] = True
    else:
        loader = evaluation_loader(loaded, split, manifest, batch_size)
        clock = frame_clock(loaded.cfg) if loaded.model.gives_timestamps else None
        with torch.no_grad():
            scores, transcripts, hyps = evaluate(loaded.model, loader, loaded.tokenizer, device, **search,
                                                 clock=clock)
        groups = None
        if group_by is not None:
            field = manifest_field(manifest_path, group_by)
            groups = [field[t.id] for t in transcripts]
        beam_size = search["beam_size"] if search["method"] == "beam" else 1
        scores.update(count_diagnostics(loaded.model, loader, loaded.tokenizer, device, transcripts, groups,
                                        beam_size, search["lm"], search["lm_weight"], search["hotwords"]))
        predictions = []
        for transcript, hyp in zip(transcripts, hyps):
            line = {"id": transcript.id, "ref": transcript.ref_text, "hyp": hyp}
            if transcript.token_times is not None:
                line["words"] = hypothesis_words(loaded.tokenizer, transcript)
            predictions.append(line)
    resolved = decoding.resolve(loaded.cfg.decode)
    result = {**scores, "decode": resolved.method, "beam_size": resolved.effective_beam_size,
              "lm_order": resolved.lm_order, "lm_weight": search["lm_weight"],
              "length_candidates": resolved.length_candidates, "count_prior": resolved.count_prior,
              "ctc_score_weight": resolved.ctc_score_weight, "length_penalty": resolved.length_penalty,
              "lexicon": resolved.lexicon, "phrase_candidates": search["phrases"] is not None,
              "checkpoint": str(loaded.path),
              "dataset": manifest or f"{loaded.cfg.data.kind}:{split}"}
    if decoding.hotwords is not None:
        result["hotwords"] = len(decoding.hotwords)
    spoken = None
    if manifest_path is not None and decoding.hotwords is not None:
        spoken = manifest_hotwords(manifest_path, loaded.cfg.data.skip_bad_files)
    if spoken is not None:
        result.update(hotword_scores([line["ref"] for line in predictions], [line["hyp"] for line in predictions],
                                     [spoken[line["id"]] for line in predictions],
                                     [entry.phrase for entry in decoding.hotwords]))
    if loaded.model.calibrates_cif and same_set(manifest_path or f"toy:{split}", loaded.calibrated_on):
        result["calibration_in_sample"] = True
        print(f"warning: {result['dataset']} is the set the CIF scale (alpha_scale) was calibrated on: these "
              f"figures are in-sample for the calibration; evaluate the test split for held-out figures",
              file=sys.stderr)
    return result, predictions
