"""Checkpoints: plain types + tensors only (``torch.load(weights_only=True)``), written atomically.

Layout of a checkpoint dict:
    format: "paraformer_asr.checkpoint", version: 1,
    model: state_dict (with train.ema_decay the moving average, training/ema.py), training_weights: the trained
    state_dict when model holds the average (else None), ema_updates: int,
    config: Config.to_dict(), tokenizer: Tokenizer.to_dict() (plain data of any kind),
    normalizer: FeatureNormalizer.to_dict() | None, input_dim: int,
    optimizer / scheduler / scaler: state_dicts, progress: {epoch, batch_in_epoch, global_step, ...},
    rng: {python, numpy, torch, cuda}, history: list of per-epoch dicts, best_cer: float,
    best_checkpoints: [{"epoch", "val_cer"}, ...] the ``train.keep_best`` best epochs, best first

Files of a run: ``last.pt`` (every epoch and every ``train.checkpoint_every`` steps), ``best.pt`` (the lowest
validation CER so far) and, with ``train.keep_best`` N > 1, ``best_epoch{E}.pt`` for each of the N best epochs.
An averaged checkpoint (training/averaging.py) has model, config, tokenizer, normalizer and input_dim only.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import zipfile
from pathlib import Path

import numpy as np
import torch

from paraformer_asr.errors import CheckpointError

FORMAT = "paraformer_asr.checkpoint"
VERSION = 1


def atomic_torch_save(payload: dict, path: str | Path) -> None:
    """Write ``path.tmp``, flush + fsync, then rename over ``path``: a crash never leaves a torn file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        torch.save(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def save_checkpoint(payload: dict, path: str | Path) -> None:
    atomic_torch_save({"format": FORMAT, "version": VERSION, **payload}, path)


def resolve_checkpoint_path(path: str | Path) -> Path:
    """A run folder means its ``checkpoints/last.pt``; a file is used as given."""
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoints" / "last.pt"
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    return path


def load_checkpoint(path: str | Path) -> dict:
    """Load with ``weights_only=True``; raise CheckpointError naming the file when it is unsafe,
    truncated, not a torch file, or not a paraformer_asr checkpoint."""
    path = resolve_checkpoint_path(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"refusing to load {path}: it holds objects other than plain data and tensors "
                              f"(weights_only load failed: {str(exc).splitlines()[0]})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: the file is truncated or not a torch checkpoint "
                              f"({type(exc).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a paraformer_asr checkpoint (no '{FORMAT}' format tag)")
    if payload.get("version") != VERSION:
        raise CheckpointError(f"{path} has checkpoint version {payload.get('version')}, expected {VERSION}")
    for key in ("model", "config", "tokenizer", "input_dim"):
        if key not in payload:
            raise CheckpointError(f"{path} is missing '{key}'")
    return payload


class BestCheckpoints:
    """The ``keep`` best epochs by validation CER, best first (ties: the earlier epoch ranks first).

    ``offer(epoch, val_cer)`` -> True if the epoch enters the list (a later epoch must be strictly better than
    the worst one kept to push it out). ``entries`` is plain data saved in every checkpoint, so a resumed run
    keeps exactly the same files.
    """

    def __init__(self, keep: int, entries: list[dict] | None = None):
        self.keep = keep
        self.entries = [dict(entry) for entry in entries or []]

    @staticmethod
    def file_name(epoch: int) -> str:
        return f"best_epoch{epoch}.pt"

    def offer(self, epoch: int, val_cer: float) -> bool:
        if len(self.entries) >= self.keep and not val_cer < self.entries[-1]["val_cer"]:
            return False
        self.entries.append({"epoch": epoch, "val_cer": val_cer})
        self.entries.sort(key=lambda entry: (entry["val_cer"], entry["epoch"]))
        del self.entries[self.keep:]
        return True

    def file_names(self) -> list[str]:
        """The files holding the kept epochs, best first: best_epoch{E}.pt, or best.pt alone when keep is 1."""
        if self.keep == 1:
            return ["best.pt"] if self.entries else []
        return [self.file_name(entry["epoch"]) for entry in self.entries]

    def remove_unkept(self, folder: Path) -> None:
        """Delete best_epoch*.pt files of ``folder`` that are no longer kept (pushed out, or left by a crash)."""
        kept = set(self.file_names())
        for path in folder.glob("best_epoch*.pt"):
            if path.name not in kept:
                path.unlink()


def capture_rng_state() -> dict:
    """Every RNG the training touches, as plain types / tensors."""
    version, state, gauss = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [version, list(state), gauss],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]), int(np_state[3]),
                  float(np_state[4])],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_rng_state(state: dict) -> None:
    version, values, gauss = state["python"]
    random.setstate((version, tuple(values), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 of all of ``model``'s state bytes (identical on every rank after distributed training)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
