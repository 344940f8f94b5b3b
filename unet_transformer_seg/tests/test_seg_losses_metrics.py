import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from unet_transformer_seg.labels import IGNORE_LABEL, logits_to_labels
from unet_transformer_seg.losses import (
    binary_cross_entropy_loss, binary_dice_loss, build_loss, cross_entropy_loss, soft_dice_loss,
)
from unet_transformer_seg.metrics import SegmentationScores, per_image_confusion, scores_from_confusion
from unet_transformer_seg.losses import auto_class_weights

from seg_reference import confusion_reference, per_image_confusion_reference

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
    assert soft_dice_loss(logits, target, include_background=False).item() == pytest.approx(1 - 0.75)


def test_perfect_prediction_gives_zero_dice_loss_and_empty_masks_give_no_nan():
    labels = torch.tensor([[[0, 1], [2, 0]]])
    assert soft_dice_loss(one_hot_logits(labels, 4), labels).item() == pytest.approx(0.0, abs=1e-6)
    empty = torch.zeros(2, 3, 3, dtype=torch.long)
    for name in ("dice", "ce_dice"):
        assert math.isfinite(build_loss(name)(torch.zeros(2, 4, 3, 3), empty).item())
    for name in ("bce", "bce_dice"):
        assert math.isfinite(build_loss(name)(torch.zeros(2, 1, 3, 3), empty).item())
    assert binary_dice_loss(torch.full((1, 1, 2, 2), -BIG), torch.zeros(1, 2, 2, dtype=torch.long)).item() == \
        pytest.approx(0.0, abs=1e-6)


def test_binary_losses_hand_computed():
    logits = torch.zeros(1, 1, 1, 2)  # sigmoid = 0.5
    target = torch.tensor([[[1, 0]]])
    assert binary_cross_entropy_loss(logits, target).item() == pytest.approx(math.log(2))
    # I = 0.5, |P| = 1, |G| = 1 -> (1 + 1) / (2 + 1)
    assert binary_dice_loss(logits, target).item() == pytest.approx(1 - 2 / 3)
    assert build_loss("bce_dice")(logits, target).item() == pytest.approx(math.log(2) + 1 - 2 / 3)
    # weights [1, 3]: (3 * log 2 + 1 * log 2) / (3 + 1) = log 2; with logits 0 and 2 the pixels differ
    weighted = binary_cross_entropy_loss(torch.tensor([[[[0.0, 2.0]]]]), target, torch.tensor([1.0, 3.0]))
    expected = (3 * math.log(2) + 1 * math.log(1 + math.exp(2))) / 4
    assert weighted.item() == pytest.approx(expected)


def test_ce_dice_is_the_sum_and_dice_include_background_switch():
    logits, target = torch.randn(2, 3, 4, 4), torch.randint(0, 3, (2, 4, 4))
    expected = F.cross_entropy(logits, target) + soft_dice_loss(logits, target)
    assert build_loss("ce_dice")(logits, target).item() == pytest.approx(expected.item())
    without_background = build_loss("ce_dice", dice_include_background=False)(logits, target)
    expected = F.cross_entropy(logits, target) + soft_dice_loss(logits, target, include_background=False)
    assert without_background.item() == pytest.approx(expected.item())


def test_class_weights_weigh_cross_entropy_like_pytorch():
    logits, target = torch.randn(2, 3, 5, 5), torch.randint(0, 3, (2, 5, 5))
    weights = torch.tensor([0.2, 1.0, 3.0])
    assert cross_entropy_loss(logits, target, weights).item() == pytest.approx(
        F.cross_entropy(logits, target, weight=weights).item())
    loss = build_loss("ce", class_weights=[0.2, 1.0, 3.0])
    assert loss(logits, target).item() == pytest.approx(F.cross_entropy(logits, target, weight=weights).item())
    assert list(loss.class_weights) == pytest.approx([0.2, 1.0, 3.0])  # a buffer, moved by .to(device)
    assert "class_weights" in dict(loss.named_buffers())


@pytest.mark.parametrize("name, channels", [("ce", 3), ("dice", 3), ("ce_dice", 3), ("bce", 1), ("bce_dice", 1)])
def test_ignored_pixels_count_in_no_loss_term(name, channels):
    torch.manual_seed(0)
    logits = torch.randn(2, channels, 6, 6, requires_grad=True)
    target = torch.randint(0, 2 if channels == 1 else 3, (2, 6, 6))
    target[:, :, 4:] = IGNORE_LABEL  # the two right columns are void
    loss_fn = build_loss(name, class_weights=[0.5, 2.0] if channels == 1 else [0.5, 1.0, 2.0])
    loss = loss_fn(logits, target)
    # the same loss on the valid 6x4 region alone
    assert loss.item() == pytest.approx(loss_fn(logits[..., :4], target[..., :4]).item(), rel=1e-6)
    changed = logits.detach().clone()
    changed[..., 4:] = 100.0 * torch.randn_like(changed[..., 4:])
    assert loss_fn(changed, target).item() == pytest.approx(loss.item(), rel=1e-6)
    loss.backward()
    assert torch.count_nonzero(logits.grad[..., 4:]) == 0


