"""Standard corpus layouts -> JSON Lines manifests (data/manifest.py), for ``scripts/prepare_corpus.py``.

LibriSpeech: a subset folder holds ``SPEAKER/CHAPTER/SPEAKER-CHAPTER-NNNN.flac`` and one
``SPEAKER/CHAPTER/SPEAKER-CHAPTER.trans.txt`` per chapter (lines ``UTTERANCE-ID TRANSCRIPT``). ``src`` is one subset
(``LibriSpeech/dev-clean``) or a folder of subsets (``LibriSpeech/`` holding ``train-clean-100/``, ``dev-clean/``, ...):
each subset becomes ``OUT/<subset folder name>.jsonl``.

Kaldi: a data dir holds ``wav.scp`` (``RECORDING-ID PATH``), ``text`` (``UTTERANCE-ID TRANSCRIPT``) and optionally
``segments`` (``UTTERANCE-ID RECORDING-ID START END`` in seconds, END -1 = to the end of the recording). ``src`` is one
data dir or a folder of them (``data/`` holding ``train/``, ``dev/``, ...): each becomes ``OUT/<data dir name>.jsonl``.
Relative ``wav.scp`` paths are resolved against the current directory, as Kaldi does (run from the recipe folder).
A ``wav.scp`` entry that is a pipe command (``... |``) is refused: only audio files are read.

Manifest lines hold absolute audio paths, the transcript as written, the utterance id, and for Kaldi segments
``start_s`` / ``end_s``. Every audio file's header is read (nothing decoded): missing or unreadable files, and
transcripts whose audio is missing, stop with a DataError that counts them and names the first few, or with
``skip_bad`` are left out and counted in the summary. Never silently.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from paraformer_asr.data.audio import AudioInfo, audio_info
from paraformer_asr.errors import DataError

logger = logging.getLogger("paraformer_asr")

SHOWN_PROBLEMS = 5  # how many bad files an error message names


@dataclass
class Utterance:
    """One manifest line to be: ``audio`` absolute, ``start_s`` / ``end_s`` for a segment (None: whole file)."""

    id: str
    audio: Path
    text: str
    start_s: float | None = None
    end_s: float | None = None

    def record(self) -> dict:
        record = {"audio": str(self.audio), "text": self.text, "id": self.id}
        if self.start_s is not None:
            record["start_s"] = self.start_s
        if self.end_s is not None:
            record["end_s"] = self.end_s
        return record


@dataclass
class Collected:
    """Utterances of one subset or data dir, and the problems met while collecting them."""

    name: str
    utterances: list[Utterance] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    num_lines: int = 0  # transcript lines read


def prepare_librispeech(src: str | Path, out: str | Path, skip_bad: bool = False) -> list[dict]:
    """Write ``out/<subset>.jsonl`` for every LibriSpeech subset at ``src``; returns one summary per manifest."""
    src = _existing_folder(src)
    subsets = _datasets(src, lambda folder: any(folder.glob("*/*/*.trans.txt")),
                        "LibriSpeech transcripts (SPEAKER/CHAPTER/SPEAKER-CHAPTER.trans.txt)")
    return [_write(_collect_librispeech(subset), Path(out), skip_bad) for subset in subsets]


def prepare_kaldi(src: str | Path, out: str | Path, skip_bad: bool = False) -> list[dict]:
    """Write ``out/<data dir>.jsonl`` for every Kaldi data dir at ``src``; returns one summary per manifest."""
    src = _existing_folder(src)
    data_dirs = _datasets(src, lambda folder: (folder / "wav.scp").is_file() and (folder / "text").is_file(),
                          "Kaldi data dirs (wav.scp and text)")
    return [_write(_collect_kaldi(data_dir), Path(out), skip_bad) for data_dir in data_dirs]


def _existing_folder(src: str | Path) -> Path:
    src = Path(src)
    if not src.is_dir():
        raise DataError(f"corpus folder not found: {src}")
    return src.resolve()


def _datasets(src: Path, is_dataset: Callable[[Path], bool], what: str) -> list[Path]:
    """``src`` itself when it is a dataset, else its sub-folders that are, in name order."""
    if is_dataset(src):
        return [src]
    found = sorted(folder for folder in src.iterdir() if folder.is_dir() and is_dataset(folder))
    if not found:
        raise DataError(f"{src}: found no {what} in it or in its sub-folders")
    return found


def _collect_librispeech(subset: Path) -> Collected:
    collected = Collected(subset.name)
    for transcripts in sorted(subset.glob("*/*/*.trans.txt")):
        for line_no, line in _lines(transcripts):
            collected.num_lines += 1
            utt_id, _, text = line.partition(" ")
            if not text.strip():
                collected.problems.append(f"{transcripts}:{line_no}: no transcript after the utterance id")
                continue
            collected.utterances.append(Utterance(utt_id, transcripts.parent / f"{utt_id}.flac", text.strip()))
    return collected


def _collect_kaldi(data_dir: Path) -> Collected:
    collected = Collected(data_dir.name)
    recordings = _read_wav_scp(data_dir / "wav.scp")
    segments = _read_segments(data_dir / "segments") if (data_dir / "segments").is_file() else None
    for line_no, line in _lines(data_dir / "text"):
        collected.num_lines += 1
        utt_id, _, text = line.partition(" ")
        where = f"{data_dir / 'text'}:{line_no}"
        if not text.strip():
            collected.problems.append(f"{where}: no transcript after the utterance id {utt_id}")
            continue
        recording_id, start_s, end_s = segments.get(utt_id, (None, None, None)) if segments is not None \
            else (utt_id, None, None)
        if recording_id is None:
            collected.problems.append(f"{where}: utterance {utt_id} is not in {data_dir / 'segments'}")
        elif recording_id not in recordings:
            collected.problems.append(f"{where}: recording {recording_id} of utterance {utt_id} is not in "
                                      f"{data_dir / 'wav.scp'}")
        else:
            collected.utterances.append(Utterance(utt_id, recordings[recording_id], text.strip(), start_s, end_s))
    return collected


def _read_wav_scp(path: Path) -> dict[str, Path]:
    recordings = {}
    for line_no, line in _lines(path):
        recording_id, _, location = line.partition(" ")
        location = location.strip()
        if location.endswith("|"):
            raise DataError(f"{path}:{line_no}: recording {recording_id} is a pipe command ({location!r}); only "
                            "audio file paths are read: write the command's output to files (e.g. with "
                            "wav-copy or sox) and list those in wav.scp")
        if not location:
            raise DataError(f"{path}:{line_no}: recording {recording_id} has no path")
        recordings[recording_id] = Path(os.path.abspath(location))
    return recordings


def _read_segments(path: Path) -> dict[str, tuple[str, float, float | None]]:
    segments = {}
    for line_no, line in _lines(path):
        fields = line.split()
        try:
            utt_id, recording_id, start, end = fields
            start_s, end_s = float(start), float(end)
        except ValueError:
            raise DataError(f"{path}:{line_no}: expected 'UTTERANCE-ID RECORDING-ID START END', got {line!r}") from None
        if start_s < 0 or (end_s != -1 and end_s <= start_s):
            raise DataError(f"{path}:{line_no}: segment [{start}, {end}) of {utt_id} is empty or negative")
        segments[utt_id] = (recording_id, start_s, None if end_s == -1 else end_s)
    return segments


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    """(line number, stripped line) of the non-blank lines of a text file."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read {path}: {err}") from None
    return [(line_no, line.strip()) for line_no, line in enumerate(lines, start=1) if line.strip()]


