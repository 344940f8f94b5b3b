"""Train a segmentation model.

    python scripts/train.py --config configs/quick.yaml [--set section.key=value ...]
    python scripts/train.py --config configs/my_data.yaml --fold K --folds 5
    python scripts/train.py --resume RUN_DIR_OR_CHECKPOINT [--set train.epochs=20]
    torchrun --nproc_per_node=2 scripts/train.py --config ...

The last line on stdout is the run folder. With --resume the config stored in the checkpoint is used (plus --set).
--fold K --folds N trains fold K of N-fold cross-validation over a folder set's train + val images (data.fold,
data.folds; scripts/cross_validate.py trains them all).
"""

import argparse
import sys

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.config import apply_overrides, config_from_dict, load_config
from unet_transformer_seg.errors import ConfigError


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value (parsed as YAML); repeatable")
    parser.add_argument("--resume", metavar="RUN_DIR_OR_CKPT", help="continue from a run folder's last.pt or a file")
    parser.add_argument("--fold", type=int, help="cross-validation: the fold that validates (0..folds-1)")
    parser.add_argument("--folds", type=int, help="cross-validation: the number of folds")
    args = parser.parse_args(argv)
    if (args.fold is None) != (args.folds is None):
        parser.error("--fold and --folds go together")
    if args.fold is not None:
        args.overrides += [f"data.fold={args.fold}", f"data.folds={args.folds}"]
    return args


def main() -> int:
    args = parse_args()
    resume_state = resume_path = None
    if args.resume:
        from unet_transformer_seg.checkpointing import load_checkpoint, resolve_checkpoint_path

        if args.config:
            raise ConfigError("give either --config or --resume (a resumed run uses the config in its checkpoint)")
        resume_path = resolve_checkpoint_path(args.resume)
        resume_state = load_checkpoint(resume_path)
        cfg = config_from_dict(apply_overrides(resume_state["config"], args.overrides))
    else:
        if not args.config:
            raise ConfigError("--config is required (or --resume RUN_DIR)")
        cfg = load_config(args.config, args.overrides)
    from unet_transformer_seg.training.loop import train  # torch is imported only once the config is valid

    result = train(cfg, resume_state, resume_path)
    sys.stdout.flush()
    print(result.run_dir, flush=True)
    return 128 + int(result.stopped_by_signal) if result.stopped_by_signal else 0


if __name__ == "__main__":
    run_main(main)
