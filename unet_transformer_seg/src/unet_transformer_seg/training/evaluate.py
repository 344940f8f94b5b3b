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
from typing import Callable, Dict, List, Optional, Sequence

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
PER_CLASS_METRICS = ("dice", "iou", "hd95")


@dataclass
class Evaluation:
    scores: Dict[str, object]  # loss, num_images and SegmentationScores.compute()
    rows: List[Dict[str, object]] = field(default_factory=list)  # one per image when asked for


def evaluation_split(cfg: Config, split: str, root: Optional[str] = None) -> SegmentationSplit:
    """The split as evaluation needs it: images resized to S x S in the data workers when the model sees them so
    (resize mode), else at their own size."""
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


def per_class_report(scores: Dict[str, object], names: Sequence[str]) -> Dict[str, Dict[str, object]]:
    """{class name: {dice, iou, hd95}} from the summary's per_class_dice / per_class_iou / per_class_hd95 lists."""
    return {name: {metric: scores[f"per_class_{metric}"][class_id] for metric in PER_CLASS_METRICS}
            for class_id, name in enumerate(names)}


def write_per_image_csv(path: Path, rows: List[Dict[str, object]], names: Sequence[str]) -> None:
    """stem, height, width, pixel_accuracy, then dice_NAME, iou_NAME, hd95_NAME per class (NAME: the class name of
    `labels.class_names`); empty cells where undefined."""
    renamed = {f"{metric}_{class_id}": f"{metric}_{name}"
               for class_id, name in enumerate(names) for metric in PER_CLASS_METRICS}
    named_rows = [{renamed.get(key, key): value for key, value in row.items()} for row in rows]
    write_csv(path, named_rows, ["stem", "height", "width", "pixel_accuracy", *renamed.values()])
