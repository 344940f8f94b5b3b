"""From a trained model to predictions at each image's own size.

Geometry follows `data.resize_mode` (the way the model was trained):
- `resize`: the whole image is resized to S x S (S = data.image_size), the logits are resized back;
- `pad` and `random_crop`: sliding windows of S x S over the image at its own size (`tiling.py`); `random_crop`
  first scales an image with a side shorter than S up until it covers a window, as in training, and scales the
  logits back.

Logits at native size are materialised one image at a time, except for a batch of images that each fit in one
training-size window (then they are no larger than the model output the batch produced anyway).

Test-time augmentation `tta="flip"` (nnU-Net's mirroring): the model sees the image and its three mirror images
(horizontal flip, vertical flip, both); the four softmax (or sigmoid) probability maps, flipped back, are averaged.
Probabilities, not logits: they share a scale, so one over-confident view cannot outvote the others by logit
magnitude, and their mean is again a probability (as in model ensembling). The mean is turned back into logits
(log p, or log(p / (1 - p)) for one sigmoid channel), so that window blending, resizing, argmax and the loss treat
it like any other logits. An ensemble (`ensemble.EnsembleModel`) averages its members' probabilities the same way,
so the two compose: the mean over members and mirror images.

`Segmenter.segment` gives labels, `Segmenter.probabilities` per-class probabilities, both at the image's own size.
`image_paths` expands predict.py's inputs (files, folders, glob patterns) into image files.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .checks import install_nonfinite_hooks
from .choices import DEVICES, TTA_MODES
from .config import Config, config_from_dict
from .data.image_io import IMAGE_SUFFIXES, display_image
from .data.normalization import Normalization
from .data.transforms import cover_size, resize_image, resize_logits
from .errors import CheckpointError, ConfigError, DataError, ShapeError
from .labels import colour_labels, logits_to_labels
from .models import build_model
from .tiling import sliding_window_logits
from .checkpointing import load_checkpoint, resolve_checkpoint_path



@dataclass(frozen=True)
class InferenceOptions:
    """tile_overlap in [0, 1) and tile_batch (windows per forward pass, None: train.eval_batch_size) for the sliding
    windows of pad / random_crop models; tta: none | flip; device: auto | cpu | cuda."""

    tile_overlap: float = 0.25
    tile_batch: Optional[int] = None
    tta: str = "none"
    device: str = "auto"

    @staticmethod
    def add_arguments(parser) -> None:
        """The command-line flags of eval.py and predict.py: --tile-overlap, --tile-batch, --tta, --device."""
        parser.add_argument("--tile-overlap", type=float, default=0.25,
                            help="overlap of neighbouring windows, [0, 1) (pad / random_crop models)")
        parser.add_argument("--tile-batch", type=int, help="windows per forward pass (default: train.eval_batch_size)")
        parser.add_argument("--tta", default="none", choices=TTA_MODES,
                            help="flip: average over the image and its three mirror images")
        parser.add_argument("--device", default="auto", choices=DEVICES,
                            help="where the model runs, whatever device it was trained on (default: auto)")

    @classmethod
    def from_arguments(cls, args) -> "InferenceOptions":
        return cls(args.tile_overlap, args.tile_batch, args.tta, args.device)

    def __post_init__(self):
        if not 0.0 <= self.tile_overlap < 1.0:
            raise ConfigError(f"--tile-overlap must be in [0, 1), got {self.tile_overlap}")
        if self.tile_batch is not None and self.tile_batch < 1:
            raise ConfigError(f"--tile-batch must be >= 1, got {self.tile_batch}")
        if self.tta not in TTA_MODES:
            raise ConfigError(f"--tta must be one of {', '.join(TTA_MODES)}, got {self.tta!r}")
        if self.device not in DEVICES:
            raise ConfigError(f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}")


def sees_resized_images(cfg: Config) -> bool:
    """True when the model sees whole images resized to S x S (`data.resize_mode: resize`), False when it sees
    windows at the images' own size: the one place this is decided (`Segmenter`, `evaluation_split`)."""
    return cfg.data.resize_mode == "resize"


