"""Checkpoints: plain types and tensors only, written atomically, loaded with `weights_only=True`.

A checkpoint is a dict with FORMAT_TAG under "format", the model/optimizer/scheduler/scaler state dicts, the config as
a plain dict, the training position (epoch, step within epoch, global step), the metric history, and every RNG state.
"""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path
from typing import Any, Dict, Sequence

import numpy as np
import torch

from .errors import CheckpointError

FORMAT_TAG = "unet_transformer_seg/checkpoint/v1"
REQUIRED_KEYS = ("model", "config")


def save_checkpoint(state: Dict[str, Any], path: str | Path) -> None:
    """Write to `path.tmp`, flush and fsync, then rename over `path`: a crash leaves the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_name(path.name + ".tmp")
    with open(tmp_path, "wb") as handle:
        torch.save({"format": FORMAT_TAG, **state}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp_path, path)
    directory_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)


def load_checkpoint(path: str | Path) -> Dict[str, Any]:
    """Load safely onto the CPU. Unsafe pickles, truncated files and foreign files raise CheckpointError naming path."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"refusing to load {path}: it holds objects other than tensors and plain types ({first_line})"
        ) from None
    except Exception as exc:  # zip/EOF/runtime errors from a damaged or non-torch file
        raise CheckpointError(f"cannot read checkpoint {path}: truncated or not a torch checkpoint ({exc})") from None
    return check_tagged(state, path, "unet_transformer_seg checkpoint", FORMAT_TAG, REQUIRED_KEYS)


def check_tagged(content: Any, path: Path, kind: str, tag: str, required: Sequence[str]) -> Dict[str, Any]:
    """`content` read from `path` (a checkpoint, an export sidecar) when it is a dict with `format` == tag holding
    every key of `required`; else a CheckpointError naming the file."""
    if not isinstance(content, dict) or content.get("format") != tag:
        raise CheckpointError(f"{path} is not a {kind} (missing format tag {tag!r})")
    missing = [key for key in required if key not in content]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(missing)}")
    return content


def resolve_checkpoint_path(run_dir_or_checkpoint: str | Path) -> Path:
    """A run folder means its checkpoints/last.pt; a file path is used as it is."""
    path = Path(run_dir_or_checkpoint)
    if path.is_dir():
        candidate = path / "checkpoints" / "last.pt"
        if not candidate.is_file():
            raise CheckpointError(f"run folder {path} has no checkpoints/last.pt")
        return candidate
    if not path.exists():
        raise CheckpointError(f"checkpoint or run folder not found: {path}")
    return path


def capture_rng_state() -> Dict[str, Any]:
    """Every RNG state as tensors and plain types (python, numpy, torch, and cuda when present)."""
    version, python_state, gauss = random.getstate()
    bit_generator, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "python": [version, list(python_state), gauss],
        "numpy": {
            "bit_generator": bit_generator,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Dict[str, Any]) -> None:
    version, python_state, gauss = state["python"]
    random.setstate((version, tuple(python_state), gauss))
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            numpy_state["bit_generator"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["position"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
