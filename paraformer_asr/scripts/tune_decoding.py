"""Choose a Paraformer checkpoint's decoding on its validation set and write it into a checkpoint:

    python scripts/tune_decoding.py --checkpoint RUN_DIR_OR_CKPT --out tuned.pt [--split val | --manifest FILE.jsonl]
        [--table grid.md] [--length-candidates K] [--length-penalty A] [--phrase-candidates | --no-phrase-candidates]

Every setting of a small grid (greedy; length candidates with count priors 0, 0.3 and 1; beam search with a token
n-gram LM of weight 0.3, 1 or 2 over length candidates with the same priors; for a model with a CTC head, the
candidates always scored by it too; training/tuning.py) decodes the split. One-pass greedy stays unless another
setting has a quarter fewer character errors (and 0.1 points); else, of the settings within 0.1 CER points of the
lowest, the one with the lowest WER becomes the checkpoint's ``decode`` config section, which eval.py, infer.py and
serve.py then use by default. Training does the same at its end with ``decode.tune: true``. --manifest chooses on
another set instead, a selection set of the recordings the model is for (other voices, real people); the test
split, the config's test manifest and a manifest whose file name says test are refused.
The length candidates are N +- 1..K (the CTC extractor: its greedy path under K blank offsets either way), K from
--length-candidates, else the checkpoint's decode section (a tuned checkpoint holds the spread it was tuned with),
else training/tuning.py's ``DEFAULT_SPREAD``. Every setting ranks hypotheses of different lengths with the length
penalty A (the summed score divided by the token count to the power A), from --length-penalty, else the checkpoint's
decode section; the settings with length candidates score the training transcripts whole beside them with
--phrase-candidates, not with --no-phrase-candidates, else as the checkpoint's decode section says.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paraformer_asr.cli import run_main
from paraformer_asr.training.tuning import DEFAULT_SPREAD, grid_table, tune_checkpoint
from paraformer_asr.training.checkpointing import save_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint file or run folder")
    parser.add_argument("--out", required=True, help="where to write the checkpoint with the chosen decoding (.pt)")
    parser.add_argument("--split", choices=["val"], default="val",
                        help="the split to choose on (the validation set: the test set would be in-sample)")
    parser.add_argument("--manifest", help="choose on this JSON Lines manifest instead (a selection set, not a test set)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--table", help="also write the grid's scores as a Markdown table here")
    parser.add_argument("--length-candidates", type=int, default=None, metavar="K",
                        help="the spread of the length candidates the grid tries (default: the checkpoint's "
                             f"decode.length_candidates, else {DEFAULT_SPREAD})")
    parser.add_argument("--length-penalty", type=float, default=None, metavar="A",
                        help="the length penalty every setting ranks its hypotheses with (default: the checkpoint's "
                             "decode.length_penalty)")
    parser.add_argument("--phrase-candidates", action=argparse.BooleanOptionalAction, default=None,
                        help="score the training transcripts whole beside the length candidates' hypotheses in every "
                             "setting that has them (default: the checkpoint's decode.phrase_candidates)")
    args = parser.parse_args(argv)
    payload, best, rows = tune_checkpoint(args.checkpoint, args.split, args.batch_size,
                                          spread=args.length_candidates, manifest=args.manifest,
                                          length_penalty=args.length_penalty,
                                          phrase_candidates=args.phrase_candidates)
    save_checkpoint(payload, args.out)
    table = grid_table(rows)
    if args.table:
        Path(args.table).write_text(table, encoding="utf-8")
    print(table, file=sys.stderr)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
