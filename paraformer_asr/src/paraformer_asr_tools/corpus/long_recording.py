"""Long test recordings made by joining the utterances of a manifest with pauses, with their known transcript and
word times (the ground truth of long-form decoding).

The recording is written as it is made (one utterance in memory at a time): a pause, an utterance, a pause, ...,
each utterance mixed to mono and resampled to ``sample_rate``, 16-bit PCM WAV quantised as ``write_audio`` does.
Pause lengths are drawn uniformly from ``pause_s`` by a generator seeded with ``seed``. What fills a pause is the
``gap`` kind: 'noise' (the default) is white noise at the noise floor of the utterance it precedes (the last pause:
of the last utterance; data/audio.py, ``noise_floor``), the RMS of its quietest tenth of 20 ms blocks, so that a
pause is as quiet as the utterances' own edges; 'silence' is digital silence (zeros), as between clips joined by an
editor; 'none' joins the utterances back to back, with no pause but their own edges. With ``target_seconds`` the
manifest's utterances are taken in order, again from the first when they run out, until the recording is at least
that long; without it every utterance is used once.

The manifest line written beside it (``{"audio", "text", "id", "words"?, "utterances"}``) is a valid manifest for
``eval.py``: ``text`` joins the transcripts with spaces; ``words`` (when every source line has word times) are the
source words shifted by their utterance's offset, in ms from the recording's start; ``utterances`` lists each
source's ``id``, ``start_ms`` and ``end_ms`` in the recording (ignored by the manifest reader).

Contracts:
    join_utterances(entries, wav_path, sample_rate, pause_s=(0.2, 1.0), seed=0, target_seconds=None,
                    gap='noise') -> dict
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile

from paraformer_asr.data.audio import load_audio, noise_floor
from paraformer_asr.data.manifest import ManifestEntry
from paraformer_asr.errors import DataError

DEFAULT_PAUSE_S = (0.2, 1.0)
GAP_KINDS = ("noise", "silence", "none")


def join_utterances(entries: list[ManifestEntry], wav_path: str | Path, sample_rate: int,
                    pause_s: tuple[float, float] = DEFAULT_PAUSE_S, seed: int = 0,
                    target_seconds: float | None = None, gap: str = "noise") -> dict:
    """Write the joined recording to ``wav_path`` and its manifest line to ``wav_path`` with suffix .jsonl.

    -> summary: ``audio``, ``manifest``, ``duration_s``, ``utterances``, ``passes`` (times through the manifest),
    ``words`` (reference words), ``timed_words`` (whether word times were written)."""
    if not entries:
        raise DataError("no utterances to join")
    low, high = pause_s
    if not 0.0 <= low <= high:
        raise ValueError(f"pauses must satisfy 0 <= min <= max, got {pause_s}")
    if gap not in GAP_KINDS:
        raise ValueError(f"gap must be one of {', '.join(GAP_KINDS)}, got {gap!r}")
    wav_path = Path(wav_path)
    wav_path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 29]))
    timed = all(entry.words is not None for entry in entries)
    texts, words, placed = [], [], []
    written = 0  # samples in the recording so far
    count = 0

    def pause(floor: float) -> np.ndarray:
        """The samples of one pause [P]. Its length and noise are drawn for every gap kind, so the pauses of
        'noise' and 'silence' recordings of the same seed are equally long."""
        length = round(rng.uniform(low, high) * sample_rate)
        noise = rng.standard_normal(length)
        return noise * floor if gap == "noise" else np.zeros(0 if gap == "none" else length)

    with soundfile.SoundFile(str(wav_path), "w", samplerate=sample_rate, channels=1, subtype="PCM_16") as out:

        def write(samples: np.ndarray) -> None:
            nonlocal written
            out.write(np.round(np.clip(samples, -1.0, 1.0) * 32767.0).astype(np.int16))
            written += samples.shape[0]

        while count < len(entries) if target_seconds is None else written < target_seconds * sample_rate:
            entry = entries[count % len(entries)]
            samples = load_audio(entry.audio_path, sample_rate, entry.start_s, entry.end_s,
                                 name=str(entry.audio_path)).numpy().astype(np.float64)  # [N]
            floor = noise_floor(samples, sample_rate)
            write(pause(floor))
            offset_ms = written * 1000.0 / sample_rate
            write(samples)
            texts.append(entry.text)
            placed.append({"id": entry.id, "start_ms": round(offset_ms, 1),
                           "end_ms": round(written * 1000.0 / sample_rate, 1)})
            if timed:
                words += [{"word": w["word"], "start_ms": round(offset_ms + w["start_ms"], 1),
                           "end_ms": round(offset_ms + w["end_ms"], 1)} for w in entry.words]
            count += 1
        write(pause(floor))
    line = {"audio": wav_path.name, "text": " ".join(texts), "id": wav_path.stem}
    if timed:
        line["words"] = words
    line["utterances"] = placed
    manifest = wav_path.with_suffix(".jsonl")
    manifest.write_text(json.dumps(line) + "\n", encoding="utf-8")
    return {"audio": str(wav_path), "manifest": str(manifest), "duration_s": round(written / sample_rate, 3),
            "utterances": count, "passes": round(count / len(entries), 3), "words": len(" ".join(texts).split()),
            "timed_words": timed}
