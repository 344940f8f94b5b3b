import math

import pytest
import torch
import torch.nn.functional as F

from unet_transformer_seg.losses import (
    bce_dice_loss, binary_cross_entropy_loss, binary_dice_loss, build_loss, ce_dice_loss, logits_to_labels,
    soft_dice_loss,
)
from unet_transformer_seg.metrics import ConfusionMatrix, confusion_matrix, scores_from_confusion

from seg_reference import confusion_reference

BIG = 30.0  # logit gap that makes softmax/sigmoid one-hot to float precision


def one_hot_logits(labels, num_classes):
    return F.one_hot(labels, num_classes).permute(0, 3, 1, 2).float() * BIG


def test_soft_dice_hand_computed():
    # one image, two pixels, two classes; probabilities p(class 1) = [0.5, 0.5] via zero logits
    logits = torch.zeros(1, 2, 1, 2)
    target = torch.tensor([[[1, 1]]])
    # class 0: I = 0, |P| = 1, |G| = 0 -> (0 + 1) / (1 + 0 + 1) = 0.5
    # class 1: I = 1, |P| = 1, |G| = 2 -> (2 + 1) / (1 + 2 + 1) = 0.75
    assert soft_dice_loss(logits, target).item() == pytest.approx(1 - (0.5 + 0.75) / 2)


def test_perfect_prediction_gives_zero_dice_loss_and_empty_masks_give_no_nan():
    labels = torch.tensor([[[0, 1], [2, 0]]])
    assert soft_dice_loss(one_hot_logits(labels, 4), labels).item() == pytest.approx(0.0, abs=1e-6)
    empty = torch.zeros(2, 3, 3, dtype=torch.long)
    for name in ("dice", "ce_dice"):
        value = build_loss(name)(torch.zeros(2, 4, 3, 3), empty)
        assert math.isfinite(value.item())
    for name in ("bce", "bce_dice"):
        value = build_loss(name)(torch.zeros(2, 1, 3, 3), empty)
        assert math.isfinite(value.item())
    assert binary_dice_loss(torch.full((1, 1, 2, 2), -BIG), torch.zeros(1, 2, 2, dtype=torch.long)).item() == \
        pytest.approx(0.0, abs=1e-6)


def test_binary_losses_hand_computed():
    logits = torch.zeros(1, 1, 1, 2)  # sigmoid = 0.5
    target = torch.tensor([[[1, 0]]])
    assert binary_cross_entropy_loss(logits, target).item() == pytest.approx(math.log(2))
    # I = 0.5, |P| = 1, |G| = 1 -> (1 + 1) / (2 + 1)
    assert binary_dice_loss(logits, target).item() == pytest.approx(1 - 2 / 3)
    assert bce_dice_loss(logits, target).item() == pytest.approx(math.log(2) + 1 - 2 / 3)


def test_ce_dice_is_the_sum():
    logits, target = torch.randn(2, 3, 4, 4), torch.randint(0, 3, (2, 4, 4))
    expected = F.cross_entropy(logits, target) + soft_dice_loss(logits, target)
    assert ce_dice_loss(logits, target).item() == pytest.approx(expected.item())


def test_logits_to_labels():
    logits = torch.tensor([[[[1.0, -1.0]], [[0.0, 2.0]]]])
    assert logits_to_labels(logits).tolist() == [[[0, 1]]]
    assert logits_to_labels(torch.tensor([[[[0.3, -0.2]]]])).tolist() == [[[1, 0]]]


def test_confusion_matrix_matches_the_loop_reference():
    pred, target = torch.randint(0, 4, (3, 7, 5)), torch.randint(0, 4, (3, 7, 5))
    assert torch.equal(confusion_matrix(pred, target, 4), confusion_reference(pred, target, 4))


def test_scores_hand_computed():
    target = torch.tensor([0, 0, 1, 1, 1, 2])
    pred = torch.tensor([0, 1, 1, 1, 0, 0])
    scores = scores_from_confusion(confusion_matrix(pred, target, 4))
    # class 1: TP 2, FP 1, FN 1 -> IoU 2/4, Dice 4/6. class 2: TP 0, FP 0, FN 1 -> 0, 0. class 3 absent -> None
    assert scores["per_class_iou"][1:] == [pytest.approx(0.5), 0.0, None]
    assert scores["per_class_dice"][1:] == [pytest.approx(2 / 3), 0.0, None]
    assert scores["mean_iou"] == pytest.approx(0.25)
    assert scores["mean_dice"] == pytest.approx(1 / 3)
    assert scores["pixel_accuracy"] == pytest.approx(3 / 6)
    # class 0: TP 1, FP 2, FN 1 -> IoU 1/4 (not in the means)
    assert scores["per_class_iou"][0] == pytest.approx(0.25)


def test_metrics_do_not_depend_on_batch_size():
    pred, target = torch.randint(0, 3, (10, 6, 6)), torch.randint(0, 3, (10, 6, 6))
    results = []
    for batch_size in (1, 3, 10):
        accumulator = ConfusionMatrix(3)
        for start in range(0, 10, batch_size):
            accumulator.update(pred[start : start + batch_size], target[start : start + batch_size])
        results.append(accumulator.compute())
    assert results[0] == results[1] == results[2]
