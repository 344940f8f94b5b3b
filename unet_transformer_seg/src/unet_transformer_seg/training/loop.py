"""The training loop: AdamW, linear warmup then cosine or poly decay, gradient clipping, torch.amp, gradient
accumulation, batched augmentation (`data.augment`), deep supervision, an EMA of the weights, optional activation
checkpointing / torch.compile / DistributedDataParallel, validation every epoch, exact resume.

The budget is `train.max_steps` optimizer steps when set (the number of epochs derived from it, so a small set is not
starved), else `train.epochs` epochs; the first log line says which.

Batch order is a pure function of (seed, epoch) (DistributedSampler with drop_last) and augmentation a pure function
of (seed, epoch, index), so resuming only needs the position (epoch, step within epoch) plus the model, optimizer,
scheduler, scaler and RNG states stored in the checkpoint.
`train.batch_size` is per process and per micro-step: one optimizer step sees
batch_size * accumulate_steps * world_size images.

Several processes (torchrun): each rank seeds its own global RNGs (`rank_seed`: run.seed on rank 0), checkpoints hold
the RNG state of every rank (restored rank by rank; resuming with another number of processes is refused), and
BatchNorm running statistics are averaged over ranks before each validation, so the validated model is the saved one.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch.utils.data import DataLoader, DistributedSampler
from tqdm import tqdm

from ..checkpointing import capture_rng_state, restore_rng_state, save_checkpoint
from ..checks import install_nonfinite_hooks
from ..choices import COUNTED_NORMALIZE_MODES
from ..config import Config, config_to_dict, save_config
from ..data.augment import BatchAugment, augment_generator
from ..data.datasets import base_dataset, build_split, class_pixel_counts, pooled_dataset
from ..data.image_io import display_image
from ..data.normalization import count_statistics, describe
from ..errors import CheckpointError, ConfigError, NonFiniteError
from ..inference import Segmenter
from ..labels import class_names
from ..losses import auto_class_weights, build_loss
from ..models import build_model
from ..planning import plan_config
from ..runtime import apply_num_threads, resolve_device, seed_everything, show_progress_bars
from .distributed import (
    DistInfo, all_reduce_sum, average_float_buffers, barrier, broadcast_object, gather_objects, init_distributed,
    max_weight_difference_across_ranks, rank_seed, shutdown_distributed,
)
from .ema import ModelEMA
from .evaluate import evaluate, evaluation_split
from .plots import plot_augmentation_preview, plot_curves, plot_samples
from .run_folder import LOGGER_NAME, close_logger, create_run_dir, setup_logger, write_history
from .schedules import lr_factor, scaled_optimizer_step


PLOT_INTERVAL_SECONDS = 30.0  # loss and metric curves: redrawn after the last epoch and once this long has passed
RESUME_KEYS = ("model", "optimizer", "scheduler", "scaler", "epoch", "step_in_epoch", "global_step", "history",
               "best_score", "epoch_loss", "rng")


@dataclass
class TrainResult:
    run_dir: Path
    stopped_by_signal: Optional[int] = None


def training_budget(epochs: int, max_steps: Optional[int], steps_per_epoch: int) -> Tuple[int, int, str]:
    """(total optimizer steps, number of epochs, a sentence for the log): `max_steps` when set, with the epochs
    derived from it (the last one may be partial), else `epochs` whole epochs."""
    if max_steps is not None:
        num_epochs = math.ceil(max_steps / steps_per_epoch)
        return max_steps, num_epochs, (f"budget: train.max_steps = {max_steps} steps = {num_epochs} epochs of "
                                       f"{steps_per_epoch} steps (train.epochs not used)")
    total = epochs * steps_per_epoch
    return total, epochs, f"budget: train.epochs = {epochs} epochs of {steps_per_epoch} steps = {total} steps"


def epoch_micro_batches(
    num_items: int, batch_size: int, count: int, seed: int, epoch: int, dist_info: DistInfo
) -> List[List[int]]:
    """The first `count` micro-batches of this rank's shuffled indices for `epoch`."""
    sampler = DistributedSampler(
        range(num_items), num_replicas=dist_info.world_size, rank=dist_info.rank, shuffle=True, seed=seed,
        drop_last=True,
    )
    sampler.set_epoch(epoch)
    indices = list(sampler)
    return [indices[i * batch_size : (i + 1) * batch_size] for i in range(count)]


