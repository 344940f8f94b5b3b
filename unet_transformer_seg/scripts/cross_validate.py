"""k-fold cross-validation: plan the config once (its `auto` values), train every fold, report each fold's best
validation Dice with their mean and spread, and the checkpoints to ensemble.

    python scripts/cross_validate.py --config configs/my_data.yaml [--folds 5] [--out runs/cv_my_data]
                                     [--set section.key=value ...]

Folds split the folder set's train + val images (data/folds.py); the test split is never read here. OUT gets
folds.csv (fold, run folder, best val mean Dice, its step) and summary.json (mean, sample std, the best fold by
validation Dice, every fold's best.pt), rewritten after each fold. Run it again with the same --out after a crash or
Ctrl-C: finished folds are kept, the interrupted one is resumed from its last.pt. Then evaluate the ensemble of all
folds on the test split:  python scripts/eval.py --checkpoint $(cat OUT/checkpoints.txt) --split test
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.config import config_from_dict, config_to_dict, load_config
from unet_transformer_seg.errors import ConfigError

COLUMNS = ("fold", "run_dir", "best_val_mean_dice", "best_step")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="YAML config of a folder data set")
    parser.add_argument("--folds", type=int, default=5, help="number of folds (default 5)")
    parser.add_argument("--out", help="summary folder (default: run.output_dir/cv_<run.name>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value (parsed as YAML); repeatable")
    return parser.parse_args(argv)


def best_row(run_dir: Path) -> dict:
    """The validation row of the run's best.pt: the first with the highest val mean Dice (as training picks it)."""
    history = json.loads((run_dir / "metrics.json").read_text())
    best = max(history, key=lambda row: row["val_mean_dice"] if row["val_mean_dice"] is not None else -1.0)
    return {"best_val_mean_dice": best["val_mean_dice"], "best_step": best["step"]}


def summarise(rows: list) -> dict:
    scores = [row["best_val_mean_dice"] for row in rows]
    best = max(rows, key=lambda row: row["best_val_mean_dice"])
    return {"folds": len(rows), "mean_val_mean_dice": statistics.fmean(scores),
            "std_val_mean_dice": statistics.stdev(scores) if len(scores) > 1 else 0.0,
            "best_fold": best["fold"], "best_fold_checkpoint": f"{best['run_dir']}/checkpoints/best.pt",
            "checkpoints": [f"{row['run_dir']}/checkpoints/best.pt" for row in rows], "per_fold": rows}


def write_summary(out: Path, rows: list) -> dict:
    from unet_transformer_seg.training.run_folder import write_csv, write_json

    summary = summarise(rows)
    write_csv(out / "folds.csv", rows, COLUMNS)
    write_json(out / "summary.json", summary)
    (out / "checkpoints.txt").write_text(" ".join(summary["checkpoints"]) + "\n")
    return summary


def main() -> int:
    args = parse_args()
    if args.folds < 2:
        raise ConfigError(f"--folds must be >= 2, got {args.folds}")
    cfg = load_config(args.config, args.overrides)
    if cfg.data.kind != "folder":
        raise ConfigError("cross-validation splits a folder data set: set data.kind: folder and data.root")
    out = Path(args.out or Path(cfg.run.output_dir) / f"cv_{cfg.run.name}")
    out.mkdir(parents=True, exist_ok=True)
    from unet_transformer_seg.planning import plan_config  # torch is imported only once the config is valid
    from unet_transformer_seg.checkpointing import load_checkpoint
    from unet_transformer_seg.runtime import show_progress_bars
    from unet_transformer_seg.training.loop import train

    cfg, table = plan_config(cfg, show_progress=show_progress_bars())  # once: every fold trains the same plan
    if table:
        print(f"auto values planned from the data:\n{table}", file=sys.stderr)
    done = json.loads((out / "summary.json").read_text())["per_fold"] if (out / "summary.json").is_file() else []
    rows = [row for row in done if row["fold"] < args.folds]
    for fold in range(len(rows), args.folds):
        raw = config_to_dict(cfg)
        raw["data"].update(fold=fold, folds=args.folds)
        raw["run"]["name"] = f"{cfg.run.name}_fold{fold}"
        pending = out / f"fold{fold}.run"  # the run folder of a fold under way, for a resume after a crash
        last = Path(pending.read_text().strip()) / "checkpoints" / "last.pt" if pending.is_file() else None
        if last is not None and last.is_file():
            state = load_checkpoint(last)
            result = train(config_from_dict(state["config"]), state, last)
        else:
            result = train(config_from_dict(raw), on_run_dir=lambda run_dir: pending.write_text(f"{run_dir}\n"))
        if result.stopped_by_signal:
            print(f"stopped during fold {fold}; run the same command again to resume it", file=sys.stderr)
            return 128 + int(result.stopped_by_signal)
        rows.append({"fold": fold, "run_dir": str(result.run_dir), **best_row(result.run_dir)})
        write_summary(out, rows)
        pending.unlink(missing_ok=True)
        print(f"fold {fold}: best val mean Dice {rows[-1]['best_val_mean_dice']:.4f} ({result.run_dir})",
              file=sys.stderr)
    summary = write_summary(out, rows)
    print(f"{args.folds}-fold val mean Dice {summary['mean_val_mean_dice']:.4f} +- {summary['std_val_mean_dice']:.4f} "
          f"(best fold {summary['best_fold']}); ensemble: python scripts/eval.py --checkpoint "
          f"$(cat {out}/checkpoints.txt) --split test", file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    run_main(main)
