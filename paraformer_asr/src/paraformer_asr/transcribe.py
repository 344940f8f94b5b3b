"""Transcribing input files and toy items with a loaded checkpoint (what scripts/infer.py prints)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import torch

from paraformer_asr.data.audio import audio_info, load_audio
from paraformer_asr.data.batching import Collator
from paraformer_asr.data.setup import make_frontend
from paraformer_asr.data.toy import ToySeq2SeqDataset
from paraformer_asr.decode import longform
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.decode.search import require_timestamps, transcribe_batches
from paraformer_asr.decode.streaming import StreamingFeatures, StreamingRecognizer
from paraformer_asr.decode.timestamps import frame_clock, token_entries, word_times
from paraformer_asr.errors import ConfigError, DataError
from paraformer_asr.inference import LoadedModel, features_from_file


def is_long_audio(path: Path, loaded: LoadedModel, chunk_seconds: float) -> bool:
    """An audio input (not a feature file) of an audio checkpoint whose header says it is longer than
    ``chunk_seconds``."""
    if path.suffix.lower() in (".npy", ".pt") or loaded.cfg.data.kind != "manifest" or not path.is_file():
        return False
    return audio_info(path).duration_s > chunk_seconds


def transcribe_inputs(loaded: LoadedModel, device: torch.device, inputs: list[str], options: longform.LongFormOptions,
                      toy_split: str | None = None, toy_count: int = 5,
                      decoding: DecodingOptions = DecodingOptions(), batch_size: int = 16, timed: bool = False,
                      window_progress: Callable[[str], Callable[[int, int], None] | None] | None = None) -> list[dict]:
    """One result per input file, then per toy item (the first ``toy_count`` of ``toy_split``), in order:
    {"audio", "text"} and, when ``timed`` (Paraformer only: ConfigError otherwise), "tokens" and "words" with
    their times, decoded as ``decoding`` says (decode/options.py). Audio longer than ``options.chunk_seconds`` is decoded window by window (decode/longform/),
    ``window_progress(name)`` giving its progress callback; the rest in batches of ``batch_size``."""
    if timed:
        require_timestamps(loaded.model)
    search = decoding.search_arguments(loaded)  # method, beam_size, lm, lm_weight and the rescoring options
    results: dict[int, dict] = {}  # input index -> result
    items, item_indices = [], []
    for index, name in enumerate(inputs):
        path = Path(name)
        if is_long_audio(path, loaded, options.chunk_seconds):
            long = longform.transcribe_long(loaded, path, device, options, **search,
                                            progress=window_progress(name) if window_progress else None)
            results[index] = {"audio": name, "text": long.text, "tokens": long.tokens, "words": long.words}
            continue
        features, duration = features_from_file(path, loaded)
        items.append({"id": name, "features": features, "tokens": torch.zeros(0, dtype=torch.long), "text": "",
                      "duration_s": duration})
        item_indices.append(index)
    if toy_split:
        if loaded.cfg.data.kind != "toy":
            raise ConfigError("--toy-split needs a checkpoint trained on toy data")
        toy = ToySeq2SeqDataset.from_config(loaded.cfg.data.toy, toy_split, loaded.tokenizer)
        toy_items = [toy[i] for i in range(min(toy_count, len(toy)))]
        item_indices += range(len(inputs), len(inputs) + len(toy_items))
        items += toy_items
    collate = Collator(loaded.tokenizer.pad_id)
    batches = (collate(items[i:i + batch_size]) for i in range(0, len(items), batch_size))
    clock = frame_clock(loaded.cfg) if timed else None
    transcripts, _ = transcribe_batches(loaded.model, batches, device, **search, clock=clock)
    for index, transcript in zip(item_indices, transcripts):
        result = {"audio": transcript.id, "text": loaded.tokenizer.decode(transcript.hyp_tokens)}
        if timed:
            pieces = loaded.tokenizer.pieces(transcript.hyp_tokens)
            result.update(tokens=token_entries(pieces, transcript.token_times),
                          words=word_times(pieces, transcript.token_times))
        results[index] = result
    return [results[index] for index in sorted(results)]


FULL_CONTEXT_PIECE_MS = 600.0  # the pieces a stream is fed at full context (one chunk: the whole utterance)


class StreamUpdate(NamedTuple):
    """One line of a streamed transcription: ``ms`` of input fed so far, the transcript ``text``, ``final`` or not."""

    ms: float
    text: str
    final: bool


def stream_file(loaded: LoadedModel, name: str, chunk_ms: float | None = None,
                two_pass: bool | None = None) -> Iterator[StreamUpdate]:
    """One input file transcribed as a stream (decode/streaming.py), fed in pieces of ``chunk_ms`` as a live source
    would feed it; the encoder's chunks are as long (rounded to whole encoder frames, at least one). ``chunk_ms``
    None: the checkpoint's ``model.streaming.decode_chunk_size`` (pieces of :data:`FULL_CONTEXT_PIECE_MS` where that
    is 0, full context). Audio is read whole (its format and sample rate converted), then cut into pieces that go
    through the streaming front end; a feature file (.npy / .pt) is cut into pieces of frames. Yields the partial
    transcript each time it changes, then the final one (``two_pass`` None: the checkpoint's
    ``model.streaming.two_pass``)."""
    if chunk_ms is not None and chunk_ms <= 0:
        raise ConfigError(f"--chunk-ms must be > 0, got {chunk_ms:g}")
    path = Path(name)
    clock = frame_clock(loaded.cfg)
    chunk_frames = None if chunk_ms is None else max(1, round(chunk_ms / clock.encoder_frame_ms))
    recognizer = StreamingRecognizer(loaded.model, chunk_frames, two_pass)
    piece_ms = chunk_ms or recognizer.chunk_size * clock.encoder_frame_ms or FULL_CONTEXT_PIECE_MS
    if path.suffix.lower() in (".npy", ".pt"):
        features, _ = features_from_file(path, loaded)  # [T, F]
        frames_per_piece = max(1, round(piece_ms / clock.hop_ms))
        pieces = [(piece, piece.shape[0] * clock.hop_ms) for piece in features.split(frames_per_piece)]
        front_end = None
    else:
        if not path.is_file():
            raise DataError(f"input file not found: {path}")
        if loaded.cfg.data.kind != "manifest":
            raise DataError(f"{path}: this checkpoint was trained on toy features, not audio; give feature files "
                            "(.npy or .pt)")
        rate = loaded.cfg.data.sample_rate
        waveform = load_audio(path, rate)  # [N]
        samples_per_piece = max(1, round(piece_ms * rate / 1000.0))
        pieces = [(piece, piece.numel() * 1000.0 / rate) for piece in waveform.split(samples_per_piece)]
        front_end = StreamingFeatures(make_frontend(loaded.cfg), loaded.normalizer)
    fed_ms, shown = 0.0, ""
    for piece, piece_ms in pieces:
        fed_ms += piece_ms
        partial = loaded.tokenizer.decode(recognizer.accept(front_end.accept(piece) if front_end else piece))
        if partial != shown:
            shown = partial
            yield StreamUpdate(fed_ms, partial, final=False)
    if front_end is not None:
        recognizer.accept(front_end.finish())
    yield StreamUpdate(fed_ms, loaded.tokenizer.decode(recognizer.finish()), final=True)
