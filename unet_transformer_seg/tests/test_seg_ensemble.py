"""Ensembles (`ensemble.py`): the mean of the members' probabilities against a hand computation, an ensemble of one,
flip TTA over members, members that disagree, members of different folds on the validation split; and class
probabilities at native size (`Segmenter.probabilities`)."""

import pytest
import torch

from unet_transformer_seg.checkpointing import save_checkpoint
from unet_transformer_seg.config import config_to_dict, load_config
from unet_transformer_seg.ensemble import EnsembleModel, check_evaluation_split, load_ensemble
from unet_transformer_seg.errors import ConfigError
from unet_transformer_seg.inference import MIRRORS, InferenceOptions, Segmenter
from unet_transformer_seg.models import build_model

TINY = ["data.image_size=16", "model.base_channels=4", "model.depth=2", "model.type=unet", "train.eval_batch_size=4"]


def _member(seed: int, *overrides: str):
    """(model in eval mode, config) of a randomly initialised tiny U-Net."""
    cfg = load_config(None, TINY + list(overrides))
    torch.manual_seed(seed)
    return build_model(cfg).eval(), cfg


def _ensemble(*members, sources=None):
    models, configs = zip(*members)
    return EnsembleModel(models, configs, sources or [f"m{index}.pt" for index in range(len(models))]).eval()


def test_an_ensemble_of_one_gives_that_models_labels():
    model, cfg = _member(0)
    ensemble = _ensemble((model, cfg))
    image = torch.rand(3, 21, 30)
    for mode in ("resize", "pad"):
        cfg.data.resize_mode = mode
        for tta in ("none", "flip"):
            options = InferenceOptions(tta=tta)
            expected = Segmenter(model, cfg, options).segment(image)
            assert torch.equal(Segmenter(ensemble, cfg, options).segment(image), expected), (mode, tta)


def test_an_ensemble_gives_the_mean_of_its_members_softmax():
    first, second = _member(0), _member(1)
    images = torch.randn(2, 3, 16, 24)
    with torch.no_grad():
        logits = _ensemble(first, second)(images)
        by_hand = (first[0](images).softmax(1) + second[0](images).softmax(1)) / 2
    assert logits.shape == (2, 4, 16, 24)
    assert torch.allclose(logits.softmax(1), by_hand, atol=1e-6)
    assert not torch.allclose(by_hand, first[0](images).softmax(1), atol=1e-3)  # the members do differ


def test_a_sigmoid_ensemble_gives_the_mean_of_its_members_sigmoid():
    first, second = _member(0, "train.loss=bce", "data.num_classes=2"), _member(1, "train.loss=bce",
                                                                                "data.num_classes=2")
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        logits = _ensemble(first, second)(images)
        by_hand = (first[0](images).sigmoid() + second[0](images).sigmoid()) / 2
    assert logits.shape == (2, 1, 16, 16) and torch.allclose(logits.sigmoid(), by_hand, atol=1e-6)


def test_flip_tta_on_an_ensemble_averages_over_members_and_mirrors():
    members = _member(0), _member(1)
    cfg = members[0][1]
    images = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        logits = Segmenter(_ensemble(*members), cfg, InferenceOptions(tta="flip")).predict(images)
        views = [model(images.flip(dims) if dims else images).softmax(1) for model, _ in members for dims in MIRRORS]
        restored = [view.flip(dims) if dims else view for view, dims in zip(views, MIRRORS * 2)]
    assert torch.allclose(logits.softmax(1), sum(restored) / 8, atol=1e-6)


@pytest.mark.parametrize("override, key, values", [
    ("data.image_size=32", "data.image_size", "16, 32"),
    ("data.resize_mode=pad", "data.resize_mode", "'resize', 'pad'"),
    ("data.num_classes=3", "data.num_classes", "2, 3"),
    ("data.in_channels=1", "data.in_channels", "3, 1"),
    ("data.std=0.5", "data.std", "0.25, 0.5"),
    ("model.depth=3", "model.depth", "2, 3"),
    ("train.loss=bce", "train.loss output", "'softmax', 'sigmoid'"),  # 2 classes: two softmax channels or one
])
def test_members_that_take_or_give_different_tensors_are_refused(tmp_path, override, key, values):
    paths = []
    for name, overrides in (("a.pt", []), ("b.pt", [override])):
        model, cfg = _member(0, "data.num_classes=2", *overrides)
        paths.append(tmp_path / name)
        save_checkpoint({"model": model.state_dict(), "config": config_to_dict(cfg)}, paths[-1])
    first, second = values.split(", ")
    with pytest.raises(ConfigError) as info:
        load_ensemble(paths, device="cpu")
    message = str(info.value)
    assert f"disagree on {key}: {first} in {paths[0]}, {second} in {paths[1]}" in message, message


def test_members_that_differ_only_in_training_are_accepted(tmp_path):
    paths = []
    for name, overrides in (("a.pt", []), ("b.pt", ["train.lr=0.01", "model.base_channels=8", "run.seed=3"])):
        model, cfg = _member(0, *overrides)
        paths.append(tmp_path / name)
        save_checkpoint({"model": model.state_dict(), "config": config_to_dict(cfg)}, paths[-1])
    ensemble, cfg = load_ensemble(paths, device="cpu")
    assert isinstance(ensemble, EnsembleModel) and cfg.train.lr != 0.01  # the first member's config
    single, _ = load_ensemble(paths[:1], device="cpu")
    assert not isinstance(single, EnsembleModel)  # one checkpoint: the model itself, as before


def test_members_of_different_folds_are_refused_on_the_validation_split():
    first, second = _member(0), _member(1)
    for cfg, fold in ((first[1], 0), (second[1], 1)):
        cfg.data.folds, cfg.data.fold = 5, fold
    ensemble = _ensemble(first, second, sources=["fold0.pt", "fold1.pt"])
    with pytest.raises(ConfigError, match=r"data.fold 0 in fold0.pt, 1 in fold1.pt.*--split test"):
        check_evaluation_split(ensemble, "val")
    check_evaluation_split(ensemble, "test")
    second[1].data.fold = 0
    check_evaluation_split(_ensemble(first, second), "val")  # one fold: its validation images are no member's
    check_evaluation_split(first[0], "val")  # a single model: as before


@pytest.mark.parametrize("overrides, classes", [([], 4), (["train.loss=bce", "data.num_classes=2"], 2)])
def test_probabilities_sum_to_one_over_the_classes_and_give_the_labels(overrides, classes):
    model, cfg = _member(0, "data.resize_mode=pad", *overrides)
    segmenter = Segmenter(model, cfg)
    image = torch.rand(3, 23, 37)
    probabilities = segmenter.probabilities(image)
    assert probabilities.shape == (classes, 23, 37) and probabilities.dtype == torch.float32
    assert torch.allclose(probabilities.sum(0), torch.ones(23, 37), atol=1e-5)
    assert torch.equal(probabilities.argmax(0), segmenter.segment(image))
