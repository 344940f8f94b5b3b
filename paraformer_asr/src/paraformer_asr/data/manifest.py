"""JSON Lines speech manifests and the dataset built on them.

One utterance per line: ``{"audio": "path.wav", "text": "transcript", "id": "optional", "words": optional}``, where
``words`` (e.g. written by ``make_speech_corpus.py --word-times``) times the transcript's words:
``[{"word": "four", "start_ms": 120, "end_ms": 410}, ...]``, one entry per whitespace-separated word of ``text``. A relative ``audio`` path
is resolved against the folder holding the manifest. Blank lines are ignored. A bad line (invalid JSON, missing or
empty ``text``, missing ``audio`` field or file) raises :class:`DataError` naming the manifest and line, or with
``skip_bad_files`` is skipped, counted and reported in a warning on the ``paraformer_asr`` logger.

Dataset item (contract):
    {"id": str, "features": float32 [T, n_mels], "tokens": int64 [S], "text": str, "duration_s": float}
plus ``"words"`` (the list above) when the line has it. ``tokens`` is ``tokenizer.encode(text)`` (no bos/eos).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import Dataset

from paraformer_asr.data.frontend import FeatureNormalizer, LogMelFrontend, SpecAugment
from paraformer_asr.data.wav import load_audio
from paraformer_asr.errors import DataError

logger = logging.getLogger("paraformer_asr")


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class ManifestEntry:
    """One valid manifest line. ``audio_path`` is absolute or relative to the current directory, ready to open."""

    id: str
    audio_path: Path
    text: str
    line_no: int
    manifest: Path | None = None
    words: list[dict] | None = None

    @property
    def where(self) -> str:
        """``manifest:line`` for error messages."""
        return f"{self.manifest}:{self.line_no}" if self.manifest is not None else f"line {self.line_no}"


def read_manifest(path: str | Path, skip_bad_files: bool = False) -> list[ManifestEntry]:
    """Parse a JSON Lines manifest. Raises DataError on the first bad line, or skips bad lines if asked.

    An unreadable manifest, or one left with no valid entry, is always an error.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataError(f"manifest not found: {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read manifest {path}: {err}") from None
    entries: list[ManifestEntry] = []
    problems: list[str] = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entries.append(_parse_line(path, line_no, line))
        except DataError as err:
            if not skip_bad_files:
                raise
            problems.append(str(err))
    if problems:
        logger.warning(
            "skipped %d bad line(s) of %d in manifest %s; first: %s", len(problems), len(problems) + len(entries),
            path, problems[0],
        )
    if not entries:
        reason = f" (all {len(problems)} lines were bad)" if problems else ""
        raise DataError(f"manifest {path} has no usable entries{reason}")
    return entries


def _parse_line(manifest: Path, line_no: int, line: str) -> ManifestEntry:
    where = f"{manifest}:{line_no}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataError(f"{where}: invalid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    audio = record.get("audio")
    if not isinstance(audio, str) or not audio.strip():
        raise DataError(f"{where}: missing or empty 'audio' field")
    text = record.get("text")
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"{where}: missing or empty 'text' field")
    audio_path = Path(audio)
    if not audio_path.is_absolute():
        audio_path = manifest.parent / audio_path
    if not audio_path.is_file():
        raise DataError(f"{where}: audio file not found: {audio_path}")
    utt_id = record.get("id")
    if utt_id is None:
        utt_id = audio_path.stem
    elif not isinstance(utt_id, (str, int)):
        raise DataError(f"{where}: 'id' must be a string, got {type(utt_id).__name__}")
    words = _parse_words(where, record.get("words"), text.strip()) if "words" in record else None
    return ManifestEntry(id=str(utt_id), audio_path=audio_path, text=text.strip(), line_no=line_no, manifest=manifest,
                         words=words)


