"""Which classes the training windows show: per class, its share of the training pixels, the share of windows that
contain it and the share centred on it, for the windows `data.resize_mode: pad | random_crop` cuts.

    python scripts/window_stats.py --config configs/my_data.yaml [--draws 20] [--set section.key=value ...]

Each training mask gets `--draws` window origins from `transforms.window_origin` with the config's
`data.foreground_fraction` (`auto` values are planned first), seeded by run.seed; images are not read.
"""

import argparse

import numpy as np
import torch

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.config import load_config
from unet_transformer_seg.data.datasets import base_dataset
from unet_transformer_seg.data.transforms import pad_to_cover, window_origin
from unet_transformer_seg.errors import ConfigError
from unet_transformer_seg.labels import IGNORE_LABEL, class_names
from unet_transformer_seg.planning import plan_config


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--draws", type=int, default=20, help="windows per training mask")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    cfg, _ = plan_config(load_config(args.config, args.overrides))
    if cfg.data.resize_mode == "resize":
        raise ConfigError("data.resize_mode: resize shows whole images; there are no windows to count")
    size, classes = cfg.data.image_size, cfg.data.num_classes
    masks = base_dataset(cfg, "train")
    rng = np.random.default_rng(cfg.run.seed)
    pixels, contained, centred, windows = np.zeros(classes), np.zeros(classes), np.zeros(classes), 0
    for index in range(len(masks)):
        mask = masks.read_mask(index)  # [H, W]
        pixels += torch.bincount(mask[mask != IGNORE_LABEL], minlength=classes).numpy()
        mask = pad_to_cover(mask[None].float(), mask, size)[1]  # [H', W'] >= size a side
        for _ in range(args.draws):
            top, left = window_origin(mask, size, rng, cfg.data.foreground_fraction)
            window = mask[top : top + size, left : left + size]
            present = torch.unique(window[window != IGNORE_LABEL])
            contained[present.numpy()] += 1
            centre = int(window[size // 2, size // 2])
            if centre != IGNORE_LABEL:
                centred[centre] += 1
            windows += 1
    print(f"{windows} windows of {size} x {size}, foreground_fraction {cfg.data.foreground_fraction}")
    print(f"{'class':<16} {'pixels':>8} {'in window':>10} {'centred':>8}")
    for class_id, name in enumerate(class_names(cfg.data)):
        print(f"{name:<16} {pixels[class_id] / pixels.sum():>8.2%} {contained[class_id] / windows:>10.2%} "
              f"{centred[class_id] / windows:>8.2%}")
    return 0


if __name__ == "__main__":
    run_main(main)
