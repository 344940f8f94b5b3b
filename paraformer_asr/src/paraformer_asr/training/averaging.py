"""Checkpoint averaging: the mean of the weights of a run's best checkpoints, as a checkpoint of its own.

Floating-point tensors are averaged (summed in float64, divided, cast back to their dtype, so N copies of one
checkpoint average to it exactly); integer and bool tensors are taken from the best checkpoint. The result has
the best checkpoint's config, tokenizer, normaliser and input_dim, no optimizer or training state, and an
``averaged_from`` list; eval, infer, benchmark and serve read it like any other checkpoint.

A Paraformer's CIF calibration (``predictor.alpha_scale``) is not a weight: the mean of the sources' scales fits
none of them, so :func:`refit_calibration` fits it again for the averaged weights on the validation set.
"""

from __future__ import annotations

from pathlib import Path

import torch

from paraformer_asr.errors import CheckpointError
from paraformer_asr.training.calibration import calibrate_payload
from paraformer_asr.training.checkpointing import BestCheckpoints, load_checkpoint

# Checkpoints whose config differs outside these sections (or whose tokenizer, normaliser or input size
# differs) describe different models and are not averaged.
IGNORED_CONFIG_SECTIONS = ("run", "train")


def kept_best_checkpoints(run_dir: str | Path, count: int) -> list[Path]:
    """The ``count`` best checkpoints a run kept by validation CER, best first (from its last.pt's bookkeeping)."""
    run_dir = Path(run_dir)
    if count < 1:
        raise CheckpointError(f"the number of checkpoints to average must be >= 1, got {count}")
    if not run_dir.is_dir():
        raise CheckpointError(f"run folder not found: {run_dir}")
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    keep = int(state["config"]["train"].get("keep_best", 1))
    names = BestCheckpoints(keep, state.get("best_checkpoints", [])).file_names()
    if count > len(names):
        raise CheckpointError(f"{run_dir} kept {len(names)} best checkpoint(s) (train.keep_best: {keep}); cannot "
                              f"average {count}: train with train.keep_best >= {count}")
    paths = [run_dir / "checkpoints" / name for name in names[:count]]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise CheckpointError(f"{run_dir}: kept checkpoint(s) missing on disk: {', '.join(missing)}")
    return paths


def _flatten(config: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def check_same_model(states: list[dict], paths: list[Path]) -> None:
    """Raise CheckpointError naming the files and the first difference unless every checkpoint has the same
    model config, data config, tokenizer, normaliser, input size and weight names/shapes as the first."""
    reference, reference_path = states[0], paths[0]
    reference_config = {key: value for key, value in _flatten(reference["config"]).items()
                        if key.split(".")[0] not in IGNORED_CONFIG_SECTIONS}
    for state, path in zip(states[1:], paths[1:]):
        config = {key: value for key, value in _flatten(state["config"]).items()
                  if key.split(".")[0] not in IGNORED_CONFIG_SECTIONS}
        for key in sorted(set(reference_config) | set(config)):
            if reference_config.get(key) != config.get(key):
                raise CheckpointError(f"cannot average {reference_path} and {path}: config key '{key}' differs "
                                      f"({reference_config.get(key)!r} vs {config.get(key)!r})")
        for key in ("tokenizer", "normalizer", "input_dim"):
            if reference.get(key) != state.get(key):
                raise CheckpointError(f"cannot average {reference_path} and {path}: their {key} differs")
        shapes = {name: tuple(t.shape) for name, t in state["model"].items()}
        if shapes != {name: tuple(t.shape) for name, t in reference["model"].items()}:
            raise CheckpointError(f"cannot average {reference_path} and {path}: their weights differ in names "
                                  f"or shapes")


def average_checkpoints(paths: list[Path]) -> dict:
    """Checkpoint files, best first -> the payload of their average (see the module docstring)."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    states = [load_checkpoint(path) for path in paths]
    check_same_model(states, paths)
    best = states[0]
    averaged = {}
    for name, tensor in best["model"].items():
        if tensor.is_floating_point():
            total = sum(state["model"][name].double() for state in states)
            averaged[name] = (total / len(states)).to(tensor.dtype)
        else:
            averaged[name] = tensor.clone()
    sources = []
    for path, state in zip(paths, states):
        history = state.get("history") or [{}]
        sources.append({"file": str(path), "epoch": history[-1].get("epoch"), "val_cer": history[-1].get("val_cer")})
    return {"model": averaged, "config": best["config"], "tokenizer": best["tokenizer"],
            "normalizer": best.get("normalizer"), "input_dim": best["input_dim"], "averaged_from": sources}


def refit_calibration(payload: dict, path: Path, batch_size: int = 64) -> float | None:
    """Refit an averaged payload's CIF scale on its config's validation set (in place; ``path`` names it in
    errors) -> the new scale, or None for a model without a CIF calibration."""
    if "predictor.alpha_scale" not in payload["model"]:
        return None
    _, _, scale = calibrate_payload(payload, path, "val", None, batch_size, torch.device("cpu"))
    return scale
