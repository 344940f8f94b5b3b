"""Transcribing input files and toy items with a loaded checkpoint (what scripts/infer.py prints)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from paraformer_asr.data.audio import audio_info
from paraformer_asr.data.batching import Collator
from paraformer_asr.data.toy import ToySeq2SeqDataset
from paraformer_asr.decode import longform
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.decode.search import require_timestamps, transcribe_batches
from paraformer_asr.decode.timestamps import frame_clock, token_entries, word_times
from paraformer_asr.errors import ConfigError
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
    their times, decoded as ``decoding`` says (decode/options.py). Audio longer than ``options.chunk_seconds`` is decoded window by window (decode/longform.py),
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