def load_trained_model(checkpoint: str | Path, device: str | torch.device = "cpu") -> Tuple[torch.nn.Module, Config]:
    """Model in eval mode on `device` and its config, from a checkpoint file or a run folder (its last.pt); with
    `run.debug_checks` in the config, NaN/Inf hooks on every module."""
    path = resolve_checkpoint_path(checkpoint)
    state = load_checkpoint(path)
    try:
        cfg = config_from_dict(state["config"])
    except ConfigError as exc:
        raise CheckpointError(f"checkpoint {path} holds an invalid config: {exc}") from None
    model = build_model(cfg)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        raise CheckpointError(f"checkpoint {path} weights do not fit its config: {exc}") from None
    if cfg.run.debug_checks:
        install_nonfinite_hooks(model)
    return model.to(device).eval(), cfg


def model_device(model: torch.nn.Module) -> torch.device:
    """Where a model's inputs go: its parameters' device; the CPU for a model without parameters (an exported graph
    run by onnxruntime, `deployment.OnnxModel`)."""
    parameter = next(model.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


def logits_to_probabilities(logits: torch.Tensor) -> torch.Tensor:
    """[B, K, H, W] logits -> probabilities of the same shape: softmax over K (K > 1) or sigmoid (K = 1)."""
    if logits.shape[1] == 1:
        return torch.sigmoid(logits)
    return torch.softmax(logits, dim=1)


def class_probabilities(logits: torch.Tensor) -> torch.Tensor:
    """[B, K, H, W] logits -> [B, N, H, W] probabilities of the N classes, summing to 1 over N: the softmax (K = N),
    or (1 - p, p) for one sigmoid channel p (K = 1, N = 2)."""
    probabilities = logits_to_probabilities(logits.float())
    if probabilities.shape[1] == 1:
        return torch.cat([1 - probabilities, probabilities], dim=1)
    return probabilities


def probabilities_to_logits(probabilities: torch.Tensor) -> torch.Tensor:
    """[B, K, H, W] probabilities -> logits with those probabilities: log p (K > 1) or log(p / (1 - p)) (K = 1)."""
    if probabilities.shape[1] == 1:
        return torch.logit(probabilities, eps=1e-7)
    return probabilities.clamp(min=torch.finfo(probabilities.dtype).tiny).log()


MIRRORS = ((), (-1,), (-2,), (-2, -1))  # identity, horizontal, vertical, both: each its own inverse


def flip_tta_logits(model: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    """images [B, C, H, W] -> logits [B, K, H, W] of the mean probabilities over the four mirror images."""
    batch = images.shape[0]
    views = torch.cat([images.flip(dims) if dims else images for dims in MIRRORS])  # [4B, C, H, W]
    probabilities = logits_to_probabilities(model(views).float()).split(batch)  # 4 x [B, K, H, W]
    restored = [view.flip(dims) if dims else view for view, dims in zip(probabilities, MIRRORS)]
    return probabilities_to_logits(torch.stack(restored).mean(dim=0))


class Segmenter:
    """Predicts logits at each image's own size with a trained model (eval mode, no gradients): a PyTorch module, an
    exported graph (`deployment.OnnxModel`) or an ensemble of either (`ensemble.EnsembleModel`), through the same
    windows, flips and resizing."""

    def __init__(self, model: torch.nn.Module, cfg: Config, options: InferenceOptions = InferenceOptions()):
        self.model, self.cfg, self.options = model, cfg, options
        self.window = cfg.data.image_size
        self.resizes_input = sees_resized_images(cfg)  # images come resized to S x S (else at their own size)
        self.tile_batch = options.tile_batch or cfg.train.eval_batch_size
        self.alignment = 2**cfg.model.depth
        self.device = model_device(model)
        self.normalization = Normalization.from_config(cfg.data)

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """[n, C, S', S'] normalised -> logits [n, K, S', S'] float32, with the configured test-time augmentation."""
        images = images.to(self.device)
        if self.options.tta == "flip":
            return flip_tta_logits(self.model, images)
        return self.model(images).float()

    @torch.no_grad()
    def native_logits(self, images: torch.Tensor, size: Tuple[int, int]) -> Iterator[Tuple[slice, torch.Tensor]]:
        """images [B, C, h, w] normalised (S x S when `resizes_input`, else the images' own size), all of one original
        size (H0, W0) -> yields (which images, logits [b, K, H0, W0]): the whole batch at once when the logits at
        native size are no larger than the model's output anyway (resized: H0 * W0 <= S * S; windows: both sides of
        the images, after `random_crop`'s scale-up, <= S, one window each), else one image at a time."""
        batch = images.shape[0]
        together = size[0] * size[1] <= self.window * self.window
        if self.resizes_input:
            if tuple(images.shape[-2:]) != (self.window, self.window):
                raise ShapeError(f"a model trained with data.resize_mode: resize takes images resized to "
                                 f"{self.window} x {self.window}, got {tuple(images.shape[-2:])}")
            logits = torch.cat([self.predict(images[start : start + self.tile_batch])
                                for start in range(0, batch, self.tile_batch)])  # [B, K, S, S]
            groups = [slice(0, batch)] if together else [slice(i, i + 1) for i in range(batch)]
            for rows in groups:
                yield rows, resize_logits(logits[rows], size)
            return
        if self.cfg.data.resize_mode == "random_crop":
            images = resize_image(images, cover_size(*size, self.window))  # [B, C, h, w], both sides >= S
        fits_one_window = max(images.shape[-2:]) <= self.window
        groups = [slice(0, batch)] if fits_one_window else [slice(i, i + 1) for i in range(batch)]
        for rows in groups:
            logits = sliding_window_logits(self.predict, images[rows].to(self.device), self.window,
                                           self.options.tile_overlap, self.tile_batch, self.alignment)
            yield rows, resize_logits(logits, size)

    def image_logits(self, image: torch.Tensor) -> torch.Tensor:
        """image [C, H0, W0] as read (not normalised) -> logits [1, K, H0, W0] float32 at the same size."""
        size = tuple(image.shape[-2:])
        model_input = self.normalization(image)
        if self.resizes_input:
            model_input = resize_image(model_input, (self.window, self.window))
        (_, logits), = self.native_logits(model_input[None], size)
        return logits

    def segment(self, image: torch.Tensor) -> torch.Tensor:
        """image [C, H0, W0] as read (not normalised) -> labels [H0, W0] int64 at the same size."""
        return logits_to_labels(self.image_logits(image))[0].cpu()

    def probabilities(self, image: torch.Tensor) -> torch.Tensor:
        """image [C, H0, W0] as read (not normalised) -> class probabilities [N, H0, W0] float32 at the same size,
        summing to 1 over the N = data.num_classes classes (`class_probabilities`)."""
        return class_probabilities(self.image_logits(image))[0].cpu()


def image_paths(inputs: Sequence[str]) -> List[Path]:
    """predict.py's inputs -> image files, in order and without repeats: a file as it is; a folder: its files with an
    image suffix (IMAGE_SUFFIXES), sorted; a glob pattern (`*`, `?`, `[...]`, `**` recursive): its matching files with
    an image suffix, sorted. An input that yields no image, and two images with one stem (their outputs would
    collide), are a DataError naming them."""
    found: Dict[Path, None] = {}
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            paths = _image_files(sorted(path.iterdir()))
        elif path.is_file():
            paths = [path]
        elif any(char in given for char in "*?["):
            paths = _image_files(map(Path, sorted(glob.glob(given, recursive=True))))
        else:
            raise DataError(f"input not found: {given}")
        if not paths:
            raise DataError(f"no image ({', '.join('*' + s for s in IMAGE_SUFFIXES)}) matches the input {given}")
        found.update(dict.fromkeys(paths))
    by_stem: Dict[str, Path] = {}
    for path in found:
        if path.stem in by_stem:
            raise DataError(f"{by_stem[path.stem]} and {path} share the stem '{path.stem}': their outputs would "
                            f"overwrite each other; predict them into separate --out-dir folders")
        by_stem[path.stem] = path
    return list(found)


def _image_files(paths: Iterable[Path]) -> List[Path]:
    """The files among `paths` with an image suffix, in the given order."""
    return [path for path in paths if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES]


def overlay(image: torch.Tensor, labels: torch.Tensor, num_classes: int, alpha: float = 0.5) -> np.ndarray:
    """image [C, H, W] (as read), labels [H, W] -> [H, W, 3] uint8: class colours blended over the image."""
    base = display_image(image).permute(1, 2, 0).numpy()  # [H, W, 3] in [0, 1]
    colours = colour_labels(labels, num_classes).astype(np.float32) / 255.0  # [H, W, 3]
    foreground = (labels.numpy() > 0)[..., None]
    blended = np.where(foreground, (1 - alpha) * base + alpha * colours, base)
    return (blended * 255).round().astype(np.uint8)
