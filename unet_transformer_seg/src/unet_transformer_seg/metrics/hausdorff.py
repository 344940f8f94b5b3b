"""HD95: the 95th-percentile Hausdorff distance between predicted and true class regions, in pixels, vectorised.

Convention (MONAI's `compute_hausdorff_distance(percentile=95)` where both regions exist):
- The boundary of a class region is its pixels with a 4-neighbour outside it (erosion with a cross, as scipy's and
  MONAI's default); pixels beyond the image border and ignored pixels count as outside.
- For every boundary pixel of the prediction, the Euclidean distance to the nearest boundary pixel of the truth, and
  the other way round. HD95 = max(95th percentile of the first set, 95th percentile of the second), percentiles with
  linear interpolation (as `torch.quantile` / `numpy.percentile`).
- A class absent from both truth and prediction has no HD95 (NaN; left out of every mean). A class present on one
  side only gets the image diagonal sqrt(H^2 + W^2), the largest distance the image allows (MONAI returns inf or
  NaN there; a bounded worst case keeps means finite and still penalises a missed or invented class).

How, without a loop over pixels, classes or images: boundary pixels of every class at once are the labelled pixels
with a differently labelled 4-neighbour; each becomes a point (group = image * N + class, row, column). The target
points are sorted by (group, column, row) and by (group, row, column), so `searchsorted` finds a query's nearest
target point on any one column or row. The nearest point on the query's own column or row bounds the answer, so only
columns x' with |x - x'| <= that bound can hold the nearest point; queries are grouped by the bound (rounded up to a
power of two) and each group searches that window of columns, in chunks. The result is exact.
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F

from ..labels import IGNORE_LABEL

PERCENTILE = 0.95
CHUNK_ELEMENTS = 1 << 22  # query points x candidate columns per chunk of the distance search


def boundary_points(labels: torch.Tensor, num_classes: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """labels [B, H, W] int64 (IGNORE_LABEL = no class) -> boundary points of every class region:
    (group [P] = image * num_classes + class, row [P], column [P])."""
    padded = F.pad(labels, (1, 1, 1, 1), value=IGNORE_LABEL)  # [B, H+2, W+2]: outside the image is no class
    inner = padded[:, 1:-1, 1:-1]
    differs = ((padded[:, :-2, 1:-1] != inner) | (padded[:, 2:, 1:-1] != inner)
               | (padded[:, 1:-1, :-2] != inner) | (padded[:, 1:-1, 2:] != inner))
    image, row, column = (differs & (labels != IGNORE_LABEL)).nonzero(as_tuple=True)
    return image * num_classes + labels[image, row, column], row, column


class LineIndex:
    """Target points sorted by (group, line, position along the line), to find the nearest one on a given line.

    With lines = columns and positions = rows it answers "nearest target point in this column"; with lines = rows
    and positions = columns, "in this row".
    """

    def __init__(self, group: torch.Tensor, line: torch.Tensor, position: torch.Tensor, num_lines: int,
                 length: int, far: int):
        self.num_lines, self.length, self.far = num_lines, length, far
        self.codes = torch.sort((group * num_lines + line) * length + position).values  # [P]

    def gap(self, group: torch.Tensor, line: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """Distance along `line` from `position` to the nearest target point of `group` on it; `far` if none.
        Inputs of any (equal) shape; output int64 of that shape."""
        if self.codes.numel() == 0:
            return torch.full_like(position, self.far)
        line_start = (group * self.num_lines + line) * self.length  # code of position 0 on that line
        code = line_start + position
        after_index = torch.searchsorted(self.codes, code)  # first target code >= code
        last = self.codes.numel() - 1
        after = self.codes[after_index.clamp(max=last)]
        before = self.codes[(after_index - 1).clamp(min=0)]
        far = torch.full_like(code, self.far)
        gap_after = torch.where((after_index <= last) & (after < line_start + self.length), after - code, far)
        gap_before = torch.where((after_index > 0) & (before >= line_start), code - before, far)
        return torch.minimum(gap_after, gap_before)


def nearest_distances(group: torch.Tensor, row: torch.Tensor, column: torch.Tensor,
                      targets: Tuple[torch.Tensor, torch.Tensor, torch.Tensor], height: int,
                      width: int) -> torch.Tensor:
    """Euclidean distance [P] float64 from each query point (group, row, column) to the nearest target point of its
    own group (targets = (group, row, column) of the target points); H + W + 1 where the group has none."""
    far = height + width + 1
    by_column = LineIndex(targets[0], targets[2], targets[1], width, height, far)
    by_row = LineIndex(targets[0], targets[1], targets[2], height, width, far)
    distances = torch.zeros(group.numel(), dtype=torch.float64, device=group.device)
    # the nearest point in the query's own column or row bounds the answer: search columns within that bound
    bound = torch.minimum(by_column.gap(group, column, row), by_row.gap(group, row, column)).clamp(max=width - 1)
    radius_class = torch.ceil(torch.log2(bound.double().clamp(min=1))).long()  # half-width 2**class >= bound
    for level in radius_class.unique().tolist():
        radius = min(2**level, width - 1)
        members = (radius_class == level).nonzero(as_tuple=True)[0]
        offsets = torch.arange(-radius, radius + 1, device=group.device)  # [2r+1]
        chunk = max(1, CHUNK_ELEMENTS // offsets.numel())
        for start in range(0, members.numel(), chunk):
            picked = members[start : start + chunk]  # [m]
            columns = (column[picked, None] + offsets).clamp(0, width - 1)  # [m, 2r+1]
            gaps = by_column.gap(group[picked, None].expand_as(columns), columns, row[picked, None].expand_as(columns))
            squared = ((columns - column[picked, None]).square() + gaps.square()).min(dim=1).values  # [m]
            distances[picked] = squared.double().sqrt()
    return distances


def grouped_percentile(values: torch.Tensor, groups: torch.Tensor, num_groups: int, q: float) -> torch.Tensor:
    """q-quantile (linear interpolation) of `values` [P] within each group id [P] -> [num_groups], NaN if empty."""
    nan = torch.full((num_groups,), float("nan"), dtype=torch.float64, device=values.device)
    if values.numel() == 0:
        return nan
    by_value = torch.argsort(values, stable=True)
    by_group = torch.argsort(groups[by_value], stable=True)
    ordered = values[by_value][by_group].double()  # sorted by group, then by value
    counts = torch.bincount(groups, minlength=num_groups)  # [G]
    starts = torch.cumsum(counts, 0) - counts
    position = (counts - 1).clamp(min=0).double() * q
    low, high = position.floor().long(), position.ceil().long()
    last = ordered.numel() - 1
    low_value = ordered[(starts + low).clamp(max=last)]
    high_value = ordered[(starts + high).clamp(max=last)]
    quantile = low_value + (high_value - low_value) * (position - low.double())
    return torch.where(counts > 0, quantile, nan)


def hd95_per_class(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """pred, target [B, H, W] int64 (target may hold IGNORE_LABEL) -> HD95 [B, N] float64 in pixels (NaN: class
    absent from both). Ignored pixels belong to no class, in the prediction as in the truth."""
    batch, height, width = target.shape
    groups = batch * num_classes
    pred = torch.where(target != IGNORE_LABEL, pred, torch.full_like(pred, IGNORE_LABEL))
    pred_points, true_points = boundary_points(pred, num_classes), boundary_points(target, num_classes)
    pred_to_true = nearest_distances(*pred_points, true_points, height, width)
    true_to_pred = nearest_distances(*true_points, pred_points, height, width)
    forward = grouped_percentile(pred_to_true, pred_points[0], groups, PERCENTILE)  # [B*N]
    backward = grouped_percentile(true_to_pred, true_points[0], groups, PERCENTILE)
    has_pred = torch.bincount(pred_points[0], minlength=groups) > 0
    has_true = torch.bincount(true_points[0], minlength=groups) > 0
    one_sided = torch.full_like(forward, math.hypot(height, width))
    hd95 = torch.where(has_pred & has_true, torch.maximum(forward, backward), one_sided)
    hd95 = torch.where(has_pred | has_true, hd95, torch.full_like(hd95, float("nan")))
    return hd95.view(batch, num_classes)
