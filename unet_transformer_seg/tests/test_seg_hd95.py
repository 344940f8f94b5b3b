"""HD95 against hand-computed cases and a brute-force reference that measures every pair of boundary pixels."""

import math

import pytest
import torch

from unet_transformer_seg.labels import IGNORE_LABEL
from unet_transformer_seg.metrics.hausdorff import grouped_percentile, hd95_per_class

from seg_reference import hd95_reference, percentile_reference


def square(height, width, top, left, side, class_id=1):
    labels = torch.zeros(height, width, dtype=torch.long)
    labels[top : top + side, left : left + side] = class_id
    return labels


def test_identical_regions_have_zero_distance_and_absent_classes_none():
    labels = square(10, 12, 2, 3, 4)[None]
    hd95 = hd95_per_class(labels, labels, 3)
    assert hd95[0, 0].item() == 0.0 and hd95[0, 1].item() == 0.0
    assert math.isnan(hd95[0, 2].item())  # class 2 absent from both


def test_shifted_square_hand_computed():
    # a 4x4 square (12 boundary pixels) moved 3 pixels right, so the two share one column: from each boundary to the
    # other the distances are 0 (x4, the shared column), 1, 1, 2, 2 (top and bottom rows) and 3 (x4, the far column);
    # sorted, the 95th percentile sits at position 0.95 * 11 = 10.45, between two 3s: HD95 = 3
    truth = square(10, 14, 3, 2, 4)[None]
    pred = square(10, 14, 3, 5, 4)[None]
    expected = hd95_reference(pred[0], truth[0], 1)
    assert hd95_per_class(pred, truth, 2)[0, 1].item() == pytest.approx(expected)
    assert expected == pytest.approx(3.0)


def test_class_on_one_side_only_gets_the_image_diagonal():
    truth = square(6, 8, 1, 1, 2)[None]
    pred = torch.zeros_like(truth)
    assert hd95_per_class(pred, truth, 2)[0, 1].item() == pytest.approx(math.hypot(6, 8))
    assert hd95_per_class(truth, pred, 2)[0, 1].item() == pytest.approx(10.0)


def test_ignored_pixels_belong_to_no_class():
    truth = square(8, 8, 2, 2, 4)
    truth[:, 6:] = IGNORE_LABEL
    pred = square(8, 8, 2, 2, 4)
    pred[:, 6:] = 1  # predictions in the void region do not count
    assert hd95_per_class(pred[None], truth[None], 2)[0, 1].item() == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_matches_the_brute_force_reference_on_random_masks(seed):
    generator = torch.Generator().manual_seed(seed)
    height, width = (int(v) for v in torch.randint(3, 24, (2,), generator=generator))
    target = torch.randint(-1, 3, (2, height, width), generator=generator)
    pred = torch.randint(0, 3, (2, height, width), generator=generator)
    pred[0] = (torch.rand(height, width, generator=generator) > 0.8).long()  # sparse, far-apart points
    hd95 = hd95_per_class(pred, target, 3)
    for image in range(2):
        for class_id in range(3):
            expected = hd95_reference(pred[image], target[image], class_id)
            value = hd95[image, class_id].item()
            assert (math.isnan(expected) and math.isnan(value)) or value == pytest.approx(expected), (image, class_id)


def test_grouped_percentile_matches_the_written_out_percentile():
    values = torch.tensor([5.0, 1.0, 3.0, 2.0, 8.0, 4.0, 7.0])
    groups = torch.tensor([0, 0, 0, 2, 2, 2, 2])
    result = grouped_percentile(values, groups, 3, 0.95)
    assert result[0].item() == pytest.approx(percentile_reference([5.0, 1.0, 3.0], 0.95))
    assert math.isnan(result[1].item())
    assert result[2].item() == pytest.approx(percentile_reference([2.0, 8.0, 4.0, 7.0], 0.95))
