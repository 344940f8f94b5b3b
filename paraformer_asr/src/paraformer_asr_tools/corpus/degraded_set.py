"""A selection set toward real recordings: a manifest's utterances played through rooms, noise, microphones and
telephone lines (scripts/make_degraded_set.py).

Real recordings are scarce and every one set aside to choose on is one fewer to report on. A set of synthetic
voices held out of training (a corpus's validation split) made to sound recorded is a cheap stand-in for choices
the real selection set cannot make, e.g. on long sentences, which few real clips have. The degradation is the
training augmentation's (data/augment.py), through the same dataset code (``ManifestDataset.played_waveform``),
with every stage on by default (``DEGRADED``): what differs from training is only how often and how hard.

Each utterance keeps its length, text and fields (a segment's ``start_s`` / ``end_s`` dropped: the new file is the
segment), gets a new WAV (16-bit, the front end's rate, its peak held below full scale) and a ``length`` field,
``long`` or ``short`` by its characters, for ``eval.py --group-by length``. The draws are a pure function of
(seed, utterance index).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from tqdm import tqdm

from paraformer_asr.config import AugmentConfig, config_from_dict
from paraformer_asr.data.audio import write_audio
from paraformer_asr.data.augment import RecordingAugment
from paraformer_asr.data.frontend import LogMelFrontend
from paraformer_asr.data.manifest import ManifestDataset, read_manifest_records
from paraformer_asr.data.tokenizer import CharTokenizer

SAMPLE_RATE = 16000
PEAK = 0.99  # a degraded waveform louder than this is scaled down to it (no clipping in the 16-bit WAV)
DEGRADED = {  # the data.augment section a degraded set is made with, before any --set
    "reverb": {"p": 1.0, "rt60_s": [0.2, 0.7], "drr_db": [0.0, 10.0], "early_reflections": 8},
    "noise": {"p": 1.0, "snr_db": [10.0, 25.0], "kinds": ["pink", "babble"], "babble_voices": 4},
    "microphone": {"p": 1.0, "bands": 3, "max_db": 8.0},
    "loudness": {"p": 1.0, "gain_db": [-20.0, 0.0]},
    "telephone": {"p": 0.2},
}


def degradation(manifest: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> AugmentConfig:
    """``DEGRADED`` with ``overrides`` ('noise.snr_db=[0,10]', keys below ``data.augment``) applied and checked as
    the section of a config reading ``manifest`` is (ConfigError naming the key)."""
    raw = {"data": {"kind": "manifest", "train_manifest": str(manifest), "val_manifest": str(manifest),
                    "augment": json.loads(json.dumps(DEGRADED))}}
    return config_from_dict(raw, [f"data.augment.{override}" for override in overrides]).data.augment


def write_degraded_set(manifest: str | Path, out: str | Path, augment: AugmentConfig, seed: int = 0,
                       long_chars: int = 30, show_progress: bool = False) -> dict:
    """Every utterance of ``manifest`` through ``augment`` -> OUT/wavs/NNNNN.wav and OUT/degraded.jsonl (the
    manifest's fields, ``audio`` the new file, ``length`` long at ``long_chars`` characters or more). -> a summary
    {"utterances", "long", "seed", "augment"}, also written to OUT/degraded.json."""
    out = Path(out)
    entries, records = zip(*read_manifest_records(manifest))
    records = [{key: value for key, value in record.items() if key not in ("start_s", "end_s")} for record in records]
    frontend = LogMelFrontend(sample_rate=SAMPLE_RATE)
    dataset = ManifestDataset(entries, CharTokenizer.build(entry.text for entry in entries), frontend, seed=seed,
                              recording_augment=RecordingAugment(augment, SAMPLE_RATE))
    (out / "wavs").mkdir(parents=True, exist_ok=True)
    long = 0
    with open(out / "degraded.jsonl", "w", encoding="utf-8") as lines:
        for index in tqdm(range(len(dataset)), desc="degrading", unit="utt", disable=not show_progress):
            waveform, _, _ = dataset.played_waveform(index)  # [N] the input's length
            waveform = waveform * min(1.0, PEAK / max(float(waveform.abs().max()), 1e-9))
            path = out / "wavs" / f"{index:05d}.wav"
            write_audio(path, waveform, SAMPLE_RATE)
            is_long = len(entries[index].text) >= long_chars
            long += is_long
            lines.write(json.dumps({**records[index], "audio": str(path.resolve()),
                                    "length": "long" if is_long else "short"}) + "\n")
    summary = {"utterances": len(dataset), "long": long, "seed": seed, "augment": dataclasses.asdict(augment)}
    (out / "degraded.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary

