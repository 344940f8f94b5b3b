"""Step budget, lr schedules, deep supervision and the EMA of the weights (train.max_steps, train.schedule,
model.deep_supervision, train.ema)."""

import math
import shutil
import warnings

import pytest
import torch
import torch.nn.functional as F

from unet_transformer_seg.checkpointing import load_checkpoint
from unet_transformer_seg.inference import load_trained_model
from unet_transformer_seg.losses import DeepSupervisionLoss, build_loss, deep_supervision_weights
from unet_transformer_seg.models import build_model
from unet_transformer_seg.training import loop
from unet_transformer_seg.training.ema import ModelEMA, ema_decay_at
from unet_transformer_seg.training.loop import train, training_budget
from unet_transformer_seg.training.schedules import lr_factor, scaled_optimizer_step

from seg_helpers import tiny_config


def test_step_budget_derives_the_epochs_and_the_log_says_which():
    assert training_budget(12, None, 15) == (180, 12, "budget: train.epochs = 12 epochs of 15 steps = 180 steps")
    total, epochs, note = training_budget(12, 1000, 15)
    assert (total, epochs) == (1000, 67) and "train.max_steps = 1000 steps = 67 epochs" in note
    assert training_budget(3, 10, 10)[:2] == (10, 1)


def test_cosine_and_poly_schedules():
    cosine, poly = lr_factor("cosine", 10, 110), lr_factor("poly", 10, 110)
    for factor in (cosine, poly):
        assert factor(0) == pytest.approx(0.1) and factor(9) == pytest.approx(1.0) and factor(10) == 1.0
        assert factor(110) == 0.0
    assert cosine(60) == pytest.approx(0.5)
    assert poly(60) == pytest.approx(0.5**0.9)
    assert poly(100) > cosine(100)  # poly stays higher late in training
    with pytest.raises(ValueError):
        lr_factor("step", 0, 10)


def test_deep_supervision_heads_in_training_only_and_level_sizes(tmp_path):
    cfg = tiny_config(tmp_path, "model.deep_supervision=true", "model.depth=3", "data.image_size=32",
                      "model.base_channels=8")
    model = build_model(cfg)
    images = torch.randn(2, 3, 32, 32)
    logits, aux = model.train()(images)
    assert logits.shape == (2, 4, 32, 32)
    assert [tuple(a.shape) for a in aux] == [(2, 4, 16, 16), (2, 4, 8, 8)]
    assert model.eval()(images).shape == (2, 4, 32, 32)  # inference: the logits alone
    plain = build_model(tiny_config(tmp_path, "model.depth=3", "data.image_size=32", "model.base_channels=8"))
    extra = {name for name, _ in model.named_parameters()} - {name for name, _ in plain.named_parameters()}
    assert extra and all(name.startswith("aux_heads.") for name in extra)
    (logits.sum() + sum(a.sum() for a in aux)).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_deep_supervision_loss_weights_halve_and_targets_shrink_by_nearest():
    assert deep_supervision_weights(3) == pytest.approx([4 / 7, 2 / 7, 1 / 7])
    base = build_loss("ce_dice")
    loss = DeepSupervisionLoss(base)
    target = torch.randint(0, 3, (2, 16, 16))
    target[:, :2] = -1  # ignored pixels stay ignored where a level picks them
    logits, aux = torch.randn(2, 3, 16, 16), [torch.randn(2, 3, 8, 8), torch.randn(2, 3, 4, 4)]
    small = [target[:, 1::2, 1::2], target[:, 2::4, 2::4]]  # nearest-exact picks pixel floor((i + 0.5) * factor)
    for reference, shrunk in zip(small, [F.interpolate(target[:, None].float(), size=s, mode="nearest-exact")[:, 0]
                                         for s in (8, 4)]):
        assert torch.equal(reference, shrunk.long())
    expected = 4 / 7 * base(logits, target) + 2 / 7 * base(aux[0], small[0]) + 1 / 7 * base(aux[1], small[1])
    torch.testing.assert_close(loss((logits, aux), target), expected)
    torch.testing.assert_close(loss(logits, target), base(logits, target))  # eval outputs: the plain loss


def test_ema_follows_the_warmup_formula_and_averages_buffers():
    assert ema_decay_at(1, 0.99) == pytest.approx(2 / 11) and ema_decay_at(10_000, 0.99) == 0.99
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    ema = ModelEMA(model, 0.9)
    start = {name: value.clone() for name, value in model.state_dict().items()}
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
        model[1].running_mean.add_(2.0)
        model[1].num_batches_tracked.add_(5)
    ema.update(model, 100)  # decay 0.9
    averaged = ema.state_dict()
    torch.testing.assert_close(averaged["0.weight"], start["0.weight"] + 0.1)
    torch.testing.assert_close(averaged["1.running_mean"], start["1.running_mean"] + 0.2)
    assert averaged["1.num_batches_tracked"] == 5
    assert all(not p.requires_grad for p in ema.model.parameters())


FEATURES = ("train.ema=true", "model.deep_supervision=true", "train.schedule=poly", "train.max_steps=12",
            "data.augment.rotate_prob=0.5", "data.augment.scale_prob=0.5", "data.augment.noise_prob=0.5",
            "data.augment.gamma_prob=0.5", "data.augment.blur_prob=0.5", "train.log_every=1",
            "train.num_plot_images=0")


@pytest.mark.slow
def test_ema_checkpoint_is_what_inference_loads_and_resume_is_exact(tmp_path, monkeypatch):
    """A run with every feature on, stopped after its first epoch and resumed, ends bit-identical to the
    uninterrupted run; best.pt's `model` is the EMA, which load_trained_model returns without the auxiliary heads."""
    cfg = tiny_config(tmp_path, *FEATURES)  # 64 images / batch 8 = 8 steps an epoch: 12 steps = 2 epochs
    saved = {}
    original_save = loop.Trainer.save

    def save_and_keep_epoch_one(self, name):
        original_save(self, name)
        if name == "last.pt" and self.global_step == 8:
            saved["epoch_one"] = tmp_path / "epoch_one.pt"
            shutil.copy(self.run_dir / "checkpoints" / name, saved["epoch_one"])

    monkeypatch.setattr(loop.Trainer, "save", save_and_keep_epoch_one)
    run_dir = train(cfg).run_dir
    log = (run_dir / "train.log").read_text()
    assert "budget: train.max_steps = 12 steps = 2 epochs of 8 steps" in log
    assert (run_dir / "plots" / "augmentation.png").is_file()
    final = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert final["global_step"] == 12
    assert any(not torch.equal(final["model"][k], final["train_weights"][k]) for k in final["model"])
    model, _ = load_trained_model(run_dir / "checkpoints" / "best.pt")
    best = load_checkpoint(run_dir / "checkpoints" / "best.pt")
    for name, value in model.state_dict().items():
        assert torch.equal(value, best["model"][name]), name
    assert model(torch.randn(1, 3, 16, 16)).shape == (1, 4, 16, 16)

    resumed_dir = tmp_path / "resumed"
    (resumed_dir / "checkpoints").mkdir(parents=True)
    (resumed_dir / "plots").mkdir()
    shutil.copy(run_dir / "config.yaml", resumed_dir / "config.yaml")
    shutil.copy(saved["epoch_one"], resumed_dir / "checkpoints" / "last.pt")
    resume_path = resumed_dir / "checkpoints" / "last.pt"
    train(cfg, load_checkpoint(resume_path), resume_path)
    resumed = load_checkpoint(resume_path)
    assert resumed["global_step"] == 12
    for key in ("model", "train_weights"):
        for name in final[key]:
            assert torch.equal(resumed[key][name], final[key][name]), (key, name)
    assert [row["val_mean_dice"] for row in resumed["history"]] == [row["val_mean_dice"] for row in final["history"]]
    assert math.isfinite(final["best_score"])


@pytest.mark.slow
def test_validation_every_n_steps(tmp_path):
    cfg = tiny_config(tmp_path, "train.batch_size=16", "train.max_steps=12", "train.val_every_steps=8",
                      "train.num_plot_images=0")
    run_dir = train(cfg).run_dir
    history = load_checkpoint(run_dir / "checkpoints" / "last.pt")["history"]
    assert [row["step"] for row in history] == [8, 12]  # 4 steps an epoch: after epoch 2, and after the last


def test_a_step_the_gradient_scaler_skips_leaves_the_schedule_where_it_was():
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    before = [p.detach().clone() for p in model.parameters()]

    def backward(scaler, scale_of_inputs):
        optimizer.zero_grad()
        scaler.scale(model(torch.full((2, 3), scale_of_inputs)).sum()).backward()

    overflowing = torch.amp.GradScaler("cpu", init_scale=2.0 ** 100)
    backward(overflowing, 1e30)  # the scaled loss overflows float32: inf gradients, the scaler skips the step
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyTorch warns when the schedule steps before the optimizer ever did
        assert not scaled_optimizer_step(overflowing, optimizer, scheduler)
    assert scheduler.last_epoch == 0 and overflowing.get_scale() == 2.0 ** 99
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))

    scaler = torch.amp.GradScaler("cpu", init_scale=2.0)
    backward(scaler, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert scaled_optimizer_step(scaler, optimizer, scheduler)
    assert scheduler.last_epoch == 1 and not torch.equal(before[0], model.weight)
    assert scaled_optimizer_step(torch.amp.GradScaler("cpu", enabled=False), optimizer, scheduler)  # fp32: always
    assert scheduler.last_epoch == 2
