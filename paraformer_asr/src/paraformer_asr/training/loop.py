"""The training loop: ``Trainer(cfg, run, data, state, ctx).fit()`` -> the run folder. AdamW, linear warmup
then cosine decay (LambdaLR stepped after the optimizer), gradient clipping, torch.amp autocast
+ GradScaler, gradient accumulation, a NaN guard, validation each epoch, atomic checkpoints with
every RNG state (exact resume mid-epoch), SIGINT/SIGTERM -> save last.pt and stop, and with ``train.ema_decay`` a
moving average of the weights that is validated, saved and decoded (training/ema.py). ``train``
(training/launch.py) sets a run up and calls it.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from paraformer_asr.config import Config
from paraformer_asr.data.batching import Collator
from paraformer_asr.data.setup import DataBundle, make_loader
from paraformer_asr.data.tokenizer import Tokenizer
from paraformer_asr.errors import CheckpointError, TrainingError
from paraformer_asr.decode.timestamps import frame_clock
from paraformer_asr.training.tuning import grid_table, refuse_test_set, tune_checkpoint
from paraformer_asr.factory import build_model, count_parameters
from paraformer_asr.runtime import resolve_device
from paraformer_asr.training.distributed import DistContext, all_reduce_sum, barrier, broadcast_object
from paraformer_asr.training.ema import WeightAverage
from paraformer_asr.training.checkpointing import (BestCheckpoints, capture_rng_state, restore_rng_state,
                                                   save_checkpoint, weights_digest)
from paraformer_asr.training.evaluation import evaluate
from paraformer_asr.training.interrupts import StopFlag, TrainingInterrupted
from paraformer_asr.training.plots import plot_loss_curves, plot_validation_alignments
from paraformer_asr.training.progress import EpochSums, Progress
from paraformer_asr.training.run_folder import LOGGER_NAME, RunFolder
from paraformer_asr.training.steps import LossModule, compile_stacks, scaled_optimizer_step, warmup_cosine

# Drawing both plots takes about a second on a slow CPU: a run redraws them after its last epoch and after any
# epoch that ends this long after the last drawing (every epoch of a real training, not every second of a toy one).
PLOT_INTERVAL_SECONDS = 30.0


class Trainer:
    def __init__(self, cfg: Config, run: RunFolder, data: DataBundle, state: dict | None = None,
                 ctx: DistContext | None = None):
        self.cfg = cfg
        self.run = run
        self.data = data
        self.ctx = ctx or DistContext()
        self.tokenizer: Tokenizer = data.tokenizer
        self.device = resolve_device(cfg.run.device)
        if self.device.type == "cuda" and self.ctx.enabled:
            self.device = torch.device("cuda", self.ctx.local_rank)
        self.log = logging.getLogger(LOGGER_NAME)  # set up by train(): stderr and the run's train.log
        train_cfg = cfg.train
        self.model = build_model(cfg, data.input_dim, self.tokenizer).to(self.device)
        self.average = WeightAverage(self.model, train_cfg.ema_decay) if train_cfg.ema_decay > 0 else None
        if train_cfg.compile:
            compile_stacks(self.model, train_cfg.compile_backend)
        self.loss_module: torch.nn.Module = LossModule(self.model)
        if self.ctx.enabled:
            self.loss_module = torch.nn.parallel.DistributedDataParallel(
                self.loss_module, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                find_unused_parameters=True)  # e.g. the glancing embeddings when nothing is replaced
            torch.manual_seed(cfg.run.seed + 1000 * self.ctx.rank)  # different dropout per rank
        pad = self.tokenizer.pad_id
        self.train_loader, self.train_sampler = make_loader(data.train, train_cfg.batch_size, pad, True,
                                                            cfg.run.seed, train_cfg.num_workers,
                                                            self.ctx.world_size, self.ctx.rank)
        self.val_loader, _ = make_loader(data.val, train_cfg.eval_batch_size, pad, False, cfg.run.seed,
                                         train_cfg.num_workers)
        self.batches_per_epoch = len(self.train_sampler.batches())
        steps_per_epoch = math.ceil(self.batches_per_epoch / train_cfg.accumulate_steps)
        self.total_steps = train_cfg.epochs * steps_per_epoch
        if train_cfg.max_steps is not None:
            self.total_steps = min(train_cfg.max_steps, self.total_steps)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=train_cfg.lr,
                                           weight_decay=train_cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer,
                                                           warmup_cosine(train_cfg.warmup_steps, self.total_steps))
        self.use_autocast = train_cfg.amp
        self.autocast_dtype = torch.float16 if self.device.type == "cuda" else torch.bfloat16
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=train_cfg.amp and self.device.type == "cuda")
        self.progress = Progress()
        self.history: list[dict] = []
        self.step_log: list[dict] = []
        self.best_cer = math.inf
        self.kept_best = BestCheckpoints(cfg.train.keep_best)
        self.bad_streak = 0
        self.last_plot = time.perf_counter()
        self.stop = StopFlag()
        self._rng_to_restore: dict | None = None
        self.initialised_from: str | None = None  # the checkpoint whose weights a fine-tuning run started from
        if state is not None:
            self._restore(state)

    @property
    def decoding_model(self) -> torch.nn.Module:
        """The weights a run validates, saves as ``model`` and decodes with: the moving average when there is one."""
        return self.average.model if self.average is not None else self.model

    # ------------------------------------------------------------------ checkpoints
    def _payload(self) -> dict:
        progress = self.progress
        average = self.average
        return {
            "model": self.decoding_model.state_dict(),
            "training_weights": self.model.state_dict() if average is not None else None,  # what resuming trains on
            "ema_updates": average.updates if average is not None else 0,
            "config": self.cfg.to_dict(),
            "tokenizer": self.tokenizer.to_dict(),
            "normalizer": self.data.normalizer.to_dict() if self.data.normalizer is not None else None,
            "input_dim": self.data.input_dim,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": {"epoch": progress.epoch, "batch_in_epoch": progress.batch_in_epoch,
                         "global_step": progress.global_step, "sums": asdict(progress.sums),
                         "bad_streak": self.bad_streak},
            "rng": capture_rng_state(),
            "history": self.history,
            "step_log": self.step_log,
            "best_cer": self.best_cer,
            "best_checkpoints": self.kept_best.entries,
            "calibrated_on": self._calibrated_on(),
            "initialised_from": self.initialised_from,
        }

    def _calibrated_on(self) -> dict | None:
        """The record eval.py checks (training/calibration.py): the validation set when the loop refits the CIF."""
        model = self.decoding_model
        if not (self.cfg.train.calibrate_cif and model.calibrates_cif):
            return None
        data = self.cfg.data.val_manifest if self.cfg.data.kind == "manifest" else "toy:val"
        return {"source": "train.calibrate_cif", "data": data, "alpha_scale": float(model.predictor.alpha_scale)}

    def save(self, name: str) -> None:
        """Write ``checkpoints/<name>`` (only the main process writes)."""
        if self.ctx.is_main:
            save_checkpoint(self._payload(), self.run.checkpoints / name)

    def _restore(self, state: dict) -> None:
        training_weights = state.get("training_weights")
        self.model.load_state_dict(training_weights if training_weights is not None else state["model"])
        if self.average is not None:
            self.average.model.load_state_dict(state["model"])
            self.average.updates = state.get("ema_updates", 0)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        p = state["progress"]
        self.progress = Progress(p["epoch"], p["batch_in_epoch"], p["global_step"], EpochSums(**p["sums"]))
        self.bad_streak = p["bad_streak"]
        self.history = list(state["history"])
        self.step_log = list(state["step_log"])
        self.best_cer = state["best_cer"]
        self.kept_best = BestCheckpoints(self.cfg.train.keep_best, state.get("best_checkpoints", []))
        self._rng_to_restore = state["rng"]
        self.initialised_from = state.get("initialised_from")

    def initialise_from(self, weights: dict, source: Path) -> None:
        """Start from ``weights`` (a checkpoint's model state_dict: fine-tuning); optimiser, schedule and step stay
        fresh. Every process loads the same weights, so distributed replicas agree."""
        try:
            self.model.load_state_dict(weights)
        except RuntimeError as exc:
            raise CheckpointError(f"--init-from {source}: its weights do not fit the model: "
                                  f"{str(exc).splitlines()[0]}") from None
        if self.average is not None:
            self.average.reset_to(self.model)
        self.initialised_from = str(source)

    # ------------------------------------------------------------------ loop
    def fit(self) -> Path:
        cfg = self.cfg
        if cfg.decode.tune:  # refused now rather than after the last epoch
            refuse_test_set(cfg, cfg.data.val_manifest if cfg.data.kind == "manifest" else "toy:val")
        self.log.info("run folder: %s", self.run.path)
        self.log.info("model %s: %d parameters; %d train / %d val utterances; vocab %d; device %s",
                      cfg.model.type, count_parameters(self.model), len(self.data.train), len(self.data.val),
                      self.tokenizer.vocab_size, self.device)
        self.log.info("%d batches per epoch, %d optimizer steps in total", self.batches_per_epoch, self.total_steps)
        if self.initialised_from is not None:
            self.log.info("weights initialised from %s", self.initialised_from)
        if cfg.train.freeze_encoder_steps:
            self.log.info("encoder frozen for the first %d steps", cfg.train.freeze_encoder_steps)
        if self._rng_to_restore is not None:
            restore_rng_state(self._rng_to_restore)
            self.log.info("resumed at epoch %d, batch %d, step %d", self.progress.epoch + 1,
                          self.progress.batch_in_epoch, self.progress.global_step)
        self.stop.install()
        try:
            while self.progress.epoch < cfg.train.epochs and self.progress.global_step < self.total_steps:
                self._run_epoch()
        finally:
            self.stop.uninstall()
        if self.ctx.enabled:
            self.log.warning("rank %d final weights sha256 %s", self.ctx.rank, weights_digest(self.model))
        if cfg.decode.tune and self.ctx.is_main:
            self._tune_decoding()
        self.log.info("done: best val CER %.4f; run folder %s", self.best_cer, self.run.path)
        return self.run.path

    def _tune_decoding(self) -> None:
        """``decode.tune``: choose best.pt's decoding on the validation set (training/tuning.py), store it in best.pt
        and write the grid's scores to ``decoding.md`` in the run folder."""
        best_path = self.run.checkpoints / "best.pt"
        payload, best, rows = tune_checkpoint(best_path, "val", self.cfg.train.eval_batch_size, self.device)
        save_checkpoint(payload, best_path)
        (self.run.path / "decoding.md").write_text(grid_table(rows), encoding="utf-8")
        self.log.info("decoding chosen on the validation set (decoding.md): %s", best)

    def _run_epoch(self) -> None:
        train_cfg, progress = self.cfg.train, self.progress
        started = time.perf_counter()
        self.train_sampler.set_epoch(progress.epoch, start_batch=progress.batch_in_epoch)
        self.data.train.set_epoch(progress.epoch)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        in_group = 0
        show = sys.stdout.isatty() and not os.environ.get("CI")
        bar = tqdm(self.train_loader, desc=f"epoch {progress.epoch + 1}", disable=not show, leave=False)
        for batch in bar:
            if progress.global_step >= self.total_steps:
                break
            progress.batch_in_epoch += 1
            if not self._forward_backward(batch):
                in_group = 0
                continue
            in_group += 1
            if in_group < train_cfg.accumulate_steps and progress.batch_in_epoch < self.batches_per_epoch:
                continue
            in_group = 0
            self._optimizer_step()
            bar.set_postfix(loss=f"{self.step_log[-1]['loss']:.3f}" if self.step_log else "")
            if train_cfg.checkpoint_every and progress.global_step % train_cfg.checkpoint_every == 0:
                self.save("last.pt")
            if self._stop_requested():
                self.save("last.pt")
                raise TrainingInterrupted(self.stop.signum or signal.SIGTERM, self.run.path)
        bar.close()
        self._end_epoch(time.perf_counter() - started)

    def _stop_requested(self) -> bool:
        """A signal arrived (on any rank: all ranks must stop at the same step)."""
        flag = 1.0 if self.stop.signum is not None else 0.0
        return all_reduce_sum([flag], self.ctx, self.device)[0] > 0

    def _forward_backward(self, batch) -> bool:
        """Loss and gradients of one batch; False (gradients dropped) when the loss is not finite
        (on any rank, so that all ranks skip together)."""
        train_cfg, progress, sums = self.cfg.train, self.progress, self.progress.sums
        batch = batch.to(self.device)
        with torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype, enabled=self.use_autocast):
            # the decoder's loss waits for the CTC warm-up (train.ctc_warmup_steps) to end
            decoder_scale = 0.0 if progress.global_step < train_cfg.ctc_warmup_steps else 1.0
            total, terms = self.loss_module(batch, decoder_scale)
        loss = total.float()
        finite = bool(torch.isfinite(loss.detach()))
        if self.ctx.enabled:
            finite = all_reduce_sum([0.0 if finite else 1.0], self.ctx, self.device)[0] == 0
        if not finite:
            self._bad_batch(f"non-finite loss {float(loss.detach())} on batch {progress.batch_in_epoch} of epoch "
                            f"{progress.epoch + 1} "
                            f"(ids {batch.ids[:3]}...)")
            return False
        self.scaler.scale(loss / train_cfg.accumulate_steps).backward()
        sums.loss += float(loss.detach())
        for key, value in terms.items():
            sums.terms[key] = sums.terms.get(key, 0.0) + float(value)
        sums.batches += 1
        self._last_terms = {"loss": float(loss.detach()), **{k: float(v) for k, v in terms.items()}}
        return True

    def _bad_batch(self, reason: str) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.bad_streak += 1
        self.progress.sums.skipped += 1
        self.log.warning("skipping batch: %s", reason)
        if self.bad_streak >= self.cfg.train.max_bad_batches:
            raise TrainingError(f"stopping: {self.bad_streak} batches in a row gave a non-finite loss or gradient "
                                f"(last: {reason}); lower train.lr, raise train.warmup_steps or check the data "
                                "for NaN/Inf")

    def _optimizer_step(self) -> None:
        train_cfg, progress = self.cfg.train, self.progress
        if progress.global_step < train_cfg.freeze_encoder_steps:
            for parameter in self.model.encoder.parameters():
                parameter.grad = None  # AdamW skips a parameter without a gradient: no update, no weight decay
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), train_cfg.grad_clip)
        if not bool(torch.isfinite(grad_norm)) and not self.scaler.is_enabled():
            self._bad_batch(f"non-finite gradient norm at step {progress.global_step + 1}")
            return
        scaled_optimizer_step(self.scaler, self.optimizer, self.scheduler)
        self.optimizer.zero_grad(set_to_none=True)
        if self.average is not None:
            self.average.update(self.model)
        self.bad_streak = 0
        progress.global_step += 1
        if progress.global_step % train_cfg.log_every == 0 or progress.global_step == 1:
            entry = {"step": progress.global_step, **self._last_terms, "lr": self.scheduler.get_last_lr()[0],
                     "grad_norm": float(grad_norm)}
            self.step_log.append(entry)
            terms = " ".join(f"{k}={v:.4f}" for k, v in entry.items() if k != "step")
            self.log.info("epoch %d step %d %s", progress.epoch + 1, progress.global_step, terms)

    def _reduced_means(self) -> tuple[dict, int]:
        """Epoch means of the loss and its terms over all ranks, and the skipped batches of all ranks."""
        sums = self.progress.sums
        keys = sorted(sums.terms)
        totals = all_reduce_sum([sums.loss, *[sums.terms[k] for k in keys], sums.batches, sums.skipped],
                                self.ctx, self.device)
        count = max(totals[-2], 1.0)
        means = {"loss": totals[0] / count, **{k: v / count for k, v in zip(keys, totals[1:-2])}}
        return means, int(totals[-1])

    def _end_epoch(self, train_seconds: float) -> None:
        progress = self.progress
        started = time.perf_counter()
        means, skipped = self._reduced_means()
        val_cer = self._validate_and_record(means, skipped, train_seconds, started) if self.ctx.is_main else None
        barrier(self.ctx)
        if self.ctx.enabled and self.decoding_model.calibrates_cif:  # the main process refitted it on validation
            scale = self.decoding_model.predictor.alpha_scale
            scale.fill_(broadcast_object(float(scale), self.ctx))
        progress.epoch += 1
        progress.batch_in_epoch = 0
        progress.sums = EpochSums()
        improved = val_cer is not None and val_cer < self.best_cer
        if improved:
            self.best_cer = val_cer
        kept = val_cer is not None and self.kept_best.offer(progress.epoch, val_cer)
        if kept and self.cfg.train.keep_best > 1:
            self.save(self.kept_best.file_name(progress.epoch))  # before last.pt, which records it as kept
        self.save("last.pt")
        if improved:
            self.save("best.pt")
        if self.ctx.is_main:
            self.kept_best.remove_unkept(self.run.checkpoints)
        if self._stop_requested():
            raise TrainingInterrupted(self.stop.signum or signal.SIGTERM, self.run.path)

    def _validate_and_record(self, means: dict, skipped: int, train_seconds: float, started: float) -> float:
        """Validation, results row, metrics files and plots (main process); -> the validation CER."""
        progress = self.progress
        alpha_scale = None
        model = self.decoding_model
        if self.cfg.train.calibrate_cif and model.calibrates_cif:
            alpha_scale = model.calibrate_alpha_scale(self.val_loader, self.device)  # before decoding val
        scores, _, _ = evaluate(model, self.val_loader, self.tokenizer, self.device)
        row = {
            "run_id": self.run.run_id,
            "model_type": self.cfg.model.type,
            "epoch": progress.epoch + 1,
            "step": progress.global_step,
            "train_loss": means["loss"],
            "ce_loss": means.get("ce", 0.0),
            "quantity_loss": means.get("quantity", 0.0),
            "ctc_loss": means.get("ctc", 0.0),
            "val_cer": scores["cer"],
            "val_wer": scores["wer"],
            "val_token_accuracy": scores["token_accuracy"],
            "val_sequence_accuracy": scores["sequence_accuracy"],
            "val_length_accuracy": scores["length_accuracy"],
            "val_rtf": scores["rtf"],
            "cif_alpha_scale": alpha_scale,
            "skipped_batches": skipped,
            "lr": self.scheduler.get_last_lr()[0],
            "epoch_seconds": train_seconds + time.perf_counter() - started,
        }
        self.history.append(row)
        terms = "".join(f" {name} {value:.4f}" for name, value in means.items() if name != "loss")  # ce, quantity, ctc
        scale = "" if alpha_scale is None else f" alpha_scale {alpha_scale:.4f}"
        self.log.info("epoch %d: train_loss %.4f%s | val CER %.4f token_acc %.4f seq_acc %.4f len_acc %.4f%s | %.1fs",
                      row["epoch"], row["train_loss"], terms, row["val_cer"], row["val_token_accuracy"],
                      row["val_sequence_accuracy"], row["val_length_accuracy"], scale, row["epoch_seconds"])
        self.run.write_metrics(self.history)
        last_epoch = progress.epoch + 1 >= self.cfg.train.epochs or progress.global_step >= self.total_steps
        if last_epoch or time.perf_counter() - self.last_plot >= PLOT_INTERVAL_SECONDS:
            self._plot()
            self.last_plot = time.perf_counter()
        return row["val_cer"]

    def _plot(self) -> None:
        plot_loss_curves(self.step_log, self.history, self.run.plots / "loss_curves.png")
        count = min(self.cfg.train.plot_utterances, len(self.data.val))
        if count > 0 and self.decoding_model.gives_timestamps:
            utterances = Collator(self.tokenizer.pad_id)([self.data.val[i] for i in range(count)]).to(self.device)
            plot_validation_alignments(self.decoding_model, utterances, self.tokenizer, frame_clock(self.cfg),
                                       self.run.plots / "cif_alignment.png")
