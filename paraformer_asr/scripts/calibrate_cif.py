"""Refit a Paraformer checkpoint's CIF calibration (the inference alpha scale) and write the result:

    python scripts/calibrate_cif.py --checkpoint RUN_DIR_OR_CKPT --out calibrated.pt [--split val|test]
        [--manifest FILE.jsonl] [--allow-test]

Training already refits the scale on the validation set at every epoch (train.calibrate_cif). Use this for a
checkpoint trained without it, for an averaged checkpoint, or to fit it on recordings of a new kind
(--manifest). The test split, the config's test manifest, or a manifest whose file name says test (test.jsonl,
test-clean.jsonl, numbers_test.jsonl) is refused unless --allow-test: the test scores would be in-sample for the scale. The checkpoint records the set (``calibrated_on``), and eval.py
warns when it scores that set. The result reads like any checkpoint: python scripts/eval.py --checkpoint calibrated.pt
"""

from __future__ import annotations

import argparse
import sys

from paraformer_asr.cli import run_main
from paraformer_asr.training.calibration import calibrate_checkpoint
from paraformer_asr.training.checkpointing import save_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint file or run folder")
    parser.add_argument("--out", required=True, help="where to write the calibrated checkpoint (.pt)")
    parser.add_argument("--split", choices=["val", "test"], default="val", help="the checkpoint's split to fit on")
    parser.add_argument("--manifest", help="fit on this JSON Lines manifest instead")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--allow-test", action="store_true",
                        help="fit on the test set even so (its scores then are in-sample for the scale)")
    args = parser.parse_args(argv)
    payload, old_scale, new_scale = calibrate_checkpoint(args.checkpoint, args.split, args.manifest, args.batch_size,
                                                     allow_test=args.allow_test)
    save_checkpoint(payload, args.out)
    print(f"alpha_scale {old_scale:.4f} -> {new_scale:.4f} ({payload['calibrated_on']['utterances']} utterances of "
          f"{payload['calibrated_on']['data']})", file=sys.stderr)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
