"""Training loop features on a tiny model: NaN guard, gradient accumulation, activation checkpointing, compile."""

import warnings

import pytest
import torch

from paraformer_asr.config import config_from_dict
from paraformer_asr.data.setup import build_data
from paraformer_asr.errors import TrainingError
from paraformer_asr.factory import build_model
from paraformer_asr.models.paraformer import Paraformer
from paraformer_asr.training import loop
from paraformer_asr.training.loop import Trainer
from paraformer_asr.training.steps import compile_stacks, scaled_optimizer_step, warmup_cosine
from paraformer_asr.training.run_folder import RunFolder, setup_logging

from asr_helpers import tiny_raw_config


def _trainer(tmp_path, **train):
    raw = tiny_raw_config(str(tmp_path / "runs"))
    raw["train"].update({"plot_utterances": 0, **train})
    cfg = config_from_dict(raw)
    run = RunFolder.create(cfg)
    setup_logging(run.path / "train.log")  # as train() does
    return Trainer(cfg, run, build_data(cfg))


def _nan_every(n, monkeypatch):
    original = Paraformer.compute_loss
    calls = {"count": 0}

    def patched(self, batch, decoder_scale=1.0):
        out = original(self, batch, decoder_scale)
        calls["count"] += 1
        if calls["count"] % n == 0:
            out.total = out.total * float("nan")
        return out

    monkeypatch.setattr(Paraformer, "compute_loss", patched)


@pytest.mark.slow
def test_nan_guard_skips_bad_batches_and_keeps_training(tmp_path, monkeypatch):
    _nan_every(3, monkeypatch)
    trainer = _trainer(tmp_path, epochs=1)
    trainer.fit()
    row = trainer.history[-1]
    assert row["skipped_batches"] == 2 and row["step"] == 4  # 6 batches, every third is NaN
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert "skipping batch: non-finite loss" in (trainer.run.path / "train.log").read_text()


@pytest.mark.slow
def test_nan_guard_stops_with_a_clear_message_when_bad_batches_keep_coming(tmp_path, monkeypatch):
    _nan_every(1, monkeypatch)
    trainer = _trainer(tmp_path, epochs=1, max_bad_batches=3)
    with pytest.raises(TrainingError, match="3 batches in a row gave a non-finite loss"):
        trainer.fit()


@pytest.mark.slow
@pytest.mark.parametrize("interval_s, max_steps, drawn_after_epochs", [(1e9, None, [3]), (0.0, None, [1, 2, 3]),
                                                                       (1e9, 8, [2])])
def test_plots_are_drawn_after_the_last_epoch_and_once_the_interval_has_passed(tmp_path, monkeypatch, interval_s,
                                                                                max_steps, drawn_after_epochs):
    """Six batches per epoch; max_steps 8 ends the training in its second epoch, which is then the last."""
    drawn = []
    monkeypatch.setattr(loop, "PLOT_INTERVAL_SECONDS", interval_s)
    monkeypatch.setattr(loop, "plot_loss_curves", lambda step_log, history, path: drawn.append(len(history)))
    _trainer(tmp_path, epochs=3, max_steps=max_steps).fit()
    assert drawn == drawn_after_epochs


@pytest.mark.slow
def test_gradient_accumulation_steps_once_per_group(tmp_path):
    trainer = _trainer(tmp_path, epochs=1, accumulate_steps=4)
    trainer.fit()
    assert trainer.batches_per_epoch == 6 and trainer.progress.global_step == 2  # groups of 4 + 2


def test_warmup_then_cosine_schedule():
    schedule = warmup_cosine(10, 110)
    assert schedule(0) == pytest.approx(0.1) and schedule(9) == pytest.approx(1.0)
    assert schedule(60) == pytest.approx(0.01 + 0.99 * 0.5) and schedule(110) == pytest.approx(0.01)
    assert all(schedule(s) >= schedule(s + 1) for s in range(10, 120))


def _grads(cfg, data, batch):
    torch.manual_seed(0)
    model = build_model(cfg, data.input_dim, data.tokenizer).train()
    model.compute_loss(batch).total.backward()
    return {name: None if p.grad is None else p.grad.clone() for name, p in model.named_parameters()}


def test_activation_checkpointing_gives_the_same_gradients(tiny_data, tiny_batch):
    raw = tiny_raw_config()
    raw["model"].update({"dropout": 0.0, "glancing_ratio": 0.0})
    plain = _grads(config_from_dict(raw), tiny_data, tiny_batch)
    raw["model"]["activation_checkpointing"] = True
    checkpointed = _grads(config_from_dict(raw), tiny_data, tiny_batch)
    for name, grad in plain.items():
        assert (grad is None and checkpointed[name] is None) or torch.allclose(grad, checkpointed[name], atol=1e-6), name


@pytest.mark.slow
def test_compiled_model_matches_eager(tiny_cfg, tiny_data, tiny_batch):
    # backend "eager" exercises torch.compile's graph capture without a C++ build (minutes on a small CPU)
    torch.manual_seed(0)
    model = build_model(tiny_cfg, tiny_data.input_dim, tiny_data.tokenizer).eval()
    expected = model.compute_loss(tiny_batch).total
    compile_stacks(model, "eager")
    assert torch.allclose(model.compute_loss(tiny_batch).total, expected, atol=1e-5)
    assert set(model.state_dict()) == set(build_model(tiny_cfg, tiny_data.input_dim, tiny_data.tokenizer).state_dict())


@pytest.mark.slow
@pytest.mark.parametrize("calibrate", [True, False])
def test_validation_refits_the_cif_alpha_scale_and_checkpoints_keep_it(tmp_path, calibrate):
    trainer = _trainer(tmp_path, epochs=1, calibrate_cif=calibrate)
    trainer.fit()
    model, recorded = trainer.model, trainer.history[-1]["cif_alpha_scale"]
    stored = torch.load(trainer.run.checkpoints / "last.pt", weights_only=True)["model"]["predictor.alpha_scale"]
    assert float(stored) == float(model.predictor.alpha_scale)
    if not calibrate:
        assert recorded is None and float(stored) == 1.0
        return
    assert recorded == pytest.approx(float(stored)) and recorded != 1.0
    # The refitted scale makes the validation set's predicted token counts right on average.
    model.eval()
    total_alpha, total_tokens = 0.0, 0
    with torch.no_grad():
        for batch in trainer.val_loader:
            encoder_out, enc_mask = model.encode(batch.features, batch.feat_mask)
            total_alpha += float(model.predictor(encoder_out, enc_mask).integrated_alphas.sum())
            total_tokens += int(batch.token_lengths.sum())
    assert total_alpha == pytest.approx(total_tokens, rel=1e-5)


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
