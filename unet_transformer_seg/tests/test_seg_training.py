import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from unet_transformer_seg.data.image_io import read_mask, write_png
from unet_transformer_seg.data.toy_shapes import ToyShapesDataset
from unet_transformer_seg.errors import ConfigError, NonFiniteError
from unet_transformer_seg.losses import build_loss
from unet_transformer_seg.models import build_model
from unet_transformer_seg.checkpointing import load_checkpoint
from unet_transformer_seg.training.distributed import DistInfo
from unet_transformer_seg.training import loop
from unet_transformer_seg.training.loop import Trainer, train
from unet_transformer_seg.training.run_folder import RESULTS_COLUMNS

from seg_helpers import finish_script, run_script_in_process, start_script, tiny_cli_args, tiny_config


def test_overfitting_one_batch_drives_the_loss_down(tmp_path):
    torch.manual_seed(0)
    cfg = tiny_config(tmp_path, "model.base_channels=8")
    dataset = ToyShapesDataset(4, 16, seed=0, max_shapes=2)
    images = torch.stack([dataset[i][0] for i in range(4)])
    masks = torch.stack([dataset[i][1] for i in range(4)])
    model = build_model(cfg)
    loss_fn = build_loss("ce_dice")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(100):
        optimizer.zero_grad()
        loss = loss_fn(model((images - 0.5) / 0.25), masks)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


@pytest.mark.slow
def test_logged_val_loss_is_the_loss_eval_reports_without_class_weights(tmp_path):
    run_dir = train(tiny_config(tmp_path, "train.class_weights=[0.2, 1.0, 3.0, 5.0]", "train.epochs=1",
                                "train.max_steps=2", "train.num_plot_images=0")).run_dir
    best = run_dir / "checkpoints" / "best.pt"
    logged = load_checkpoint(best)["history"][-1]
    # in this process: eval.py runs as a separate process in test_cli_training_run_writes_every_promised_file
    result = run_script_in_process("eval.py", "--checkpoint", str(best), "--device", "cpu")
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout)
    assert scores["mean_dice"] == pytest.approx(logged["val_mean_dice"], abs=1e-6)
    assert scores["loss"] == pytest.approx(logged["val_loss"], rel=1e-6)  # the weighted training loss would differ


@pytest.mark.parametrize("interval_s, overrides, drawn_after_epochs", [
    (1e9, ("train.epochs=3",), [3]), (0.0, ("train.epochs=3",), [1, 2, 3]),
    (1e9, ("train.epochs=3", "train.max_steps=12"), [2])])
def test_curves_are_drawn_after_the_last_epoch_and_once_the_interval_has_passed(tmp_path, monkeypatch, interval_s,
                                                                                overrides, drawn_after_epochs):
    """Eight steps per epoch; max_steps 12 ends the training in its second epoch, which is then the last."""
    drawn = []
    monkeypatch.setattr(loop, "PLOT_INTERVAL_SECONDS", interval_s)
    monkeypatch.setattr(loop, "plot_curves", lambda history, plots_dir: drawn.append(len(history)))
    train(tiny_config(tmp_path, "train.num_plot_images=0", *overrides))
    assert drawn == drawn_after_epochs


def _final_weights(tmp_path, *overrides):
    cfg = tiny_config(tmp_path, "model.norm=group", "train.loss=ce", "train.epochs=1", "train.max_steps=3",
                      "train.num_plot_images=0", *overrides)
    run_dir = train(cfg).run_dir
    return load_checkpoint(run_dir / "checkpoints" / "last.pt")["model"]


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    big = _final_weights(tmp_path, "train.batch_size=8")
    accumulated = _final_weights(tmp_path, "train.batch_size=4", "train.accumulate_steps=2")
    for name in big:
        assert torch.allclose(big[name], accumulated[name], atol=1e-5), name


@pytest.mark.slow
@pytest.mark.usefixtures("cli_training_run")  # starts the CLI training run, to run alongside this one
def test_torch_compile_trains_like_eager(tmp_path):
    eager = _final_weights(tmp_path)
    compiled = _final_weights(tmp_path, "train.compile=true", "train.compile_backend=aot_eager")
    for name in eager:
        assert torch.allclose(eager[name], compiled[name], atol=1e-4), name


@pytest.fixture(scope="module")
def cli_training_run(tmp_path_factory):
    """train.py as a separate process, as a user runs it, started in the background so that it overlaps with the
    in-process compile test (one core each); yields the process and the folder its runs go to."""
    root = tmp_path_factory.mktemp("cli")
    process = start_script("train.py", "--config", "configs/quick.yaml", *tiny_cli_args(root, "train.epochs=5"))
    yield process, root
    if process.poll() is None:
        process.kill()
        process.communicate()


