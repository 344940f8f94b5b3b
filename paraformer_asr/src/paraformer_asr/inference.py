"""Loading a trained model from a checkpoint and turning inputs into feature batches.

``load_model`` also loads export folders, through the onnxruntime backend (deploy/runtime.py), which imports nothing
from here: what both backends load, :class:`LoadedModel`, lives in loaded_model.py with
:func:`features_from_waveform` (both imported here, so they are also ``paraformer_asr.inference.LoadedModel`` and
``paraformer_asr.inference.features_from_waveform``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from paraformer_asr.config import config_from_dict
from paraformer_asr.data.audio import load_audio
from paraformer_asr.data.frontend import FeatureNormalizer
from paraformer_asr.data.setup import make_loader, manifest_dataset
from paraformer_asr.data.tokenizer import tokenizer_from_dict
from paraformer_asr.data.toy import ToySeq2SeqDataset
from paraformer_asr.errors import CheckpointError, ConfigError, DataError
from paraformer_asr.factory import build_model
from paraformer_asr.loaded_model import LoadedModel, features_from_waveform
from paraformer_asr.runtime import apply_num_threads, resolve_device
from paraformer_asr.training.checkpointing import load_checkpoint


def model_device(model) -> torch.device:
    """Where a loaded model runs: its ``device`` attribute (the onnxruntime backend: the CPU), else its parameters'."""
    return getattr(model, "device", None) or next(model.parameters()).device


def resolve_eval_checkpoint(path: str | Path) -> Path:
    """A run folder means its best.pt (last.pt if there is no best.pt)."""
    path = Path(path)
    if path.is_dir():
        best = path / "checkpoints" / "best.pt"
        return best if best.is_file() else path / "checkpoints" / "last.pt"
    return path


def load_trained_model(path: str | Path, device: torch.device) -> LoadedModel:
    path = resolve_eval_checkpoint(path)
    return model_from_checkpoint(load_checkpoint(path), path, device)


BACKENDS = ("torch", "onnx")


def load_model(path: str | Path, backend: str = "torch", device: str = "auto",
               num_threads: int | None = None) -> tuple[LoadedModel, torch.device]:
    """The model the scripts run: backend 'torch' loads a checkpoint (or run folder) onto ``device``; 'onnx' loads an
    export folder (scripts/export.py) into onnxruntime, on the CPU. ``num_threads`` CPU threads (None: the
    config's ``run.num_threads``; 0: the library's default) for torch and, with 'onnx', for onnxruntime.
    -> (model, device its batches go to)."""
    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "onnx":
        if device not in ("auto", "cpu"):
            raise ConfigError(f"the onnx backend runs on the CPU; --device must be auto or cpu, got {device!r}")
        from paraformer_asr.deploy.runtime import load_exported_model  # the optional 'onnx' extra

        loaded = load_exported_model(path, num_threads)
        target = torch.device("cpu")
    else:
        target = resolve_device(device)
        loaded = load_trained_model(path, target)
    apply_num_threads(loaded.cfg.run.num_threads if num_threads is None else num_threads)
    return loaded, target


def model_from_checkpoint(state: dict, path: Path, device: torch.device) -> LoadedModel:
    """The model of an already loaded checkpoint ``state`` (read from ``path``), in eval mode on ``device``."""
    try:
        cfg = config_from_dict(state["config"])
    except ConfigError as exc:
        raise CheckpointError(f"{path}: stored config is invalid: {exc}") from None
    tokenizer = tokenizer_from_dict(state["tokenizer"])
    normalizer = None
    if state.get("normalizer") is not None:
        normalizer = FeatureNormalizer.from_dict(state["normalizer"])
    model = build_model(cfg, int(state["input_dim"]), tokenizer)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        raise CheckpointError(f"{path}: weights do not fit the stored config: {str(exc).splitlines()[0]}") from None
    model.to(device).eval()
    calibrated_on = (state.get("calibrated_on") or {}).get("data")
    return LoadedModel(model, cfg, tokenizer, normalizer, int(state["input_dim"]), path, calibrated_on)


