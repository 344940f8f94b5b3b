"""Evaluation over a whole split at each image's original size: loss, pooled and per-image metrics, predictions.

Images are batched by size (`size_grouped_batches`: at most train.eval_batch_size images and at most
train.eval_batch_size * S * S pixels per batch); the Segmenter turns each batch into logits at the original size,
one image at a time unless the images are no larger than a training window. The loss reported (`val_loss` in training,
`loss` of eval.py) is `validation_loss`: train.loss without class weights, of each such group of logits against the
original masks, averaged with the group's number of images.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from ..config import Config
from ..data.datasets import SegmentationSplit, build_split, eval_collate, size_grouped_batches
from ..data.image_io import write_label_png, write_png
from ..inference import InferenceOptions, Segmenter, overlay, sees_resized_images
from ..labels import logits_to_labels
from ..losses import build_loss
from ..metrics import SegmentationScores
from .distributed import DistInfo, all_reduce_sum
from .run_folder import write_csv

PredictionCallback = Callable[[int, torch.Tensor], None]  # (dataset index, labels [H0, W0] int64 on the CPU)


@dataclass
class Evaluation:
    scores: Dict[str, object]  # loss, num_images and SegmentationScores.compute()
    rows: List[Dict[str, object]] = field(default_factory=list)  # one per image when asked for


def evaluation_split(cfg: Config, split: str, options: InferenceOptions = InferenceOptions(),
                     root: Optional[str] = None) -> SegmentationSplit:
    """The split as evaluation needs it: images resized to S x S in the data workers when the model sees them so
    (resize mode), else at their own size."""
    options.check_model(cfg)
    return build_split(cfg, split, train=False, root=root, resize_for_eval=sees_resized_images(cfg))


def validation_loss(cfg: Config) -> torch.nn.Module:
    """The one loss evaluation reports: `train.loss` with `train.dice_include_background`, without
    `train.class_weights` (so runs that weigh classes differently report losses on one scale) and without the
    deep-supervision terms (an eval-mode model has no auxiliary outputs)."""
    return build_loss(cfg.train.loss, dice_include_background=cfg.train.dice_include_background)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    dataset: SegmentationSplit,
    cfg: Config,
    dist_info: Optional[DistInfo] = None,
    options: InferenceOptions = InferenceOptions(),
    prediction_callback: Optional[PredictionCallback] = None,
    keep_rows: bool = False,
) -> Evaluation:
    """Evaluate `model` on `dataset` (made by `evaluation_split` with the same options).

    With several ranks each evaluates indices rank, rank + world, ... and every counter is summed across ranks, so
    the scores equal those of one process (rows stay per rank). `prediction_callback(index, labels)` receives every
    original-size prediction (used to save masks). The loss is `validation_loss(cfg)`.
    """
    dist_info = dist_info or DistInfo()
    loss_fn = validation_loss(cfg)
    segmenter = Segmenter(model, cfg, options)
    if dataset.transform.resize_for_eval != segmenter.resizes_input:
        raise ValueError("evaluate needs a split made by evaluation_split for this config (images resized to S x S "
                         "exactly when the model sees them so)")
    sizes = {index: dataset.size_of(index) for index in range(dist_info.rank, len(dataset), dist_info.world_size)}
    batch_size = cfg.train.eval_batch_size
    batches = size_grouped_batches(sizes, batch_size, batch_size * cfg.data.image_size**2)
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=batches, collate_fn=eval_collate, num_workers=cfg.train.num_workers
    )
    was_training = model.training
    model.eval()
    scores = SegmentationScores(cfg.data.num_classes, keep_rows)
    loss_sum = torch.zeros(2, dtype=torch.float64)  # [sum of group-mean losses * group size, number of images]
    for batch_indices, (images, masks) in zip(batches, loader):
        for rows, logits in segmenter.native_logits(images, tuple(masks.shape[-2:])):  # logits [b, K, H0, W0]
            indices = batch_indices[rows]
            truth = masks[rows]  # [b, H0, W0]
            loss = float(loss_fn(logits, truth.to(logits.device)))
            loss_sum += torch.tensor([loss * len(indices), len(indices)], dtype=torch.float64)
            labels = logits_to_labels(logits).cpu()  # [b, H0, W0]
            scores.update(labels, truth, [dataset.name(index) for index in indices] if keep_rows else None)
            if prediction_callback is not None:
                for index, label_map in zip(indices, labels):
                    prediction_callback(index, label_map)
    model.train(was_training)
    scores.reduce(lambda counter: all_reduce_sum(counter, dist_info))
    loss_sum = all_reduce_sum(loss_sum, dist_info)
    summary = {"loss": float(loss_sum[0] / loss_sum[1]), **scores.compute(), "num_images": int(loss_sum[1])}
    return Evaluation(summary, scores.rows)


def prediction_writer(out_dir: Path, dataset: SegmentationSplit, num_classes: int) -> PredictionCallback:
    """A prediction callback writing STEM.png (indexed: pixel = class id) and STEM_overlay.png into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)

    def write(index: int, labels: torch.Tensor) -> None:
        stem = dataset.name(index)
        write_label_png(out_dir / f"{stem}.png", labels, num_classes)
        write_png(out_dir / f"{stem}_overlay.png", overlay(dataset.base[index][0], labels, num_classes))

    return write


def write_per_image_csv(path: Path, rows: List[Dict[str, object]], num_classes: int) -> None:
    """stem, height, width, pixel_accuracy, then dice_k, iou_k, hd95_k per class; empty cells where undefined."""
    columns = ["stem", "height", "width", "pixel_accuracy"] + [
        f"{metric}_{class_id}" for class_id in range(num_classes) for metric in ("dice", "iou", "hd95")]
    write_csv(path, rows, columns)
