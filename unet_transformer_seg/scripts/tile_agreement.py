"""How far sliding-window prediction agrees with whole-image prediction, for a checkpoint trained on windows
(data.resize_mode pad or random_crop) on the toy set: label agreement and pixel accuracy of both on toy test images
of SIZE x SIZE whose shapes keep the pixel size of training.

    python scripts/tile_agreement.py --checkpoint runs/RUN [--size 160] [--images 16] [--tile-overlap 0.25]
                                     [--device auto|cpu|cuda]

Prints JSON: label_agreement (share of pixels with the same class), foreground_agreement (the same share among the
pixels that either way calls an object: the toy images are mostly background), max_abs_logit_difference, and
pixel_accuracy_tiled / pixel_accuracy_whole against the true masks. docs/architecture.md says where the two agree
exactly (plain U-Net with BatchNorm, away from window borders) and docs/history.md lists measured agreements.
"""

import argparse
import json

import torch
import torch.nn.functional as F

from unet_transformer_seg.cli import run_main
from unet_transformer_seg.data.toy_shapes import ToyShapesDataset
from unet_transformer_seg.errors import ConfigError
from unet_transformer_seg.inference import InferenceOptions, Segmenter, load_trained_model
from unet_transformer_seg.labels import logits_to_labels
from unet_transformer_seg.runtime import resolve_device
from unet_transformer_seg.tiling import padded_size


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint file or run folder (toy data, pad mode)")
    parser.add_argument("--size", type=int, default=160, help="side of the square test images (default 160)")
    parser.add_argument("--images", type=int, default=16, help="number of test images (default 16)")
    parser.add_argument("--tile-overlap", type=float, default=0.25, help="overlap of neighbouring windows")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    return parser.parse_args(argv)


@torch.no_grad()
def whole_image_logits(model: torch.nn.Module, image: torch.Tensor, alignment: int) -> torch.Tensor:
    """image [C, H, W] normalised -> logits [K, H, W] of one forward pass over the whole image (zero-padded to a
    multiple of `alignment`, the padding cropped off)."""
    height, width = image.shape[-2:]
    padded_h, padded_w = padded_size(height, width, 1, alignment)
    batch = F.pad(image, (0, padded_w - width, 0, padded_h - height))[None]  # [1, C, Hp, Wp]
    return model(batch)[0, :, :height, :width].float()


def main() -> int:
    args = parse_args()
    if args.size < 1 or args.images < 1:
        raise ConfigError(f"--size and --images must be >= 1, got {args.size} and {args.images}")
    model, cfg = load_trained_model(args.checkpoint, resolve_device(args.device, "--device"))
    if cfg.data.kind != "toy" or cfg.data.resize_mode == "resize":
        raise ConfigError("tile_agreement.py needs a checkpoint trained on the toy set with data.resize_mode pad or "
                          f"random_crop, got kind {cfg.data.kind!r}, resize_mode {cfg.data.resize_mode!r}")
    segmenter = Segmenter(model, cfg, InferenceOptions(tile_overlap=args.tile_overlap))
    data = cfg.data
    images = ToyShapesDataset(args.images, data.image_size, cfg.run.seed, "test", data.in_channels, data.binary,
                              data.max_shapes, data.noise_std, sizes=[(args.size, args.size)],
                              shape_size=data.image_size)
    totals = torch.zeros(6, dtype=torch.float64)  # [agreeing, tiled correct, whole correct, pixels,
    #                                                 agreeing foreground, foreground either way]
    largest_difference = 0.0
    for image, truth in images:
        normalised = segmenter.normalization(image).to(segmenter.device)  # [C, S', S']
        (_, tiled), = segmenter.native_logits(normalised[None], tuple(image.shape[-2:]))  # [1, K, S', S']
        whole = whole_image_logits(model, normalised, segmenter.alignment)  # [K, S', S']
        tiled_labels, whole_labels = logits_to_labels(tiled)[0].cpu(), logits_to_labels(whole[None])[0].cpu()
        agreeing, foreground = tiled_labels == whole_labels, (tiled_labels > 0) | (whole_labels > 0)  # [S', S']
        totals += torch.tensor([agreeing.sum(), (tiled_labels == truth).sum(), (whole_labels == truth).sum(),
                                truth.numel(), (agreeing & foreground).sum(), foreground.sum()], dtype=torch.float64)
        largest_difference = max(largest_difference, float((tiled[0] - whole).abs().max()))
    report = {"model_type": cfg.model.type, "norm": cfg.model.norm, "window": data.image_size, "size": args.size,
              "images": args.images, "tile_overlap": args.tile_overlap,
              "label_agreement": float(totals[0] / totals[3]),
              "foreground_agreement": float(totals[4] / totals[5].clamp(min=1)),
              "max_abs_logit_difference": largest_difference,
              "pixel_accuracy_tiled": float(totals[1] / totals[3]), "pixel_accuracy_whole": float(totals[2] / totals[3])}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    run_main(main)
