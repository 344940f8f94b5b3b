"""Train a model: python scripts/train.py --config configs/quick.yaml [--set train.lr=3e-4 ...] [--resume RUN_DIR]

Fine-tune a trained model on other data: python scripts/train.py --config NEW.yaml --init-from RUN_DIR_OR_CKPT
(the checkpoint's weights, tokenizer and normaliser; a new run folder, optimiser and schedule; docs/usage.md).

Several processes: torchrun --nproc_per_node=N scripts/train.py --config ... (train.batch_size is per process).

The last line printed to stdout is the run folder. User errors exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from paraformer_asr.cli import run_main
from paraformer_asr.config import load_config
from paraformer_asr.errors import ConfigError
from paraformer_asr.training.interrupts import TrainingInterrupted
from paraformer_asr.training.launch import RESUME_OR_INIT, train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value (parsed as YAML); repeatable")
    parser.add_argument("--resume", help="run folder or checkpoint to continue exactly where it stopped")
    parser.add_argument("--init-from", metavar="CHECKPOINT",
                        help="start a new run from this checkpoint's weights (a run folder: its best.pt)")
    args = parser.parse_args(argv)
    if args.resume and args.init_from:
        raise ConfigError(RESUME_OR_INIT)
    if args.resume:
        if args.config or args.overrides:
            raise ConfigError("--resume continues with the run's own config; do not combine it with --config/--set")
        cfg = None
    else:
        if not args.config:
            raise ConfigError("--config is required (or --resume RUN_DIR)")
        cfg = load_config(args.config, args.overrides)
    is_main = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 reports
    try:
        run_dir = train(cfg, resume=args.resume, init_from=args.init_from)
    except TrainingInterrupted as stop:
        if is_main:
            print(f"{stop}: saved {stop.run_dir / 'checkpoints' / 'last.pt'}; continue with: "
                  f"python scripts/train.py --resume {stop.run_dir}", file=sys.stderr)
            print(stop.run_dir)
        return 128 + stop.signum
    if is_main:
        print(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