def _write(collected: Collected, out: Path, skip_bad: bool) -> dict:
    """Probe every audio file, then write the manifest (or raise DataError listing the bad files)."""
    infos = _probe_audio({u.audio for u in collected.utterances}, collected)
    kept = []
    for utterance in collected.utterances:
        info = infos.get(utterance.audio)
        if info is None:
            continue  # its file is already in collected.problems
        if utterance.start_s is not None and utterance.start_s >= info.duration_s:
            collected.problems.append(f"{utterance.audio}: segment {utterance.id} starts at {utterance.start_s:g} s, "
                                      f"after the recording's end ({info.duration_s:.3f} s)")
            continue
        kept.append((utterance, info))
    left_out = collected.num_lines - len(kept)
    if collected.problems and not skip_bad:
        shown = "; ".join(collected.problems[:SHOWN_PROBLEMS])
        raise DataError(f"{collected.name}: {left_out} of {collected.num_lines} utterances cannot be used: "
                        f"{len(collected.problems)} missing or unreadable audio file(s) or bad line(s), "
                        f"first: {shown}; fix them or pass --skip-bad to leave them out")
    if not kept:
        raise DataError(f"{collected.name}: no usable utterance")
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / f"{collected.name}.jsonl"
    with manifest.open("w", encoding="utf-8") as handle:
        for utterance, _ in kept:
            handle.write(json.dumps(utterance.record(), ensure_ascii=False) + "\n")
    seconds = sum(_duration_s(utterance, info) for utterance, info in kept)
    if collected.problems:
        logger.warning("%s: left out %d of %d utterances (%d problem(s)); first: %s", collected.name, left_out,
                       collected.num_lines, len(collected.problems), collected.problems[0])
    return {"manifest": str(manifest), "utterances": len(kept), "skipped": left_out,
            "first_problems": collected.problems[:SHOWN_PROBLEMS], "seconds": round(seconds, 2),
            "hours": round(seconds / 3600, 4)}


def _probe_audio(paths: set[Path], collected: Collected) -> dict[Path, AudioInfo]:
    """Header of every file; the unreadable ones go to ``collected.problems``."""
    infos = {}
    show = sys.stderr.isatty() and not os.environ.get("CI")
    for path in tqdm(sorted(paths), desc=f"{collected.name}: reading headers", unit="file", disable=not show,
                     leave=False):
        try:
            info = audio_info(path)
        except DataError as err:
            collected.problems.append(str(err))
            continue
        if info.num_frames == 0:
            collected.problems.append(f"{path}: file contains no audio samples")
            continue
        infos[path] = info
    return infos


def _duration_s(utterance: Utterance, info: AudioInfo) -> float:
    end = info.duration_s if utterance.end_s is None else min(utterance.end_s, info.duration_s)
    return end - (utterance.start_s or 0.0)