class StopSignal:
    """SIGINT/SIGTERM set a flag; the loop finishes the current step, saves last.pt and stops."""

    def __init__(self):
        self.signal_number: Optional[int] = None
        self.previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signal_number, _frame):
        self.signal_number = signal_number

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False


class Trainer:
    def __init__(self, cfg: Config, resume_state: Optional[Dict] = None, resume_path: Optional[Path] = None,
                 on_run_dir: Optional[Callable[[Path], None]] = None):
        self.cfg = cfg
        self.on_run_dir = on_run_dir
        self.device = resolve_device(cfg.run.device)
        self.dist = init_distributed(self.device.type)
        if self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.local_rank)
        self.resume_state = resume_state
        self.resume_path = resume_path

    # ----- setup -----
    def _run_dir(self) -> Path:
        path = None
        if self.dist.is_main:
            reuse = self.resume_path is not None and self.resume_path.parent.name == "checkpoints"
            reuse = reuse and (self.resume_path.parent.parent / "config.yaml").is_file()
            if reuse:
                path = self.resume_path.parent.parent
            else:
                path = create_run_dir(self.cfg.run.output_dir, self.cfg.run.name)
        return Path(broadcast_object(str(path) if path else None, self.dist))

    def _build(self) -> None:
        self.cfg, self.plan_table = plan_config(self.cfg, show_progress=self.dist.is_main and show_progress_bars())
        cfg = self.cfg
        apply_num_threads(cfg.run.num_threads)
        self._check_resume_world_size()
        seed_everything(rank_seed(cfg.run.seed, self.dist.rank))
        self.intensity_statistics = self._count_intensity_statistics()
        self.train_set = build_split(cfg, "train", train=True)
        self.val_set = evaluation_split(cfg, "val")
        world = self.dist.world_size
        images_per_step = cfg.train.batch_size * cfg.train.accumulate_steps * world
        self.train_images = len(self.train_set)
        self.train_set.repeats = math.ceil(images_per_step / self.train_images)  # a set smaller than a step repeats
        self.micro_per_epoch = (len(self.train_set) // world) // cfg.train.batch_size
        self.steps_per_epoch = self.micro_per_epoch // cfg.train.accumulate_steps
        self.total_steps, self.num_epochs, self.budget_note = training_budget(
            cfg.train.epochs, cfg.train.max_steps, self.steps_per_epoch)
        self.model = self._build_model()
        self.ema = ModelEMA(self.model, cfg.train.ema_decay) if cfg.train.ema else None
        self.augment = BatchAugment(cfg.data.augment)
        self.class_weights = self._class_weights()
        self.loss_fn = build_loss(cfg.train.loss, self.class_weights, cfg.train.dice_include_background,
                                  cfg.model.deep_supervision)
        self.loss_fn.to(self.device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_factor(cfg.train.schedule, cfg.train.warmup_steps, self.total_steps)
        )
        self.use_amp = cfg.train.amp and self.device.type == "cuda"
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.use_amp)
        self.ddp_model = None
        self.train_model = self.model
        if self.dist.enabled:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.ddp_model = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=device_ids)
            self.train_model = self.ddp_model
        if cfg.train.compile:
            self.train_model = torch.compile(self.train_model, backend=cfg.train.compile_backend)
        self.epoch, self.step_in_epoch, self.global_step = 0, 0, 0
        self.history: List[Dict] = []
        self.best_score = -math.inf
        self.epoch_loss = [0.0, 0]
        self.last_plot = time.perf_counter()

    def _train_set_note(self) -> str:
        """'N train' or, for a set smaller than one step, 'N train images drawn R times per epoch'."""
        repeats = self.train_set.repeats
        return f"{self.train_images} train" + (f" images drawn {repeats} times per epoch" if repeats > 1 else "")

    @property
    def eval_model(self) -> torch.nn.Module:
        """The weights validation, best.pt and inference use: the EMA with `train.ema`, else the trained model."""
        return self.ema.model if self.ema is not None else self.model

    def _build_model(self) -> torch.nn.Module:
        cfg = self.cfg
        model = build_model(cfg).to(self.device)
        if cfg.model.norm == "syncbatch" and self.dist.enabled:
            if self.device.type != "cuda" and self.dist.world_size > 1:
                raise ConfigError("config key 'model.norm' syncbatch needs CUDA to train with several processes "
                                  "(PyTorch's SyncBatchNorm runs on GPUs only); use batch or group on CPU")
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        if cfg.run.debug_checks:
            install_nonfinite_hooks(model)
        return model

    def _class_weights(self) -> Optional[List[float]]:
        """train.class_weights resolved to numbers: as given, from the checkpoint when resuming, or counted once over
        the training masks (rank 0 reads them, the others receive the result)."""
        setting = self.cfg.train.class_weights
        self.class_pixel_counts = None
        if setting is None or isinstance(setting, list):
            return setting
        if self.resume_state is not None and self.resume_state.get("class_weights") is not None:
            return list(self.resume_state["class_weights"])
        counted = None
        if self.dist.is_main:
            counts = class_pixel_counts(self.train_set.base, self.cfg.data.num_classes, self.cfg.train.num_workers,
                                        show_progress=show_progress_bars())
            counted = (auto_class_weights(counts), counts.tolist())
        weights, self.class_pixel_counts = broadcast_object(counted, self.dist)
        return weights

    def _count_intensity_statistics(self) -> Optional[Dict[str, List[float]]]:
        """data.normalize dataset | percentile in a new run: the training split's statistics, counted once (rank 0
        reads the images, the others receive the result) and written into cfg.data, so config.yaml and checkpoints
        hold them. With folds they are counted over train + val, so every fold normalises alike (nnU-Net counts them
        over all training cases too). A resumed run keeps those of its checkpoint's config."""
        data = self.cfg.data
        if data.normalize not in COUNTED_NORMALIZE_MODES or self.resume_state is not None:
            return None
        counted = None
        if self.dist.is_main:
            images = pooled_dataset(self.cfg) if data.folds is not None else base_dataset(self.cfg, "train")
            counted = count_statistics(images, data.normalize, self.cfg.run.seed, self.cfg.train.num_workers,
                                       show_progress_bars())
        statistics = broadcast_object(counted, self.dist)
        for key, values in statistics.items():
            setattr(data, key, values)
        return statistics

    def _check_resume_world_size(self) -> None:
        """Batch order and the per-rank RNG states depend on the number of processes: resuming needs the same."""
        saved = (self.resume_state or {}).get("world_size", self.dist.world_size)  # absent in older checkpoints
        if saved != self.dist.world_size:
            raise CheckpointError(
                f"cannot resume from {self.resume_path}: it was saved by {saved} process(es) and this run has "
                f"{self.dist.world_size}; resume with the same number (torchrun --nproc_per_node={saved} "
                f"scripts/train.py --resume ...{' or plain python' if saved == 1 else ''})")

    def _load_resume_state(self) -> None:
        state = self.resume_state
        missing = [key for key in RESUME_KEYS if key not in state]
        if missing:
            raise CheckpointError(f"cannot resume from {self.resume_path}: it lacks {', '.join(missing)}")
        try:
            # with train.ema the checkpoint's `model` is the average and `train_weights` the trained weights
            self.model.load_state_dict(state.get("train_weights", state["model"]))
            if self.ema is not None:
                self.ema.load_state_dict(state["model"])
        except RuntimeError as exc:
            raise CheckpointError(f"weights in {self.resume_path} do not fit the config: {exc}") from None
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.epoch, self.step_in_epoch = state["epoch"], state["step_in_epoch"]
        self.global_step = state["global_step"]
        self.history = list(state["history"])
        self.best_score = state["best_score"]
        self.epoch_loss = list(state["epoch_loss"])
        per_rank = state["rng"] if isinstance(state["rng"], list) else [state["rng"]] * self.dist.world_size
        restore_rng_state(per_rank[self.dist.rank])

    def checkpoint_state(self, rng_states: List[Dict]) -> Dict:
        """Everything a checkpoint holds; `rng_states`: the RNG states of every rank, in rank order."""
        return {
            "model": self.eval_model.state_dict(),
            **({"train_weights": self.model.state_dict()} if self.ema is not None else {}),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "global_step": self.global_step,
            "config": config_to_dict(self.cfg),
            "rng": rng_states,
            "world_size": self.dist.world_size,
            "history": self.history,
            "best_score": self.best_score,
            "epoch_loss": list(self.epoch_loss),
            "run_id": self.run_id,
            "class_weights": self.class_weights,
        }

    def save(self, name: str) -> None:
        """Called on every rank at the same step (each contributes its RNG state); rank 0 writes the file."""
        rng_states = gather_objects(capture_rng_state(), self.dist)
        if self.dist.is_main:
            save_checkpoint(self.checkpoint_state(rng_states), self.run_dir / "checkpoints" / name)

    # ----- one optimizer step -----
    def _train_step(self, batches) -> torch.Tensor:
        """One optimizer step over accumulate_steps micro-batches; returns the mean loss as a 0-dim tensor on the
        device (reading it is left to the caller, so the step itself makes no host sync)."""
        cfg = self.cfg
        accumulate = cfg.train.accumulate_steps
        self.optimizer.zero_grad(set_to_none=True)
        step_loss = torch.zeros((), device=self.device)
        for micro in range(accumulate):
            images, masks = next(batches)
            images, masks = images.to(self.device), masks.to(self.device)
            rng = augment_generator(cfg.run.seed, self.global_step, micro, self.dist.rank)
            images, masks = self.augment(images, masks, rng)  # [B, C, S, S], [B, S, S]
            last_micro = micro == accumulate - 1
            no_sync = self.ddp_model.no_sync() if self.ddp_model is not None and not last_micro else None
            with no_sync or contextlib.nullcontext():
                with torch.autocast(device_type=self.device.type, enabled=self.use_amp):
                    outputs = self.train_model(images)  # logits [B, K, S, S] (and auxiliary logits)
                    loss = self.loss_fn(outputs, masks)  # [] float32
                self.scaler.scale(loss / accumulate).backward()
            step_loss += loss.detach() / accumulate
        if cfg.train.grad_clip is not None:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.train.grad_clip)
        scaled_optimizer_step(self.scaler, self.optimizer, self.scheduler)
        if self.ema is not None:
            self.ema.update(self.model, self.global_step + 1)
        return step_loss

    # ----- epoch -----
    def _train_epoch(self, stop: StopSignal) -> bool:
        """Run the remaining steps of the current epoch. Returns False if a stop signal ended it early."""
        cfg = self.cfg
        self.train_set.set_epoch(self.epoch)
        micro = epoch_micro_batches(
            len(self.train_set), cfg.train.batch_size, self.steps_per_epoch * cfg.train.accumulate_steps,
            cfg.run.seed, self.epoch, self.dist,
        )
        remaining = micro[self.step_in_epoch * cfg.train.accumulate_steps :]
        loader = DataLoader(
            self.train_set, batch_sampler=remaining, num_workers=cfg.train.num_workers,
            generator=torch.Generator().manual_seed(rank_seed(cfg.run.seed, self.dist.rank)),
        )
        batches = iter(loader)
        show_bar = self.dist.is_main and show_progress_bars()
        bar = tqdm(total=self.steps_per_epoch, initial=self.step_in_epoch, disable=not show_bar,
                   desc=f"epoch {self.epoch + 1}", leave=False)
        self.model.train()
        try:
            while self.step_in_epoch < self.steps_per_epoch and self.global_step < self.total_steps:
                step_loss = self._train_step(batches)
                stop_flag = torch.full((), 1.0 if stop.signal_number is not None else 0.0, device=self.device)
                # the one host sync of the step: loss and stop flag, summed over ranks, read together
                loss_sum, stop_votes = all_reduce_sum(torch.stack([step_loss, stop_flag]), self.dist).tolist()
                step_loss = loss_sum / self.dist.world_size
                if not math.isfinite(step_loss):
                    raise NonFiniteError(f"training loss at step {self.global_step + 1} is {step_loss} (diverged: "
                                         f"lower train.lr, keep train.grad_clip; run.debug_checks names the layer)")
                self.epoch_loss[0] += step_loss
                self.epoch_loss[1] += 1
                self.global_step += 1
                self.step_in_epoch += 1
                bar.update(1)
                if self.global_step % cfg.train.log_every == 0:
                    self.logger.info(
                        f"epoch {self.epoch + 1} step {self.global_step}/{self.total_steps} loss {step_loss:.4f} "
                        f"lr {self.scheduler.get_last_lr()[0]:.2e}"
                    )
                stopping = stop_votes > 0
                if stopping or (cfg.train.checkpoint_every and self.global_step % cfg.train.checkpoint_every == 0):
                    self.save("last.pt")
                    self.logger.info(f"saved checkpoints/last.pt at step {self.global_step}")
                if stopping:
                    return False
        finally:
            bar.close()
        return True

    def _validation_due(self) -> bool:
        """Validate after every epoch, or with `train.val_every_steps` once that many steps have passed since the
        last validation; always after the last epoch."""
        every = self.cfg.train.val_every_steps
        last_validated = self.history[-1]["step"] if self.history else 0
        return every is None or self._in_last_epoch() or self.global_step - last_validated >= every

    def _in_last_epoch(self) -> bool:
        """Whether the epoch under way (self.epoch, 0-based) is the training's last: the last of num_epochs, or
        max_steps reached in it."""
        return self.epoch + 1 >= self.num_epochs or self.global_step >= self.total_steps

    def _end_epoch(self, seconds: float) -> None:
        cfg = self.cfg
        if not self._validation_due():  # the train loss keeps accumulating until the next validation
            self.epoch += 1
            self.step_in_epoch = 0
            return
        # one model on every rank: the one best.pt / last.pt hold (the EMA copy's statistics too)
        average_float_buffers(self.model, self.dist)
        if self.ema is not None:
            average_float_buffers(self.eval_model, self.dist)
        scores = evaluate(self.eval_model, self.val_set, cfg, self.dist).scores
        row = {
            "run_id": self.run_id,
            "model_type": cfg.model.type,
            "epoch": self.epoch + 1,
            "step": self.global_step,
            "train_loss": self.epoch_loss[0] / max(1, self.epoch_loss[1]),
            "val_loss": scores["loss"],
            "val_mean_dice": scores["mean_dice"],
            "val_mean_iou": scores["mean_iou"],
            "val_pixel_accuracy": scores["pixel_accuracy"],
            "lr": self.scheduler.get_last_lr()[0],
            "epoch_seconds": round(seconds, 3),
            "val_per_class_dice": scores["per_class_dice"],
            "val_per_class_iou": scores["per_class_iou"],
            "val_mean_dice_per_image": scores["mean_dice_per_image"],
            "val_mean_iou_per_image": scores["mean_iou_per_image"],
            "val_hd95": scores["hd95"],
        }
        self.history.append(row)
        self.logger.info(
            f"epoch {row['epoch']} done: train_loss {row['train_loss']:.4f} val_loss {row['val_loss']:.4f} "
            f"val_mean_dice {row['val_mean_dice']:.4f} val_mean_iou {row['val_mean_iou']:.4f} "
            f"val_pixel_accuracy {row['val_pixel_accuracy']:.4f} ({seconds:.1f}s)"
        )
        last_epoch = self._in_last_epoch()
        self.epoch += 1
        self.step_in_epoch = 0
        self.epoch_loss = [0.0, 0]
        improved = row["val_mean_dice"] > self.best_score  # False for NaN
        if improved:
            self.best_score = row["val_mean_dice"]
        if self.dist.is_main:
            write_history(self.run_dir, self.history)
            if last_epoch or time.perf_counter() - self.last_plot >= PLOT_INTERVAL_SECONDS:
                plot_curves(self.history, self.run_dir / "plots")  # about half a second: not after every epoch
                self.last_plot = time.perf_counter()
        self.save("last.pt")
        if improved:
            self.save("best.pt")

    def _plot_predictions(self) -> None:
        count = min(self.cfg.train.num_plot_images, len(self.val_set))
        if count == 0 or not self.dist.is_main:
            return
        segmenter = Segmenter(self.eval_model.eval(), self.cfg)
        samples = [self.val_set.base[index] for index in range(count)]  # (image [C, H0, W0] in [0, 1], mask)
        predictions = [segmenter.segment(image) for image, _ in samples]
        plot_samples([image for image, _ in samples], [mask for _, mask in samples], predictions,
                     self.run_dir / "plots" / "predictions.png", self.cfg.data.num_classes, class_names(self.cfg.data))

    def _plot_augmentation(self) -> None:
        """plots/augmentation.png: the first training windows as the model sees them in step 1 (crops, flips and
        `data.augment`), image over mask."""
        count = min(8, self.cfg.train.batch_size, len(self.train_set))
        if count == 0 or not self.dist.is_main:
            return
        self.train_set.set_epoch(0)
        indices = epoch_micro_batches(len(self.train_set), count, 1, self.cfg.run.seed, 0, self.dist)[0]
        images = torch.stack([self.train_set[index][0] for index in indices])  # [n, C, S, S] normalised
        masks = torch.stack([self.train_set[index][1] for index in indices])  # [n, S, S]
        images, masks = self.augment(images, masks, augment_generator(self.cfg.run.seed, 0, 0, 0))
        shown = torch.stack([display_image(image) for image in images])  # [n, 3, S, S] stretched to [0, 1]
        plot_augmentation_preview(shown, masks, self.run_dir / "plots" / "augmentation.png", self.cfg.data.num_classes,
                                  class_names(self.cfg.data))

    def run(self) -> TrainResult:
        try:
            self._build()  # config, data and model problems surface before a run folder is created
            cfg = self.cfg  # with the values planned from the data
            self.run_dir = self._run_dir()
            self.run_id = self.run_dir.name
            if self.on_run_dir is not None and self.dist.is_main:
                self.on_run_dir(self.run_dir)
            self.logger = setup_logger(self.run_dir / "train.log" if self.dist.is_main else None,
                                       enabled=self.dist.is_main)
            if self.dist.is_main:
                save_config(cfg, self.run_dir / "config.yaml")
            if self.plan_table:
                self.logger.info(f"auto values planned from the data:\n{self.plan_table}")
            if self.resume_state is not None:
                self._load_resume_state()
                self.logger.info(f"resumed from {self.resume_path} at epoch {self.epoch + 1}, "
                                 f"step {self.global_step} (step {self.step_in_epoch} of the epoch)")
            else:
                params = sum(p.numel() for p in self.model.parameters())
                self.logger.info(
                    f"run {self.run_id}: {cfg.model.type} with {params} parameters on {self.device}, "
                    f"{self._train_set_note()} / {len(self.val_set)} val images, {self.steps_per_epoch} steps per "
                    f"epoch, {self.total_steps} steps, {self.dist.world_size} process(es)"
                )
                self.logger.info(self.budget_note)
                self._plot_augmentation()
            if self.intensity_statistics is not None:
                counted_over = "train + val images (folds)" if cfg.data.folds else f"{self.train_images} training images"
                self.logger.info(f"intensity statistics of the {counted_over} ({cfg.data.normalize}): "
                                 f"{describe(self.intensity_statistics)}")
            if self.class_weights is not None:
                source = "given" if self.class_pixel_counts is None else (
                    f"auto: 1/sqrt(pixel frequency) over {self.train_images} training masks, pixel counts "
                    f"{self.class_pixel_counts}")
                weights = ", ".join(f"{weight:.4f}" for weight in self.class_weights)
                self.logger.info(f"class weights [{weights}] ({source})")
            torch.autograd.set_detect_anomaly(cfg.train.detect_anomaly)
            with StopSignal() as stop:
                while self.epoch < self.num_epochs and self.global_step < self.total_steps:
                    started = time.time()
                    if not self._train_epoch(stop):
                        name = signal.Signals(stop.signal_number).name if stop.signal_number else "a signal"
                        self.logger.info(
                            f"stopped by {name} after step {self.global_step}; last.pt saved; resume with: "
                            f"python scripts/train.py --resume {self.run_dir}"
                        )
                        return TrainResult(self.run_dir, stop.signal_number or signal.SIGTERM)
                    self._end_epoch(time.time() - started)
            self._plot_predictions()
            difference = max_weight_difference_across_ranks(self.model, self.dist)
            if self.dist.enabled:
                self.logger.info(f"max weight difference across {self.dist.world_size} ranks: {difference:.3e}")
            best = self.best_score
            self.logger.info(f"finished {self.global_step} steps; best val_mean_dice {best:.4f}; run folder "
                             f"{self.run_dir}")
            barrier(self.dist)  # tear the group down only once every rank is done: gloo can abort otherwise
            return TrainResult(self.run_dir)
        finally:
            close_logger(logging.getLogger(LOGGER_NAME))
            # DistributedDataParallel's reducer holds the process group: released first, gloo's threads end with the
            # group instead of at interpreter exit (where one rank could abort: "terminate called without an active
            # exception")
            self.ddp_model = self.train_model = None
            shutdown_distributed(self.dist)


def train(cfg: Config, resume_state: Optional[Dict] = None, resume_path: Optional[Path] = None,
          on_run_dir: Optional[Callable[[Path], None]] = None) -> TrainResult:
    """Train as `cfg` says (resuming from `resume_state` read from `resume_path`); `on_run_dir(path)` is called once
    the run folder exists (before the first step)."""
    return Trainer(cfg, resume_state, resume_path, on_run_dir).run()
