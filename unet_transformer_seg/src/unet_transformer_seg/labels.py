"""Class-id conventions shared by data, losses, metrics and inference.

- Masks are int64 class ids `0..N-1` (0 = background). A pixel that no loss term and no metric may look at holds
  `IGNORE_LABEL` (-1): the mask reader maps `data.ignore_index` (e.g. VOC's void 255) to it, and the padding that
  `data.resize_mode: pad` and the sliding window add is filled with it. -1 is never a class id, so this works whether
  or not `data.ignore_index` is set.
- Predictions are class ids too: `logits_to_labels` turns logits into them.
- `class_names` gives each class id a name for reports: `data.class_names`, the toy set's, else class_0, class_1, ...
- `class_colours` gives each class id a display colour (masks written as indexed PNGs, overlays, plots);
  `colour_labels` paints a label map with them.
"""

from __future__ import annotations

from typing import List

import numpy as np
import torch

IGNORE_LABEL = -1
TOY_CLASS_NAMES = ("background", "circle", "square", "triangle")

# matplotlib's "tab10" colours, written out so that image files never depend on a plotting library
TAB10 = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
)


def _voc_colour(class_id: int) -> tuple:
    """PASCAL VOC's colour map: the bits of the id spread over the high bits of r, g, b (distinct for every id)."""
    red = green = blue = 0
    for shift in range(7, -1, -1):
        red |= ((class_id >> 0) & 1) << shift
        green |= ((class_id >> 1) & 1) << shift
        blue |= ((class_id >> 2) & 1) << shift
        class_id >>= 3
    return red, green, blue


def class_names(data) -> List[str]:
    """One name per class id from a DataConfig: `data.class_names` when set, the toy set's names, else class_<id>."""
    if data.class_names is not None:
        return list(data.class_names)
    if data.kind == "toy":
        return ["background", "shape"] if data.binary else list(TOY_CLASS_NAMES)
    return [f"class_{class_id}" for class_id in range(data.num_classes)]


def class_colours(num_classes: int) -> np.ndarray:
    """[K, 3] uint8 display colours, all distinct: class 0 black, classes 1..10 tab10, the rest VOC's colour map."""
    colours = [(0, 0, 0)] + [TAB10[k - 1] if k <= len(TAB10) else _voc_colour(k) for k in range(1, num_classes)]
    return np.array(colours, dtype=np.uint8)


def colour_labels(labels: torch.Tensor, num_classes: int) -> np.ndarray:
    """[H, W] class ids (or IGNORE_LABEL) -> [H, W, 3] uint8 `class_colours`, ignored pixels white."""
    ids = labels.cpu().numpy()
    colours = class_colours(num_classes)[np.clip(ids, 0, None)]
    colours[ids == IGNORE_LABEL] = 255
    return colours


def logits_to_labels(logits: torch.Tensor) -> torch.Tensor:
    """[B, K, H, W] -> [B, H, W] int64: argmax over K, or logit > 0 when K == 1 (sigmoid models)."""
    if logits.shape[1] == 1:
        return (logits[:, 0] > 0).long()
    return logits.argmax(dim=1)
