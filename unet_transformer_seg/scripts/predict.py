"""Segment images with a trained checkpoint, or an ensemble of several, and write, per image, a mask PNG (class ids),
an overlay PNG and, with --probabilities, the class probabilities.

    python scripts/predict.py --checkpoint runs/RUN/checkpoints/best.pt [MORE ...] INPUT [INPUT ...]
                              [--out-dir predictions] [--probabilities] [--tile-overlap 0.25] [--tile-batch N]
                              [--tta none|flip] [--device auto|cpu|cuda] [--backend torch|onnx] [--threads N]

An INPUT is an image file, a folder (its images, sorted) or a quoted glob pattern such as 'scans/**/*.tif' (expanded
here, sorted); an input that yields no image is an error naming it. --checkpoint takes checkpoints (files, run
folders, export directories) up to the first value that names images (a file with an image suffix, a pattern, a
folder that is neither a run folder nor an export directory); `--` ends the list as well. Several checkpoints predict
as their ensemble: the mean of the members' class probabilities (composed with --tta flip).

Images of any size are accepted and predicted at their own size, the way the model was trained (data.resize_mode:
resized to the training size and back, or sliding windows). STEM_mask.png is an indexed PNG whose pixel values are
the class ids and whose palette shows the classes in colour. --probabilities also writes STEM_probs.npy, float16
[K, H, W] with K = data.num_classes (a one-channel sigmoid model: background, foreground), summing to 1 over K.
--device picks where the model runs, whatever device it was trained on. With --backend onnx, --checkpoint names
directories written by scripts/export.py and onnxruntime runs their graphs on the CPU (same windows, flips and
outputs).
"""

import argparse
from pathlib import Path
from typing import List, Tuple

import numpy as np
from tqdm import tqdm

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.data.image_io import IMAGE_SUFFIXES, read_image, write_label_png, write_png
from unet_transformer_seg.deployment import SIDECAR_NAME, add_backend_arguments
from unet_transformer_seg.ensemble import load_ensemble
from unet_transformer_seg.errors import ConfigError
from unet_transformer_seg.inference import InferenceOptions, Segmenter, class_probabilities, image_paths, overlay
from unet_transformer_seg.labels import logits_to_labels
from unet_transformer_seg.runtime import show_progress_bars


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, nargs="+",
                        help="checkpoint file or run folder (--backend onnx: export directory); several: their "
                             "ensemble")
    parser.add_argument("inputs", nargs="*", metavar="INPUT",
                        help=f"image files ({', '.join(IMAGE_SUFFIXES)}), folders or quoted glob patterns")
    parser.add_argument("--out-dir", default="predictions", help="output folder (default: predictions)")
    parser.add_argument("--probabilities", action="store_true",
                        help="also write STEM_probs.npy: class probabilities, float16 [K, H, W]")
    InferenceOptions.add_arguments(parser)
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    args.checkpoint, args.inputs = split_checkpoints(args.checkpoint, args.inputs)
    return args


def names_images(value: str) -> bool:
    """True when a value given after --checkpoint names images rather than a checkpoint: a glob pattern, a file with
    an image suffix, or a folder that is neither a run folder nor an export directory."""
    path = Path(value)
    if path.is_dir():
        return not (path / "checkpoints").is_dir() and not (path / SIDECAR_NAME).is_file()
    return path.suffix.lower() in IMAGE_SUFFIXES or (not path.exists() and any(char in value for char in "*?["))


def split_checkpoints(values: List[str], inputs: List[str]) -> Tuple[List[str], List[str]]:
    """(checkpoints, inputs): the values of --checkpoint up to the first that names images, and the rest followed by
    the other inputs; no input at all is a ConfigError."""
    first_input = next((index for index, value in enumerate(values) if index > 0 and names_images(value)),
                       len(values))
    checkpoints, inputs = values[:first_input], values[first_input:] + inputs
    if not inputs:
        raise ConfigError("no input images: give image files, folders or glob patterns after the checkpoints "
                          "(predict.py --checkpoint CKPT [CKPT ...] INPUT [INPUT ...])")
    return checkpoints, inputs


def main() -> int:
    args = parse_args()
    options = InferenceOptions.from_arguments(args)
    model, cfg = load_ensemble(args.checkpoint, args.backend, args.threads, options.device)
    paths = image_paths(args.inputs)
    segmenter = Segmenter(model, cfg, options)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for image_path in tqdm(paths, desc="predict", unit="image", disable=not show_progress_bars()):
        image = read_image(image_path, cfg.data.in_channels)  # [C, H, W]
        logits = segmenter.image_logits(image)  # [1, K, H, W]
        labels = logits_to_labels(logits)[0].cpu()  # [H, W]
        written = [out_dir / f"{image_path.stem}_mask.png", out_dir / f"{image_path.stem}_overlay.png"]
        write_label_png(written[0], labels, cfg.data.num_classes)
        write_png(written[1], overlay(image, labels, cfg.data.num_classes))
        if args.probabilities:
            written.append(out_dir / f"{image_path.stem}_probs.npy")
            np.save(written[2], class_probabilities(logits)[0].cpu().numpy().astype(np.float16))  # [K, H, W]
        counts = {int(k): int(v) for k, v in zip(*labels.unique(return_counts=True))}
        tqdm.write(f"{image_path}: classes {counts} -> {', '.join(map(str, written))}")
    return 0


if __name__ == "__main__":
    run_main(main)
