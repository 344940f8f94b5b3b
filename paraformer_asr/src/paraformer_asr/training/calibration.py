"""Refitting a trained Paraformer's CIF calibration (``predictor.alpha_scale``) on a set of utterances.

Training refits it on the validation set at every validation (``train.calibrate_cif``); this module does the
same for a finished checkpoint: one trained before the calibration existed, an averaged one (whose scale is
the mean of its sources'), or one moving to recordings of a new kind (give a manifest of them).
"""

from __future__ import annotations

from pathlib import Path

import torch

from paraformer_asr.errors import CheckpointError
from paraformer_asr.inference import (evaluation_loader, evaluation_manifest, model_from_checkpoint,
                                      resolve_eval_checkpoint)
from paraformer_asr.training.checkpointing import load_checkpoint


def calibrate_checkpoint(path: str | Path, split: str = "val", manifest: str | None = None,
                         batch_size: int = 64, device: torch.device | None = None) -> tuple[dict, float, float]:
    """-> (the checkpoint's payload with the refitted scale and a ``calibrated_on`` record, old scale, new scale).

    The scale is fitted on the checkpoint's ``split`` (its config's manifest, or its toy split) or on ``manifest``."""
    device = device or torch.device("cpu")
    checkpoint = resolve_eval_checkpoint(path)
    payload = load_checkpoint(checkpoint)
    loaded = model_from_checkpoint(payload, checkpoint, device)
    if not loaded.model.calibrates_cif:
        raise CheckpointError(f"{checkpoint}: a {loaded.cfg.model.type} model has no CIF predictor to calibrate")
    loader = evaluation_loader(loaded, split, manifest, batch_size)
    old_scale = float(loaded.model.predictor.alpha_scale)
    new_scale = loaded.model.calibrate_alpha_scale(loader, device)
    payload["model"]["predictor.alpha_scale"] = loaded.model.predictor.alpha_scale.cpu()
    payload["calibrated_on"] = {"source": str(checkpoint),
                                "data": evaluation_manifest(loaded, split, manifest) or f"toy:{split}",
                                "utterances": len(loader.dataset), "alpha_scale": new_scale}
    return payload, old_scale, new_scale
