"""Evaluation over a whole split: loss at the training size, metrics at each image's original size."""

from __future__ import annotations

from typing import Dict, List, Optional

import torch

from ..config import Config
from ..data.datasets import SegmentationSplit, eval_collate
from ..data.transforms import resize_logits
from ..losses import LossFn, logits_to_labels
from ..metrics import ConfusionMatrix, scores_from_confusion
from .distributed import DistInfo, all_reduce_sum


def predict_full_size(logits: torch.Tensor, full_masks: List[torch.Tensor]) -> List[torch.Tensor]:
    """logits [B, K, S, S] -> one [H_i, W_i] label map per image, resizing logits back to each original size."""
    sizes = {tuple(mask.shape) for mask in full_masks}
    if sizes == {tuple(logits.shape[-2:])}:
        return list(logits_to_labels(logits))
    if len(sizes) == 1:
        return list(logits_to_labels(resize_logits(logits, sizes.pop())))
    return [
        logits_to_labels(resize_logits(logits[i : i + 1], tuple(mask.shape)))[0] for i, mask in enumerate(full_masks)
    ]


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    dataset: SegmentationSplit,
    cfg: Config,
    device: torch.device,
    loss_fn: LossFn,
    dist_info: Optional[DistInfo] = None,
    prediction_callback=None,
) -> Dict[str, object]:
    """Returns loss, mean_dice, mean_iou, pixel_accuracy, per_class_dice, per_class_iou, num_images.

    With several ranks each evaluates indices rank, rank + world, ... and the confusion matrices and loss sums are
    summed across ranks, so the metrics equal those of one process. `prediction_callback(index, labels)` receives
    every original-size prediction (used to save masks).
    """
    dist_info = dist_info or DistInfo()
    indices = list(range(dist_info.rank, len(dataset), dist_info.world_size))
    batches = [indices[i : i + cfg.train.eval_batch_size] for i in range(0, len(indices), cfg.train.eval_batch_size)]
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=batches, collate_fn=eval_collate, num_workers=cfg.train.num_workers
    )
    was_training = model.training
    model.eval()
    confusion = ConfusionMatrix(cfg.data.num_classes)
    loss_sum = torch.zeros(2, dtype=torch.float64)  # [sum of batch-mean losses * batch size, number of images]
    for batch_indices, (images, masks, full_masks) in zip(batches, loader):
        logits = model(images.to(device))  # [B, K, S, S]
        loss_sum += torch.tensor([float(loss_fn(logits, masks.to(device))) * len(batch_indices), len(batch_indices)],
                                 dtype=torch.float64)
        labels = predict_full_size(logits, full_masks)
        if len({tuple(mask.shape) for mask in full_masks}) == 1:
            confusion.update(torch.stack(labels), torch.stack(full_masks))
        else:
            for label_map, truth in zip(labels, full_masks):
                confusion.update(label_map, truth)
        if prediction_callback is not None:
            for index, label_map in zip(batch_indices, labels):
                prediction_callback(index, label_map.cpu())
    model.train(was_training)
    matrix = all_reduce_sum(confusion.matrix, dist_info)
    loss_sum = all_reduce_sum(loss_sum, dist_info)
    scores = scores_from_confusion(matrix)
    return {"loss": float(loss_sum[0] / loss_sum[1]), **scores, "num_images": int(loss_sum[1])}
