"""Refitting a trained Paraformer's CIF calibration (``predictor.alpha_scale``) on a set of utterances.

Training refits it on the validation set at every validation (``train.calibrate_cif``); this module does the
same for a finished checkpoint: one trained before the calibration existed, an averaged one
(scripts/average_checkpoints.py refits it on validation data itself), or one moving to recordings of a new kind (give a
manifest of them). The test set is refused unless asked for: scores on the calibration set are in-sample.
What counts as a test set (:func:`why_test_set`) is shared with the choice of the decoding (training/tuning.py): the
test split, the config's test manifest, and a manifest whose file name says test (:func:`names_test_set`).
The payload records the set it was fitted on (``calibrated_on``); eval.py warns when it scores that same set.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from paraformer_asr.config import Config
from paraformer_asr.errors import CheckpointError, ConfigError
from paraformer_asr.inference import (evaluation_loader, evaluation_manifest, model_from_checkpoint,
                                      resolve_eval_checkpoint)
from paraformer_asr.training.checkpointing import load_checkpoint


def calibrate_checkpoint(path: str | Path, split: str = "val", manifest: str | None = None,
                         batch_size: int = 64, device: torch.device | None = None,
                         allow_test: bool = False) -> tuple[dict, float, float]:
    """-> (the checkpoint's payload with the refitted scale and a ``calibrated_on`` record, old scale, new scale).

    The scale is fitted on the checkpoint's ``split`` (its config's manifest, or its toy split) or on ``manifest``;
    the test set is refused unless ``allow_test`` (see :func:`calibrate_payload`)."""
    device = device or torch.device("cpu")
    checkpoint = resolve_eval_checkpoint(path)
    payload = load_checkpoint(checkpoint)
    return calibrate_payload(payload, checkpoint, split, manifest, batch_size, device, allow_test)


def calibrate_payload(payload: dict, checkpoint: Path, split: str = "val", manifest: str | None = None,
                      batch_size: int = 64, device: torch.device | None = None,
                      allow_test: bool = False) -> tuple[dict, float, float]:
    """:func:`calibrate_checkpoint` on an already loaded checkpoint ``payload`` (read from, or to be written to,
    ``checkpoint``). ConfigError when the set is a test set (:func:`why_test_set`) and not ``allow_test``: the
    test scores would then be in-sample for the scale."""
    device = device or torch.device("cpu")
    loaded = model_from_checkpoint(payload, checkpoint, device)
    if not loaded.model.calibrates_cif:
        raise CheckpointError(f"{checkpoint}: a {loaded.cfg.model.type} model has no CIF predictor to calibrate "
                              f"(model.type {loaded.cfg.model.type}, model.predictor {loaded.cfg.model.predictor})")
    data = evaluation_manifest(loaded, split, manifest) or f"toy:{split}"
    reason = why_test_set(loaded.cfg, data)
    if reason and not allow_test:
        raise ConfigError(f"refusing to calibrate on the test set ({data}: {reason}): its scores would be in-sample "
                          f"for the scale; fit on validation data (--split val) or pass --allow-test")
    loader = evaluation_loader(loaded, split, manifest, batch_size)
    old_scale = float(loaded.model.predictor.alpha_scale)
    new_scale = loaded.model.calibrate_alpha_scale(loader, device)
    payload["model"]["predictor.alpha_scale"] = loaded.model.predictor.alpha_scale.cpu()
    payload["calibrated_on"] = {"source": str(checkpoint), "data": data, "utterances": len(loader.dataset),
                                "alpha_scale": new_scale}
    return payload, old_scale, new_scale


def test_set(cfg: Config) -> str | None:
    """The label of a config's test set: its test manifest, 'toy:test', or None when it has none."""
    if cfg.data.kind == "toy":
        return "toy:test"
    return cfg.data.test_manifest or None


def names_test_set(manifest: str | Path) -> bool:
    """Whether a manifest's file name says it holds a test set: 'test' is one of the words of its name (runs of
    letters, case aside). test.jsonl (scripts/make_speech_corpus.py), test-clean.jsonl (a LibriSpeech subset,
    data/corpora.py), test_clean.jsonl and wordtimes_test_60min.jsonl say so; latest.jsonl, and val.jsonl in a
    folder named test, do not."""
    return "test" in re.findall(r"[a-z]+", Path(manifest).stem.lower())


def why_test_set(cfg: Config, data: str) -> str | None:
    """Why the set labelled ``data`` (a manifest path or 'toy:<split>') of a checkpoint with config ``cfg`` is a
    test set ('the test split', "the config's data.test_manifest", 'its file name says test'), or None when it is
    not one. Choices fitted on a set are in-sample for it: they are made on validation data."""
    if data.startswith("toy:"):
        return "the test split" if same_set(data, test_set(cfg)) else None
    if same_set(data, test_set(cfg)):
        return "the config's data.test_manifest"
    return "its file name says test" if names_test_set(data) else None


def same_set(first: str | None, second: str | None) -> bool:
    """Whether two data-set labels (manifest paths or 'toy:<split>') name the same set."""
    if first is None or second is None:
        return False
    if first.startswith("toy:") or second.startswith("toy:"):
        return first == second
    return Path(first).resolve() == Path(second).resolve()
