"""JSON Lines speech manifests and the dataset built on them.

One utterance per line::

    {"audio": "path.flac", "text": "transcript", "id": "optional",
     "start_s": 1.5, "end_s": 4.25,                                          (optional: a segment of the file)
     "words": [{"word": "hello", "start_ms": 120, "end_ms": 480}, ...]}      (optional: reference word times,
                                                                              one per word of text, in order)

A relative ``audio`` path is resolved against the folder holding the manifest; the file may be in any format
data/audio.py reads (WAV, FLAC, OGG, ...). ``start_s`` / ``end_s`` (seconds, ``end_s`` > ``start_s`` >= 0; either may
be left out: from the start / to the end) make the utterance that part of the file, read by frames without decoding
the rest. ``words`` times are milliseconds from the start of the utterance (of the segment, when there is one).
Blank lines are ignored. A bad line (invalid JSON, missing or empty ``text``, missing ``audio`` field or file, a
malformed ``start_s``/``end_s`` or ``words`` entry) raises :class:`DataError` naming the manifest and line, or with
``skip_bad_files`` is skipped, counted and reported in a warning on the ``paraformer_asr`` logger.

Dataset item (contract):
    {"id": str, "features": float32 [T, n_mels], "tokens": int64 [S], "text": str, "duration_s": float,
     "words": list of {"word", "start_ms", "end_ms"} (only when the manifest line has them)}
``tokens`` is ``tokenizer.encode(text)`` (no bos/eos added here).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from paraformer_asr.data.audio import audio_info, load_audio, noise_floor, segment_frames
from paraformer_asr.data.augment import RecordingAugment
from paraformer_asr.data.frontend import FeatureNormalizer, LogMelFrontend, SpecAugment, VoicePerturb
from paraformer_asr.data.resample import speed_perturb
from paraformer_asr.data.tokenizer import Tokenizer
from paraformer_asr.errors import DataError

logger = logging.getLogger("paraformer_asr")

_SPEED_STREAM = 1  # keeps the speed draws apart from SpecAugment's in the per-item seed
_VOICE_STREAM = 2  # and the voice perturbation's, so enabling one leaves the others' draws as they were
_EDGE_STREAM = 3  # and the edge pads'
_RECORDING_STREAM = 4  # and the recording augmentation's (one generator per stage: data/augment.py)


@dataclass(frozen=True)
class ManifestEntry:
    """One valid manifest line. ``audio_path`` is absolute or relative to the current directory, ready to open.
    ``start_s`` / ``end_s`` bound a segment of the file (None: its start / its end); ``words`` are the reference
    word times of the line, if it has them."""

    id: str
    audio_path: Path
    text: str
    line_no: int
    manifest: Path | None = None
    start_s: float | None = None
    end_s: float | None = None
    words: list[dict] | None = None

    @property
    def where(self) -> str:
        """``manifest:line`` for error messages."""
        return f"{self.manifest}:{self.line_no}" if self.manifest is not None else f"line {self.line_no}"


def read_manifest(path: str | Path, skip_bad_files: bool = False) -> list[ManifestEntry]:
    """Parse a JSON Lines manifest. Raises DataError on the first bad line, or skips bad lines if asked.

    An unreadable manifest, or one left with no valid entry, is always an error.
    """
    return [entry for entry, _ in read_manifest_records(path, skip_bad_files)]


def read_manifest_records(path: str | Path, skip_bad_files: bool = False) -> list[tuple[ManifestEntry, dict]]:
    """:func:`read_manifest` with each entry's line as parsed JSON beside it (its extra fields: source, speaker, ...),
    from one read of the file."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataError(f"manifest not found: {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read manifest {path}: {err}") from None
    parsed: list[tuple[ManifestEntry, dict]] = []
    problems: list[str] = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed.append(_parse_line(path, line_no, line))
        except DataError as err:
            if not skip_bad_files:
                raise
            problems.append(str(err))
    if problems:
        logger.warning(
            "skipped %d bad line(s) of %d in manifest %s; first: %s", len(problems), len(problems) + len(parsed),
            path, problems[0],
        )
    if not parsed:
        reason = f" (all {len(problems)} lines were bad)" if problems else ""
        raise DataError(f"manifest {path} has no usable entries{reason}")
    return parsed


def _parse_line(manifest: Path, line_no: int, line: str) -> tuple[ManifestEntry, dict]:
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
    start_s, end_s = _parse_segment(record, where)
    entry = ManifestEntry(id=str(utt_id), audio_path=audio_path, text=text.strip(), line_no=line_no,
                          manifest=manifest, start_s=start_s, end_s=end_s,
                          words=_parse_words(record, where, text.strip()))
    return entry, record


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _parse_segment(record: dict, where: str) -> tuple[float | None, float | None]:
    start_s, end_s = record.get("start_s"), record.get("end_s")
    for key, value in (("start_s", start_s), ("end_s", end_s)):
        if value is not None and not (_number(value) and value >= 0):
            raise DataError(f"{where}: '{key}' must be a number of seconds >= 0, got {value!r}")
    if start_s is not None and end_s is not None and end_s <= start_s:
        raise DataError(f"{where}: 'end_s' ({end_s}) must be greater than 'start_s' ({start_s})")
    return (None if start_s is None else float(start_s)), (None if end_s is None else float(end_s))


def _parse_words(record: dict, where: str, text: str) -> list[dict] | None:
    """Check a line's ``words`` field: one {"word", "start_ms", "end_ms"} per word of ``text``, times >= 0,
    start <= end, in order; None when the line has no ``words``."""
    words = record.get("words")
    if words is None:
        return None
    if not isinstance(words, list):
        raise DataError(f"{where}: 'words' must be a list of {{\"word\", \"start_ms\", \"end_ms\"}} objects")
    parsed = []
    for index, entry in enumerate(words):
        well_formed = (isinstance(entry, dict) and isinstance(entry.get("word"), str) and entry["word"].strip()
                       and all(_number(entry.get(key)) for key in ("start_ms", "end_ms")))
        if not well_formed:
            raise DataError(f"{where}: words[{index}] must be {{\"word\": non-empty str, \"start_ms\": number, "
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
    """Speech utterances from manifest entries, featurised on the fly in ``__getitem__``.

    Construction reads every file's header only (sample rate and length, for the frame counts of length-bucketed
    batching); unreadable headers stop with a DataError naming ``manifest:line`` or, with ``skip_bad_files``, are
    skipped and counted. An item decodes its audio (or its segment), resamples it to the front end's rate,
    applies speed perturbation when ``speed_factors`` are given (one factor drawn per item and epoch), pads its edges
    when ``edge_pad_ms`` > 0 (:meth:`edge_pads_of_epoch`), makes it sound recorded (``recording_augment``: rooms,
    noise, microphones, loudness, telephones; data/augment.py), computes the log-mel features, perturbs the voice
    (``voice_perturb``), then normalises them and applies SpecAugment. All randomness is a pure function of (seed,
    index, epoch); call :meth:`set_epoch` each epoch (with DataLoader workers, before the loader is iterated, without
    ``persistent_workers``).
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
        speed_factors: Sequence[float] = (),
        voice_perturb: VoicePerturb | None = None,
        edge_pad_ms: float = 0.0,
        recording_augment: RecordingAugment | None = None,
    ) -> None:
        self.frontend = frontend
        self.recording_augment = recording_augment
        self.normalizer = normalizer
        self.spec_augment = spec_augment
        self.voice_perturb = voice_perturb
        self.speed_factors = [float(f) for f in speed_factors]
        self.max_edge_pad = round(edge_pad_ms * frontend.sample_rate / 1000)  # samples
        self.seed = int(seed)
        self.entries: list[ManifestEntry] = []
        self._num_samples: list[int] = []  # samples at frontend.sample_rate, unperturbed
        self._tokens: list[torch.Tensor] = []  # [S_i]
        problems: list[str] = []
        for entry in entries:
            try:
                num_samples = self._probe(entry)
            except DataError as err:
                message = f"{entry.where}: {err}"
                if not skip_bad_files:
                    raise DataError(message) from None
                problems.append(message)
                continue
            self.entries.append(entry)
            self._num_samples.append(num_samples)
            self._tokens.append(torch.tensor(tokenizer.encode(entry.text), dtype=torch.long))
        self.num_skipped = len(problems)
        if problems:
            logger.warning(
                "skipped %d unreadable audio file(s) of %d; first: %s", len(problems), len(entries), problems[0]
            )
        if not self.entries:
            raise DataError("no usable utterances: every audio file was unreadable" if problems else "no utterances")
        self.set_epoch(0)

    def _probe(self, entry: ManifestEntry) -> int:
        """Samples the utterance will have at the front end's rate, from the file's header (nothing decoded)."""
        info = audio_info(entry.audio_path)
        start, count = segment_frames(info.sample_rate, info.num_frames, entry.start_s, entry.end_s,
                                      str(entry.audio_path))
        if count < 0:
            count = info.num_frames - start
        if count == 0:
            raise DataError(f"{entry.audio_path}: file contains no audio samples")
        return -(-count * self.frontend.sample_rate // info.sample_rate)  # the resampler's ceil(N * new / old)

    def __len__(self) -> int:
        return len(self.entries)

    def set_epoch(self, epoch: int) -> None:
        """Select the speed-perturbation, edge-pad and SpecAugment draws of this epoch."""
        self.epoch = int(epoch)
        self._epoch_factors = self.speed_factors_of_epoch(self.epoch)
        self._epoch_pads = self.edge_pads_of_epoch(self.epoch)

    @property
    def lengths_vary(self) -> bool:
        """Whether the items' lengths change from epoch to epoch (speed perturbation or edge pads)."""
        return bool(self.speed_factors) or self.max_edge_pad > 0

    def speed_factors_of_epoch(self, epoch: int) -> np.ndarray:
        """The speed factor of every item in ``epoch``: float64 [len(self)], all 1.0 without speed perturbation.
        One vectorised draw per epoch from a generator seeded by (seed, epoch): a pure function of
        (seed, index, epoch)."""
        if not self.speed_factors:
            return np.ones(len(self.entries))
        generator = np.random.default_rng(np.random.SeedSequence([self.seed, epoch, _SPEED_STREAM]))
        return np.asarray(self.speed_factors)[generator.integers(len(self.speed_factors), size=len(self.entries))]

    def edge_pads_of_epoch(self, epoch: int) -> np.ndarray:
        """The quiet added before and after every item in ``epoch``, in samples: int64 [len(self), 2] (lead, trail),
        each uniform in 0 .. ``edge_pad_ms``; zeros without edge pads. One vectorised draw per epoch, as for the speed
        factors. Speech rarely starts where a training corpus's utterances do: real recordings and other synthesizers
        lead with a quarter of a second of quiet or more (docs/history.md, "Quiet at the edges")."""
        if self.max_edge_pad == 0:
            return np.zeros((len(self.entries), 2), dtype=np.int64)
        generator = np.random.default_rng(np.random.SeedSequence([self.seed, epoch, _EDGE_STREAM]))
        return generator.integers(0, self.max_edge_pad + 1, size=(len(self.entries), 2))

    def speed_factor(self, index: int) -> float:
        """The speed factor of item ``index`` in the current epoch (1.0 without speed perturbation)."""
        return float(self._epoch_factors[index])

    def frame_counts(self, epoch: int | None = None) -> list[int]:
        """Feature length T of every item, from the headers: unperturbed, or after the speed perturbation and edge
        pads of ``epoch`` (what length-bucketed batching should see that epoch)."""
        num_samples = np.asarray(self._num_samples, dtype=np.int64)  # [len(self)]
        if epoch is not None and self.speed_factors:
            rate = self.frontend.sample_rate
            played_at = np.round(rate * self.speed_factors_of_epoch(epoch)).astype(np.int64)  # as speed_perturb
            num_samples = -(-num_samples * rate // played_at)  # the resampler's ceil(N * new / old)
        if epoch is not None:
            num_samples = num_samples + self.edge_pads_of_epoch(epoch).sum(axis=1)
        return [self.frontend.num_frames(int(n)) for n in num_samples]

    def feature_iterator(self) -> Iterator[torch.Tensor]:
        """Log-mel features [T, n_mels] of every item, unperturbed and before normalisation, for
        :meth:`FeatureNormalizer.fit` (decodes every file once)."""
        for index in range(len(self.entries)):
            yield self.frontend(self._waveform(index))

    def played_waveform(self, index: int) -> tuple[torch.Tensor, float, int]:
        """Item ``index``'s waveform as this epoch plays it: resampled to the front end's rate, speed-perturbed,
        edge-padded and made to sound recorded -> (waveform [N'], its speed factor, the quiet before it in samples)."""
        waveform = self._waveform(index)  # [N]
        factor = self.speed_factor(index)
        if factor != 1.0:
            waveform = speed_perturb(waveform, self.frontend.sample_rate, factor)  # [~N / factor]
        lead, trail = (int(n) for n in self._epoch_pads[index])
        if lead or trail:
            waveform = self._pad_edges(waveform, lead, trail, index)  # [lead + N + trail]
        if self.recording_augment is not None and self.recording_augment.enabled:
            waveform = self.recording_augment(  # same length
                waveform, lambda stage: self._generator(index, _RECORDING_STREAM, stage),
                lambda count, generator: self._other_voices(index, count, generator))
        return waveform, factor, lead

    def __getitem__(self, index: int) -> dict[str, Any]:
        entry = self.entries[index]
        waveform, factor, lead = self.played_waveform(index)  # [N']
        features = self.frontend(waveform)  # [T, n_mels]
        if self.voice_perturb is not None and self.voice_perturb.enabled:
            features = self.voice_perturb(features, self._generator(index, _VOICE_STREAM))
        if self.normalizer is not None:
            features = self.normalizer(features)
        if self.spec_augment is not None and self.spec_augment.enabled:
            features = self.spec_augment(features, self._generator(index))
        item = {
            "id": entry.id,
            "features": features,
            "tokens": self._tokens[index],
            "text": entry.text,
            "duration_s": waveform.numel() / self.frontend.sample_rate,
        }
        if entry.words is not None:
            shift_ms = 1000.0 * lead / self.frontend.sample_rate
            item["words"] = [{"word": w["word"], "start_ms": w["start_ms"] / factor + shift_ms,
                              "end_ms": w["end_ms"] / factor + shift_ms} for w in entry.words]
        return item

    def _pad_edges(self, waveform: torch.Tensor, lead: int, trail: int, index: int) -> torch.Tensor:
        """waveform [N] -> [lead + N + trail]: white noise on either side at the utterance's own noise floor
        (data/audio.py, ``noise_floor``) times a gain drawn uniformly in [0, 1), from digital silence to a pause as
        loud as the recording's own."""
        generator = self._generator(index, _EDGE_STREAM)
        level = noise_floor(waveform.numpy(), self.frontend.sample_rate) * float(torch.rand((), generator=generator))
        quiet = torch.randn(lead + trail, generator=generator) * level  # [lead + trail]
        return torch.cat([quiet[:lead], waveform, quiet[lead:]])

    def _other_voices(self, index: int, count: int, generator: torch.Generator) -> list[torch.Tensor]:
        """The waveforms [N_j] of ``count`` other items drawn uniformly with ``generator`` (babble noise); of the
        item itself when it is the only one."""
        offsets = torch.randint(1, max(len(self.entries), 2), (count,), generator=generator)  # [count] in 1..len-1
        return [self._waveform((index + int(offset)) % len(self.entries)) for offset in offsets]

    def _waveform(self, index: int) -> torch.Tensor:
        entry = self.entries[index]
        try:
            return load_audio(entry.audio_path, self.frontend.sample_rate, entry.start_s, entry.end_s)
        except DataError as err:
            raise DataError(f"{entry.where}: {err}") from None

    def _generator(self, index: int, *stream: int) -> torch.Generator:
        """Item ``index``'s generator this epoch (SpecAugment's; another ``stream`` for other draws)."""
        state = np.random.SeedSequence([self.seed, index, self.epoch, *stream]).generate_state(1, dtype=np.uint64)[0]
        return torch.Generator().manual_seed(int(state))