@pytest.mark.slow
def test_cli_training_run_writes_every_promised_file(cli_training_run, tmp_path):
    process, root = cli_training_run
    result = finish_script(process)
    assert result.returncode == 0, result.stderr
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    assert run_dir.parent == root / "runs" and run_dir.name.endswith("_quick")
    for name in ("config.yaml", "train.log", "metrics.json", "results.csv", "checkpoints/last.pt",
                 "checkpoints/best.pt", "plots/loss.png", "plots/metrics.png", "plots/predictions.png"):
        assert (run_dir / name).is_file(), name
    rows = list(csv.DictReader(open(run_dir / "results.csv")))
    assert tuple(rows[0].keys()) == RESULTS_COLUMNS
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3, 4, 5] and int(rows[-1]["step"]) == 40
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert len(metrics) == 5 and 0.0 <= metrics[-1]["val_mean_dice"] <= 1.0
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["data"]["image_size"] == 16 and saved["train"]["epochs"] == 5
    assert "epoch 5 done" in (run_dir / "train.log").read_text()
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert {"model", "optimizer", "scheduler", "scaler", "epoch", "step_in_epoch", "global_step", "config",
            "rng"} <= set(state)
    assert state["global_step"] == 40

    out_json = tmp_path / "eval.json"
    predictions = tmp_path / "preds"
    image_path = tmp_path / "photo.png"
    write_png(image_path, np.random.default_rng(0).integers(0, 256, (20, 28, 3)).astype(np.uint8))
    # eval.py and predict.py as separate processes, as a user runs them; both only read the finished run, so they run
    # side by side (each spends seconds importing torch).
    evaluating = start_script("eval.py", "--checkpoint", str(run_dir / "checkpoints" / "best.pt"), "--split", "test",
                              "--out", str(out_json), "--save-predictions", str(predictions))
    predicting = start_script("predict.py", "--checkpoint", str(run_dir), str(image_path), "--out-dir",
                              str(tmp_path / "p"))
    result = finish_script(evaluating)
    assert result.returncode == 0, result.stderr
    scores = json.loads(out_json.read_text())
    assert {"mean_dice", "mean_iou", "pixel_accuracy", "per_class_dice", "per_class_iou", "num_images",
            "mean_dice_per_image", "mean_iou_per_image", "hd95", "per_class_hd95"} <= set(scores)
    assert scores["num_images"] == 8 and len(scores["per_class_dice"]) == 4
    saved_masks = sorted(path for path in predictions.glob("*.png") if not path.stem.endswith("_overlay"))
    assert len(saved_masks) == 8 and read_mask(saved_masks[0], 4).shape == (16, 16)
    assert len(list(predictions.glob("*_overlay.png"))) == 8

    def check_prediction(result):
        assert result.returncode == 0, result.stderr
        assert read_mask(tmp_path / "p" / "photo_mask.png", 4).shape == (20, 28)
        assert (tmp_path / "p" / "photo_overlay.png").is_file()

    check_prediction(finish_script(predicting))
    # the further predict.py runs go in this process (run_script_in_process: same argv, output and exit status)
    check_prediction(run_script_in_process("predict.py", "--checkpoint", str(run_dir), str(image_path), "--out-dir",
                                           str(tmp_path / "p"), "--tta", "flip", "--tile-batch", "3", "--device",
                                           "cpu"))


def test_activation_checkpointing_trains_like_plain(tmp_path):
    plain = _final_weights(tmp_path)
    checkpointed = _final_weights(tmp_path, "model.activation_checkpointing=true")
    for name in plain:
        assert torch.allclose(plain[name], checkpointed[name], atol=1e-5), name


def _nan_head_model(build):
    def build_with_nan_head(cfg):
        model = build(cfg)
        with torch.no_grad():
            model.head.weight.fill_(float("nan"))
        return model

    return build_with_nan_head


def test_a_non_finite_loss_stops_training_and_debug_checks_name_the_layer(tmp_path, monkeypatch):
    import unet_transformer_seg.training.loop as loop

    monkeypatch.setattr(loop, "build_model", _nan_head_model(loop.build_model))
    with pytest.raises(NonFiniteError, match="training loss at step 1 is nan"):
        train(tiny_config(tmp_path, "train.epochs=1", "train.num_plot_images=0"))
    with pytest.raises(NonFiniteError, match="output of module 'head' holds"):
        train(tiny_config(tmp_path, "train.epochs=1", "run.debug_checks=true", "train.num_plot_images=0"))


def test_auto_class_weights_are_counted_once_and_kept_in_the_checkpoint(tmp_path):
    cfg = tiny_config(tmp_path, "train.loss=ce", "train.class_weights=auto", "train.epochs=1", "train.max_steps=2",
                      "train.num_plot_images=0", "model.norm=syncbatch")
    trainer = Trainer(cfg)
    run_dir = trainer.run().run_dir
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    weights = state["class_weights"]
    assert len(weights) == 4 and sum(weights) / 4 == pytest.approx(1.0) and weights[0] == min(weights)
    assert "class weights [" in (run_dir / "train.log").read_text()
    assert _norm_layers(trainer.model) == {torch.nn.BatchNorm2d}  # one process: the model trained keeps plain BN


def _norm_layers(model: torch.nn.Module) -> set:
    return {type(module) for module in model.modules()
            if isinstance(module, (torch.nn.BatchNorm2d, torch.nn.SyncBatchNorm))}


def test_syncbatch_norm_converts_the_trained_model_when_distributed(tmp_path, monkeypatch):
    import unet_transformer_seg.training.loop as loop

    monkeypatch.setattr(loop, "init_distributed", lambda device_type: DistInfo(0, 1, 0, enabled=True))
    trainer = Trainer(tiny_config(tmp_path, "model.norm=syncbatch"))
    assert _norm_layers(trainer._build_model()) == {torch.nn.SyncBatchNorm}


def test_syncbatch_norm_with_several_cpu_processes_is_refused(tmp_path, monkeypatch):
    import unet_transformer_seg.training.loop as loop

    monkeypatch.setattr(loop, "init_distributed", lambda device_type: DistInfo(0, 2, 0, enabled=True))
    with pytest.raises(ConfigError, match="syncbatch needs CUDA to train with several processes"):
        train(tiny_config(tmp_path, "model.norm=syncbatch"))
