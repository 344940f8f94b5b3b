"""Fine-tuning: a new run whose model starts from a trained checkpoint's weights (``train.py --init-from``).

Only the weights come from the checkpoint: the optimiser, the learning-rate schedule, the step counter and the data
position start afresh, in a new run folder, with the new config's data and training settings. What the weights
compute must not change under them, so the run stops before anything is written, with a CheckpointError naming the
key, when the checkpoint and the new config disagree on

- the network: every ``model.*`` key, except those that only shape the training loss or its regularisation
  (``TRAINING_ONLY_MODEL_KEYS``: dropout, label smoothing, glancing, loss weights and normalisations, activation
  checkpointing), which a fine-tuning run may change;
- the features: ``data.kind``, ``data.sample_rate``, ``data.utterance_mean`` and the input size (``data.n_mels``, or
  ``data.toy.feature_dim`` for toy data);
- the output units: ``data.tokenizer`` (and ``data.vocab_size`` for subword units). The checkpoint's tokenizer is
  kept, since its ids are the rows of the model's output layer, and every character of the new training
  transcripts must be in its vocabulary (a tokenizer learned from a small new set would hold a subset of those
  characters, or other subword pieces; what matters is that the checkpoint's encodes the new transcripts without
  ``<unk>``).

The feature normaliser is the checkpoint's as well: the weights were trained on features standardised with its
statistics, and statistics refitted on a small new set would move every input the model sees.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from paraformer_asr.config import Config, config_from_dict
from paraformer_asr.data.setup import training_transcripts
from paraformer_asr.data.tokenizer import tokenizer_from_dict
from paraformer_asr.errors import CheckpointError
from paraformer_asr.inference import resolve_eval_checkpoint
from paraformer_asr.training.checkpointing import load_checkpoint

TRAINING_ONLY_MODEL_KEYS = ("dropout", "label_smoothing", "glancing_ratio", "glancing_loss", "quantity_weight",
                            "ctc_combination", "ctc_normalization", "length_normalized_loss",
                            "activation_checkpointing")


def load_initial_weights(cfg: Config, source: str | Path) -> tuple[dict, Path]:
    """The checkpoint ``source`` (a ``.pt`` file, or a run folder: its best.pt, else last.pt) checked against ``cfg``
    (see the module docstring). -> (its payload, the file read). CheckpointError naming the key on a mismatch."""
    path = resolve_eval_checkpoint(source)
    state = load_checkpoint(path)
    check_same_network(cfg, config_from_dict(state["config"]), state["input_dim"], path)
    check_tokenizer_covers(cfg, state["tokenizer"], path)
    return state, path


def check_same_network(cfg: Config, theirs: Config, input_dim: int, path: Path) -> None:
    """CheckpointError naming the first key on which the new config ``cfg`` and the checkpoint's config ``theirs``
    (its model reading ``input_dim`` features) disagree in a way that changes what the weights compute."""
    ours_model, their_model = dataclasses.asdict(cfg.model), dataclasses.asdict(theirs.model)
    for key, value in ours_model.items():
        if key not in TRAINING_ONLY_MODEL_KEYS and value != their_model[key]:
            raise CheckpointError(f"--init-from {path}: model.{key} differs: the checkpoint has {their_model[key]!r}, "
                                  f"the config {value!r} (fine-tuning keeps the checkpoint's network; of the model "
                                  f"keys only {', '.join(TRAINING_ONLY_MODEL_KEYS)} may change)")
    keys = ["kind", "utterance_mean", "tokenizer"]
    if cfg.data.kind == "manifest":
        keys.append("sample_rate")
    if cfg.data.tokenizer != "char":
        keys.append("vocab_size")
    for key in keys:
        value, their_value = getattr(cfg.data, key), getattr(theirs.data, key)
        if value != their_value:
            raise CheckpointError(f"--init-from {path}: data.{key} differs: the checkpoint has {their_value!r}, the "
                                  f"config {value!r} (the features and output units must stay the checkpoint's)")
    key, wanted = (("n_mels", cfg.data.n_mels) if cfg.data.kind == "manifest"
                   else ("toy.feature_dim", cfg.data.toy.feature_dim))
    if wanted != input_dim:
        raise CheckpointError(f"--init-from {path}: data.{key} is {wanted} but the checkpoint's model reads "
                              f"{input_dim} features a frame")


def check_tokenizer_covers(cfg: Config, tokenizer_state: dict, path: Path) -> None:
    """CheckpointError naming the characters of the new training transcripts that the checkpoint's tokenizer
    (``tokenizer_state``) can only encode as ``<unk>``."""
    unknown = tokenizer_from_dict(tokenizer_state).unknown_characters(training_transcripts(cfg))
    if unknown:
        raise CheckpointError(f"--init-from {path}: the tokenizer differs: the new training transcripts use "
                              f"characters missing from the checkpoint's vocabulary: {''.join(unknown)!r}")
