"""Plan a training config from a folder data set: read the training split once, write a config whose every `auto`
value is set by the data (docs/reference.md, "Planning from the data"), and print why.

    python scripts/plan.py DATA_ROOT [--out configs/my_data.yaml] [--template configs/folder.yaml]
                           [--memory-gib 2] [--class-names background,cell,nucleus] [--set section.key=value ...]

DATA_ROOT holds train/images, train/masks, val/... (the folder layout of the README). The written config is the
template with data.root set and each `auto` replaced; keys given with --set are kept as given and the rules use
them. Train with: python scripts/train.py --config OUT.
"""

import argparse
import sys
from pathlib import Path

import yaml

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.config import apply_overrides, config_from_dict, read_yaml
from unet_transformer_seg.errors import ConfigError

TEMPLATE = Path(__file__).resolve().parents[1] / "configs" / "folder.yaml"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="the data set's folder (ROOT/train/images, ROOT/train/masks, ...)")
    parser.add_argument("--out", help="write the planned config here (default: print it)")
    parser.add_argument("--template", default=str(TEMPLATE), help="config whose auto values are planned")
    parser.add_argument("--memory-gib", type=float, default=2.0, help="memory for training activations (GiB)")
    parser.add_argument("--class-names", help="comma-separated names, one per class id")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="fix one config value (parsed as YAML) before planning; repeatable")
    return parser.parse_args(argv)


def planned_mapping(raw: dict, cfg) -> dict:
    """The template's own keys (not every default) with the planned values."""
    return {section: {key: (getattr(getattr(cfg, section), key) if not isinstance(value, dict) else value)
                      for key, value in (values or {}).items()}
            for section, values in raw.items()}


def main() -> int:
    args = parse_args()
    if args.memory_gib <= 0:
        raise ConfigError(f"--memory-gib must be > 0, got {args.memory_gib}")
    overrides = [f"data.root={args.root}", *args.overrides]
    if args.class_names:
        names = [name.strip() for name in args.class_names.split(",")]
        overrides += [f"data.class_names={names}", f"data.num_classes={len(names)}"]
    raw = apply_overrides(read_yaml(args.template), overrides)
    from unet_transformer_seg.planning import plan_config  # torch is imported only once the config is valid
    from unet_transformer_seg.runtime import show_progress_bars

    cfg, table = plan_config(config_from_dict(raw), args.memory_gib, show_progress_bars())
    print(table, file=sys.stderr)
    text = "# planned by scripts/plan.py from " + args.root + "\n# " + table.replace("\n", "\n# ") + "\n"
    text += yaml.safe_dump(planned_mapping(raw, cfg), sort_keys=False)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        print(args.out)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    run_main(main)
