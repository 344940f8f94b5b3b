"""Starting a training: ``train(cfg)`` (a new run), ``train(None, resume=RUN_DIR_OR_CKPT)`` (a resumed one) or
``train(cfg, init_from=CKPT)`` (fine-tuning, training/finetune.py) -> run folder path. It makes or finds the run
folder, sets up logging, threads, seeds, the tokenizer and the data, then runs the Trainer (training/loop.py).
"""

from __future__ import annotations

from pathlib import Path

from paraformer_asr.config import Config, config_from_dict
from paraformer_asr.data.setup import build_data, tokenizer_for, training_transcripts
from paraformer_asr.data.tokenizer import tokenizer_from_dict
from paraformer_asr.errors import CheckpointError, ConfigError
from paraformer_asr.runtime import apply_num_threads, resolve_device
from paraformer_asr.training.checkpointing import load_checkpoint, resolve_checkpoint_path
from paraformer_asr.training.distributed import barrier, broadcast_object, init_distributed, shutdown
from paraformer_asr.training.finetune import load_initial_weights
from paraformer_asr.training.loop import Trainer
from paraformer_asr.training.run_folder import RunFolder, setup_logging
from paraformer_asr.training.steps import seed_everything

RESUME_OR_INIT = ("--init-from starts a new run from a checkpoint's weights and --resume continues a run: give one "
                  "of them")


def train(cfg: Config | None, resume: str | Path | None = None, init_from: str | Path | None = None) -> Path:
    """Train from ``cfg`` in a new run folder, or resume the run holding ``resume`` (a run folder or a
    checkpoint), or fine-tune: train from ``cfg`` in a new run folder starting from the weights, tokenizer and
    normaliser of the checkpoint ``init_from`` (a run folder means its best.pt; training/finetune.py). Returns the run
    folder. Raises UserError subclasses for user mistakes and TrainingInterrupted after SIGINT/SIGTERM (last.pt
    saved). Under torchrun every process calls this; only rank 0 writes the run folder."""
    state = initial = None
    if resume is not None and init_from is not None:
        raise ConfigError(RESUME_OR_INIT)
    if init_from is not None:
        initial, init_path = load_initial_weights(cfg, init_from)  # checked before a run folder is made
    if resume is not None:
        path = resolve_checkpoint_path(resume)
        state = load_checkpoint(path)
        if "progress" not in state:
            raise CheckpointError(f"{path} holds no training state (optimizer, progress); cannot resume from it")
        cfg = config_from_dict(state["config"])
    ctx = init_distributed(use_cuda=resolve_device(cfg.run.device).type == "cuda")
    try:
        if resume is not None:
            run = RunFolder(path.parent.parent)
        else:
            run = RunFolder(broadcast_object(str(RunFolder.create(cfg).path) if ctx.is_main else None, ctx))
        setup_logging(run.path / "train.log" if ctx.is_main else None, quiet=not ctx.is_main)
        apply_num_threads(cfg.run.num_threads)
        seed_everything(cfg.run.seed)
        kept = state if state is not None else initial  # the checkpoint whose tokenizer and normaliser the run keeps
        if kept is not None:
            tokenizer = tokenizer_from_dict(kept["tokenizer"])
        else:  # learned once, on rank 0, and sent to the other ranks
            learned = tokenizer_for(cfg, training_transcripts(cfg)).to_dict() if ctx.is_main else None
            tokenizer = tokenizer_from_dict(broadcast_object(learned, ctx))
        data = build_data(cfg, tokenizer, kept["normalizer"] if kept is not None else None)
        if ctx.is_main:
            run.write_tokenizer(data.tokenizer.to_dict())
        trainer = Trainer(cfg, run, data, state, ctx)
        if initial is not None:
            trainer.initialise_from(initial["model"], init_path)
        result = trainer.fit()
        barrier(ctx)  # tear the group down only once every rank is done: gloo can abort otherwise
        return result
    finally:
        shutdown(ctx)