def features_from_file(path: Path, loaded: LoadedModel) -> tuple[torch.Tensor, float]:
    """An audio file in any format soundfile reads (.wav, .flac, .ogg, ...), through the model's front end and
    normaliser, or a .npy / .pt feature file [T, F] -> (features [T, F], duration in seconds)."""
    suffix = path.suffix.lower()
    if not path.is_file():
        raise DataError(f"input file not found: {path}")
    if suffix not in (".npy", ".pt"):
        if loaded.cfg.data.kind != "manifest":
            raise DataError(f"{path}: this checkpoint was trained on toy features, not audio; give feature files "
                            "(.npy or .pt)")
        waveform = load_audio(path, loaded.cfg.data.sample_rate)  # [N]
        return features_from_waveform(waveform, loaded), waveform.numel() / loaded.cfg.data.sample_rate
    try:
        if suffix == ".npy":
            features = torch.from_numpy(np.load(path, allow_pickle=False)).float()
        else:
            features = torch.load(path, map_location="cpu", weights_only=True).float()
    except Exception as exc:  # any unreadable file is the user's to fix
        raise DataError(f"{path}: cannot read features ({type(exc).__name__}: {exc})") from None
    if features.dim() != 2 or features.shape[1] != loaded.input_dim or features.shape[0] == 0:
        raise DataError(f"{path}: features must be [T, {loaded.input_dim}], got {tuple(features.shape)}")
    if not bool(torch.isfinite(features).all()):
        raise DataError(f"{path}: features contain NaN or Inf")
    return features, features.shape[0] * 0.01


def default_split(loaded: LoadedModel) -> str:
    """The split eval.py scores when none is named: 'test' when the config has one (toy data always has), else
    'val'."""
    return "test" if loaded.cfg.data.kind == "toy" or loaded.cfg.data.test_manifest else "val"


def evaluation_manifest(loaded: LoadedModel, split: str = "val", manifest: str | None = None) -> str | None:
    """The manifest a checkpoint is evaluated on: ``manifest`` if given (audio checkpoints only), else the config's
    ``data.<split>_manifest``; None for a toy checkpoint (its toy split)."""
    cfg = loaded.cfg
    if manifest is not None:
        if cfg.data.kind != "manifest":
            raise ConfigError(f"--manifest needs a checkpoint trained on audio (data.kind manifest); "
                              f"{loaded.path} was trained on '{cfg.data.kind}' data")
        return manifest
    if cfg.data.kind == "toy":
        return None
    path = cfg.data.val_manifest if split == "val" else cfg.data.test_manifest
    if not path:
        raise ConfigError(f"the checkpoint's config has no data.{split}_manifest; pass --manifest FILE.jsonl")
    return path


def evaluation_dataset(loaded: LoadedModel, split: str = "val", manifest: str | None = None):
    """The set a checkpoint is evaluated on (see :func:`evaluation_manifest`), as a dataset."""
    path = evaluation_manifest(loaded, split, manifest)
    if path is None:
        return ToySeq2SeqDataset.from_config(loaded.cfg.data.toy, split, loaded.tokenizer)
    return manifest_dataset(loaded.cfg, path, loaded.tokenizer, loaded.normalizer)


def evaluation_loader(loaded: LoadedModel, split: str = "val", manifest: str | None = None,
                      batch_size: int = 64) -> DataLoader:
    """Batches of :func:`evaluation_dataset` in a fixed order; DataError when the set is empty."""
    dataset = evaluation_dataset(loaded, split, manifest)
    if len(dataset) == 0:
        raise DataError(f"the set to evaluate on is empty ({manifest or split})")
    loader, _ = make_loader(dataset, batch_size, loaded.tokenizer.pad_id, shuffle=False, seed=0)
    return loader
