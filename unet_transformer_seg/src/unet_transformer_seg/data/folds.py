"""k-fold cross-validation of a folder data set (`data.folds`, `data.fold`; `train.py --fold K --folds N`).

The pool is every labelled image outside the test split: ROOT/train and, when it exists, ROOT/val. Its images are
shuffled once with a fixed seed (`SPLIT_SEED`, not run.seed: every training seed sees the same folds) and dealt
round-robin into N folds, so fold sizes differ by at most one. Fold K validates, the other N - 1 train. The
assignment is written once to `run.output_dir/splits/<root name>_<N>folds.json` and read back by every later fold;
a pool whose images changed since is refused rather than silently re-split.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Sequence

import numpy as np

from ..errors import DataError

SPLIT_SEED = 0
POOLED_SPLITS = ("train", "val")


def deal_folds(stems: Sequence[str], folds: int, seed: int = SPLIT_SEED) -> List[List[str]]:
    """The stems of each fold (sorted within a fold): a seeded shuffle of the sorted stems, dealt round-robin."""
    if len(stems) < folds:
        raise DataError(f"{folds} folds need at least {folds} images outside the test split, found {len(stems)}")
    order = np.random.default_rng(seed).permutation(len(stems))
    ordered = sorted(stems)
    return [sorted(ordered[i] for i in order[fold::folds]) for fold in range(folds)]


def split_file(output_dir: str | Path, root: str | Path, folds: int) -> Path:
    return Path(output_dir) / "splits" / f"{Path(root).resolve().name}_{folds}folds.json"


def fold_stems(path: Path, stems: Sequence[str], folds: int) -> List[List[str]]:
    """The folds recorded at `path`, written there first if absent; a file that does not cover exactly `stems` is a
    DataError naming it."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        dealt = deal_folds(stems, folds)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"folds": folds, "seed": SPLIT_SEED, "validation": dealt}, indent=1))
        temporary.replace(path)  # atomic: several folds may start at once
        return dealt
    recorded = json.loads(path.read_text())["validation"]
    if len(recorded) != folds or sorted(s for fold in recorded for s in fold) != sorted(stems):
        raise DataError(f"split file {path} does not match the images of {len(stems)} stems in train + val now; "
                        f"delete it to split again (fold results made with it are then not comparable)")
    return recorded