def _parse_words(where: str, words: Any, text: str) -> list[dict]:
    """Check a line's ``words`` field: one {"word", "start_ms", "end_ms"} per word of ``text``, times >= 0,
    start <= end, in order."""
    if not isinstance(words, list):
        raise DataError(f"{where}: 'words' must be a list of {{\"word\", \"start_ms\", \"end_ms\"}} objects")
    parsed = []
    for index, entry in enumerate(words):
        if not isinstance(entry, dict) or not isinstance(entry.get("word"), str) or not all(
                isinstance(entry.get(key), (int, float)) and not isinstance(entry.get(key), bool)
                for key in ("start_ms", "end_ms")):
            raise DataError(f"{where}: words[{index}] must be {{\"word\": str, \"start_ms\": number, "
                            f"\"end_ms\": number}}, got {entry!r}")
        start, end = float(entry["start_ms"]), float(entry["end_ms"])
        previous_end = parsed[-1]["end_ms"] if parsed else 0.0
        if not 0.0 <= start <= end or start < previous_end:
            raise DataError(f"{where}: words[{index}] ({entry['word']!r}) has times {start}-{end} ms: they must be "
                            f">= 0, start <= end, and not before the previous word's end ({previous_end} ms)")
        parsed.append({"word": entry["word"], "start_ms": start, "end_ms": end})
    if [entry["word"] for entry in parsed] != text.split():
        raise DataError(f"{where}: 'words' must list the transcript's words in order: {text.split()} vs "
                        f"{[entry['word'] for entry in parsed]}")
    return parsed


class ManifestDataset(Dataset):
    """Speech utterances from manifest entries, with log-mel features computed once and kept in memory.

    Normalisation and SpecAugment are applied per item on a copy of the cached (un-normalised) log-mel features.
    SpecAugment's randomness is a pure function of (seed, index, epoch); call :meth:`set_epoch` each epoch
    (with DataLoader workers, before the loader is iterated, without ``persistent_workers``).
    """

    def __init__(
        self,
        entries: Sequence[ManifestEntry],
        tokenizer: Tokenizer,
        frontend: LogMelFrontend,
        normalizer: FeatureNormalizer | None = None,
        spec_augment: SpecAugment | None = None,
        skip_bad_files: bool = False,
        seed: int = 0,
    ) -> None:
        self.tokenizer = tokenizer
        self.frontend = frontend
        self.normalizer = normalizer
        self.spec_augment = spec_augment
        self.seed = int(seed)
        self.epoch = 0
        self.entries: list[ManifestEntry] = []
        self._features: list[torch.Tensor] = []  # log-mel [T_i, n_mels], before normalisation
        self._tokens: list[torch.Tensor] = []  # [S_i]
        self._durations: list[float] = []
        problems: list[str] = []
        for entry in entries:
            try:
                waveform = load_audio(entry.audio_path, frontend.sample_rate)  # [N]
            except DataError as err:
                message = f"{entry.where}: {err}"
                if not skip_bad_files:
                    raise DataError(message) from None
                problems.append(message)
                continue
            self.entries.append(entry)
            self._features.append(frontend(waveform))
            self._tokens.append(torch.tensor(tokenizer.encode(entry.text), dtype=torch.long))
            self._durations.append(waveform.numel() / frontend.sample_rate)
        self.num_skipped = len(problems)
        if problems:
            logger.warning(
                "skipped %d unreadable audio file(s) of %d; first: %s", len(problems), len(entries), problems[0]
            )
        if not self.entries:
            raise DataError("no usable utterances: every audio file was unreadable" if problems else "no utterances")

    def __len__(self) -> int:
        return len(self.entries)

    def set_epoch(self, epoch: int) -> None:
        """Select the SpecAugment draws of this epoch."""
        self.epoch = int(epoch)

    def frame_counts(self) -> list[int]:
        """Feature length T of every item (for length-bucketed batching)."""
        return [features.shape[0] for features in self._features]

    def feature_iterator(self) -> Iterator[torch.Tensor]:
        """The cached log-mel features [T, n_mels] before normalisation, for :meth:`FeatureNormalizer.fit`."""
        return iter(self._features)

    def __getitem__(self, index: int) -> dict[str, Any]:
        entry = self.entries[index]
        features = self._features[index]  # [T, n_mels]
        if self.normalizer is not None:
            features = self.normalizer(features)
        if self.spec_augment is not None and self.spec_augment.enabled:
            features = self.spec_augment(features, self._generator(index))
        item = {
            "id": entry.id,
            "features": features,
            "tokens": self._tokens[index],
            "text": entry.text,
            "duration_s": self._durations[index],
        }
        if entry.words is not None:
            item["words"] = entry.words
        return item

    def _generator(self, index: int) -> torch.Generator:
        state = np.random.SeedSequence([self.seed, index, self.epoch]).generate_state(1, dtype=np.uint64)[0]
        return torch.Generator().manual_seed(int(state))
