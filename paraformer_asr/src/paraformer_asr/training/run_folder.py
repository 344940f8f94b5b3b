"""Run folder: runs/<YYYYmmdd_HHMMSS>_<name>/ with config, log, metrics, results table, checkpoints, plots."""

from __future__ import annotations

import base64
import csv
import json
import logging
import time
from pathlib import Path

from paraformer_asr.config import Config, save_config

RESULTS_COLUMNS = ["run_id", "model_type", "epoch", "step", "train_loss", "ce_loss", "quantity_loss", "val_cer",
                   "val_token_accuracy", "val_sequence_accuracy", "cif_alpha_scale", "lr",
                   "epoch_seconds"]
LOGGER_NAME = "paraformer_asr"


class RunFolder:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.plots = self.path / "plots"

    @classmethod
    def create(cls, cfg: Config) -> "RunFolder":
        stamp = time.strftime("%Y%m%d_%H%M%S")
        base = Path(cfg.run.output_dir) / f"{stamp}_{cfg.run.name}"
        path, suffix = base, 1
        while path.exists():
            suffix += 1
            path = base.with_name(f"{base.name}_{suffix}")
        folder = cls(path)
        folder.checkpoints.mkdir(parents=True)
        folder.plots.mkdir()
        save_config(cfg, folder.path / "config.yaml")
        return folder

    @property
    def run_id(self) -> str:
        return self.path.name

    def write_tokenizer(self, tokenizer_dict: dict) -> None:
        """``tokenizer.json`` (what checkpoints hold), and for subword units also ``tokenizer.model``, the
        sentencepiece model itself (readable by sentencepiece's own tools)."""
        (self.path / "tokenizer.json").write_text(json.dumps(tokenizer_dict, indent=1), encoding="utf-8")
        if "model" in tokenizer_dict:
            (self.path / "tokenizer.model").write_bytes(base64.b64decode(tokenizer_dict["model"]))

    def write_metrics(self, history: list[dict]) -> None:
        (self.path / "metrics.json").write_text(json.dumps(history, indent=2), encoding="utf-8")
        with open(self.path / "results.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=RESULTS_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            for row in history:
                writer.writerow(row)


def setup_logging(log_file: Path | None, quiet: bool = False) -> logging.Logger:
    """Log to stderr and (if given) the run's train.log; stdout stays free for the run path.
    ``quiet`` (non-main processes of a distributed run) keeps warnings only."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    console = logging.StreamHandler()
    console.setFormatter(formatter)
    logger.addHandler(console)
    if log_file is not None:
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setFormatter(formatter)
        logger.addHandler(file_handler)
    logger.propagate = False
    return logger