@pytest.mark.parametrize("name, channels", [("ce", 3), ("ce_dice", 3), ("bce_dice", 1)])
def test_a_batch_of_ignored_pixels_gives_zero_loss_and_finite_gradients(name, channels):
    logits = torch.randn(1, channels, 4, 4, requires_grad=True)
    target = torch.full((1, 4, 4), IGNORE_LABEL)
    loss = build_loss(name, class_weights=[1.0, 2.0] if channels == 1 else None)(logits, target)
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(logits.grad).all()


def test_logits_to_labels():
    logits = torch.tensor([[[[1.0, -1.0]], [[0.0, 2.0]]]])
    assert logits_to_labels(logits).tolist() == [[[0, 1]]]
    assert logits_to_labels(torch.tensor([[[[0.3, -0.2]]]])).tolist() == [[[1, 0]]]


def test_confusion_matrices_match_the_loop_references():
    pred, target = torch.randint(0, 4, (3, 7, 5)), torch.randint(-1, 4, (3, 7, 5))
    valid = target != IGNORE_LABEL
    matrices = per_image_confusion(pred, target, 4)
    assert torch.equal(matrices, per_image_confusion_reference(pred, target, 4))
    assert torch.equal(matrices.sum(0), confusion_reference(pred[valid], target[valid], 4))


def test_scores_hand_computed():
    target = torch.tensor([[[0, 0, 1, 1, 1, 2, IGNORE_LABEL]]])
    pred = torch.tensor([[[0, 1, 1, 1, 0, 0, 3]]])
    scores = scores_from_confusion(per_image_confusion(pred, target, 4)[0])
    # class 1: TP 2, FP 1, FN 1 -> IoU 2/4, Dice 4/6. class 2: TP 0, FP 0, FN 1 -> 0, 0. class 3 absent -> None
    # (the ignored pixel predicted as 3 does not count)
    assert scores["per_class_iou"][1:] == [pytest.approx(0.5), 0.0, None]
    assert scores["per_class_dice"][1:] == [pytest.approx(2 / 3), 0.0, None]
    assert scores["mean_iou"] == pytest.approx(0.25)
    assert scores["mean_dice"] == pytest.approx(1 / 3)
    assert scores["pixel_accuracy"] == pytest.approx(3 / 6)
    # class 0: TP 1, FP 2, FN 1 -> IoU 1/4 (not in the means)
    assert scores["per_class_iou"][0] == pytest.approx(0.25)


def test_per_image_dice_hand_computed():
    # image 0: class 1 perfect (Dice 1), class 2 predicted but absent from truth (Dice 0) -> mean 0.5
    # image 1: class 1 TP 1, FP 1, FN 1 -> Dice 0.5; class 2 absent from both (left out)   -> mean 0.5
    target = torch.tensor([[[1, 1, 0, 0]], [[1, 1, 0, 0]]])
    pred = torch.tensor([[[1, 1, 2, 0]], [[1, 0, 1, 0]]])
    scores = SegmentationScores(3, keep_rows=True)
    scores.update(pred, target, ["a", "b"])
    result = scores.compute()
    assert result["mean_dice_per_image"] == pytest.approx(0.5)
    assert result["mean_iou_per_image"] == pytest.approx(((1 + 0) / 2 + 1 / 3) / 2)
    # pooled: class 1 TP 3, FP 1, FN 1 -> 6/8; class 2 TP 0, FP 1 -> 0
    assert result["mean_dice"] == pytest.approx((6 / 8 + 0) / 2)
    row_a, row_b = scores.rows
    assert (row_a["stem"], row_a["height"], row_a["width"]) == ("a", 1, 4)
    assert row_a["dice_1"] == 1.0 and row_a["dice_2"] == 0.0 and row_b["pixel_accuracy"] == 0.5
    assert math.isnan(row_b["dice_2"]) and math.isnan(row_b["hd95_2"])


def dice_iou_reference(pred: np.ndarray, target: np.ndarray, num_classes: int):
    """Per class from one-hot sets, ignored pixels removed first: Dice 2|A n B| / (|A| + |B|), IoU |A n B| / |A u B|,
    NaN for a class in neither. Arrays of any equal shape; the sets are over all their pixels."""
    valid = target != IGNORE_LABEL
    pred, target = pred[valid], target[valid]
    dice, iou = np.full(num_classes, np.nan), np.full(num_classes, np.nan)
    for class_id in range(num_classes):
        truth, guess = target == class_id, pred == class_id
        both, sizes = np.sum(truth & guess), np.sum(truth) + np.sum(guess)
        if sizes:
            dice[class_id] = 2 * both / sizes
            iou[class_id] = both / np.sum(truth | guess)
    return dice, iou


