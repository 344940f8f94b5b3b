"""The run folder: runs/<YYYYmmdd_HHMMSS>_<name>/ with config.yaml, train.log, metrics.json, results.csv,
checkpoints/ and plots/."""

from __future__ import annotations

import csv
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Dict, List

RESULTS_COLUMNS = (
    "run_id", "model_type", "epoch", "step", "train_loss", "val_loss", "val_mean_dice", "val_mean_iou",
    "val_pixel_accuracy", "lr", "epoch_seconds",
)
LOGGER_NAME = "unet_transformer_seg"


def create_run_dir(output_dir: str | Path, name: str) -> Path:
    """Create a new, unused run folder (a numeric suffix is added if the timestamped name exists)."""
    base = Path(output_dir) / f"{time.strftime('%Y%m%d_%H%M%S')}_{name}"
    candidate, suffix = base, 1
    while True:
        try:
            candidate.mkdir(parents=True)
            break
        except FileExistsError:
            candidate = base.with_name(f"{base.name}_{suffix}")
            suffix += 1
    (candidate / "checkpoints").mkdir()
    (candidate / "plots").mkdir()
    return candidate


def setup_logger(log_file: Path | None, enabled: bool = True) -> logging.Logger:
    """Logger writing to stdout and, when given, appending to log_file; silent when not enabled (ranks > 0)."""
    logger = logging.getLogger(LOGGER_NAME)
    close_logger(logger)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if not enabled:
        logger.addHandler(logging.NullHandler())
        return logger
    formatter = logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S")
    handlers: List[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if log_file is not None:
        handlers.append(logging.FileHandler(log_file))
    for handler in handlers:
        handler.setFormatter(formatter)
        logger.addHandler(handler)
    return logger


def close_logger(logger: logging.Logger) -> None:
    for handler in list(logger.handlers):
        handler.close()
        logger.removeHandler(handler)


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def write_json(path: Path, payload) -> None:
    Path(path).write_text(json.dumps(_json_safe(payload), indent=2) + "\n")


def write_csv(path: Path, rows: List[Dict], columns) -> None:
    """One line per row, in `columns` order; NaN and None become empty cells."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({key: "" if value is None else value for key, value in _json_safe(row).items()})


def write_history(run_dir: Path, history: List[Dict]) -> None:
    """Rewrite metrics.json (all fields) and results.csv (RESULTS_COLUMNS) from the full per-epoch history."""
    write_json(run_dir / "metrics.json", history)
    write_csv(run_dir / "results.csv", history, RESULTS_COLUMNS)
