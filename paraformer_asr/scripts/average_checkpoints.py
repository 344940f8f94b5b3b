"""Average the weights of a run's best checkpoints into one checkpoint:

    python scripts/average_checkpoints.py RUN_DIR --best N --out averaged.pt

RUN_DIR must have been trained with train.keep_best >= N (it keeps checkpoints/best_epoch{E}.pt of its N best
epochs by validation CER). A Paraformer's CIF scale is not averaged: it is refitted on the validation set for the
averaged weights. The result reads like any checkpoint: python scripts/eval.py --checkpoint averaged.pt
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paraformer_asr.cli import run_main
from paraformer_asr.training.averaging import average_checkpoints, kept_best_checkpoints, refit_calibration
from paraformer_asr.training.checkpointing import save_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="run folder")
    parser.add_argument("--best", type=int, required=True, help="how many of the best checkpoints to average")
    parser.add_argument("--out", required=True, help="where to write the averaged checkpoint (.pt)")
    args = parser.parse_args(argv)
    payload = average_checkpoints(kept_best_checkpoints(args.run, args.best))
    scale = refit_calibration(payload, Path(args.out))
    save_checkpoint(payload, args.out)
    for source in payload["averaged_from"]:
        print(f"averaged {source['file']} (epoch {source['epoch']}, val CER {source['val_cer']})",
              file=sys.stderr)
    if scale is not None:
        print(f"alpha_scale refitted on the validation set: {scale:.4f}", file=sys.stderr)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