def random_labels(rng: np.random.Generator, batch=4, height=9, width=7):
    """pred, target [B, H, W]: each image draws from a few of the classes 0..4 (5 never occurs, 4 now and then), and
    a fifth of the targets are ignored."""
    def draw():
        classes = rng.choice(5, size=rng.integers(1, 4), replace=False)
        return rng.choice(classes, size=(height, width))
    target = np.stack([draw() for _ in range(batch)])
    target[rng.random(target.shape) < 0.2] = IGNORE_LABEL
    pred = np.stack([draw() for _ in range(batch)])
    pred[0] = np.where(target[0] == IGNORE_LABEL, pred[0], target[0])  # one perfect image
    return pred, target


def _as_list(values: np.ndarray):
    return [None if math.isnan(v) else pytest.approx(v) for v in values]


@pytest.mark.parametrize("seed", range(6))
def test_pooled_and_per_image_dice_and_iou_match_a_one_hot_reference(seed):
    num_classes = 6
    pred, target = random_labels(np.random.default_rng(seed))
    scores = SegmentationScores(num_classes, keep_rows=True)
    scores.update(torch.as_tensor(pred), torch.as_tensor(target), [f"image{i}" for i in range(len(pred))])
    result = scores.compute()
    # pooled: the sets over every pixel of the batch
    dice, iou = dice_iou_reference(pred, target, num_classes)
    assert np.isnan(dice[5]) and np.isnan(iou[5])  # a class absent from both sides: no score
    assert result["per_class_dice"] == _as_list(dice) and result["per_class_iou"] == _as_list(iou)
    assert result["mean_dice"] == pytest.approx(np.nanmean(dice[1:]))
    assert result["mean_iou"] == pytest.approx(np.nanmean(iou[1:]))
    valid = target != IGNORE_LABEL
    assert result["pixel_accuracy"] == pytest.approx(np.mean(pred[valid] == target[valid]))
    # per image: the mean over the foreground classes defined in that image, then over the images defining one
    image_means = {"dice": [], "iou": []}
    for image, row in enumerate(scores.rows):
        image_dice, image_iou = dice_iou_reference(pred[image], target[image], num_classes)
        for class_id in range(num_classes):
            for name, values in (("dice", image_dice), ("iou", image_iou)):
                if np.isnan(values[class_id]):
                    assert math.isnan(row[f"{name}_{class_id}"]), (image, name, class_id)
                else:
                    assert row[f"{name}_{class_id}"] == pytest.approx(values[class_id]), (image, name, class_id)
        for name, values in (("dice", image_dice), ("iou", image_iou)):
            if not np.isnan(values[1:]).all():
                image_means[name].append(np.nanmean(values[1:]))
    perfect = [value for value in (scores.rows[0][f"dice_{c}"] for c in range(num_classes)) if not math.isnan(value)]
    assert perfect and perfect == [1.0] * len(perfect)  # the image predicted exactly
    assert result["mean_dice_per_image"] == pytest.approx(np.mean(image_means["dice"]))
    assert result["mean_iou_per_image"] == pytest.approx(np.mean(image_means["iou"]))


def test_classes_absent_from_both_sides_are_left_out_of_the_means():
    # only background and class 2 occur; classes 1 and 3 are absent from truth and prediction alike
    target = torch.tensor([[[0, 0, 2, 2]]])
    pred = torch.tensor([[[0, 2, 2, 2]]])
    scores = SegmentationScores(4, keep_rows=True)
    scores.update(pred, target)
    result = scores.compute()
    assert result["per_class_dice"] == [pytest.approx(2 / 3), None, pytest.approx(0.8), None]
    assert result["mean_dice"] == pytest.approx(0.8)  # not (0 + 0.8 + 0) / 3, nor (1 + 0.8 + 1) / 3
    assert result["mean_dice_per_image"] == pytest.approx(0.8)
    assert math.isnan(scores.rows[0]["dice_1"]) and math.isnan(scores.rows[0]["iou_3"])
    # an image where no foreground class occurs at all defines no per-image score and leaves the mean alone
    scores.update(torch.zeros(1, 1, 4, dtype=torch.long), torch.zeros(1, 1, 4, dtype=torch.long))
    assert scores.compute()["mean_dice_per_image"] == pytest.approx(0.8)


def test_metrics_do_not_depend_on_batch_size():
    pred, target = torch.randint(0, 3, (10, 6, 6)), torch.randint(-1, 3, (10, 6, 6))
    results = []
    for batch_size in (1, 3, 10):
        accumulator = SegmentationScores(3)
        for start in range(0, 10, batch_size):
            accumulator.update(pred[start : start + batch_size], target[start : start + batch_size])
        results.append(accumulator.compute())
    for other in results[1:]:
        assert other.keys() == results[0].keys()
        for key, value in results[0].items():
            assert other[key] == (pytest.approx(value) if isinstance(value, float) else value), key


def test_auto_class_weights_are_inverse_sqrt_frequency_averaging_one():
    weights = auto_class_weights(torch.tensor([900, 100, 0]))
    # frequencies 0.9, 0.1 -> 1/sqrt: 1.054, 3.162; the absent class takes the largest present weight
    raw = [1 / math.sqrt(0.9), 1 / math.sqrt(0.1), 1 / math.sqrt(0.1)]
    assert weights == pytest.approx([w / (sum(raw) / 3) for w in raw])
    assert sum(weights) / 3 == pytest.approx(1.0)
