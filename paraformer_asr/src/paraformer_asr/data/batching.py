"""Collation into padded batches and a length-bucketed, resumable batch sampler."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch.utils.data import Sampler

from paraformer_asr.checks import lengths_to_mask


@dataclass
class Batch:
    """A padded batch (masks are bool, True = valid).

    features [B, T_max, F] float32 (zeros on padding), feat_lengths [B] long, feat_mask [B, T_max],
    tokens [B, S_max] long (pad_id on padding, no bos/eos), token_lengths [B] long,
    token_mask [B, S_max], durations [B] float32 seconds, boundaries [B, S_max] long (-1 on
    padding) or None when the data has no known boundaries, ids / texts: lists of B strings, words: list of B
    timed reference words (``[{"word", "start_ms", "end_ms"}]``, None for an item without them).
    """

    features: torch.Tensor
    feat_lengths: torch.Tensor
    feat_mask: torch.Tensor
    tokens: torch.Tensor
    token_lengths: torch.Tensor
    token_mask: torch.Tensor
    durations: torch.Tensor
    boundaries: torch.Tensor | None
    ids: list[str]
    texts: list[str]
    words: list[list[dict] | None]

    def to(self, device: torch.device | str) -> "Batch":
        moved = {}
        for f in fields(self):
            value = getattr(self, f.name)
            moved[f.name] = value.to(device) if isinstance(value, torch.Tensor) else value
        return Batch(**moved)

    @property
    def size(self) -> int:
        return self.features.shape[0]


def pad_short_utterances(batch: Batch, min_frames: int) -> tuple[Batch, torch.Tensor]:
    """Utterances shorter than ``min_frames`` (the encoder's subsampling needs at least that many) lengthened to it
    with zero frames, as batch padding is. -> (the batch, too_short [B] bool). A clip that short (under ~70 ms at
    4x subsampling) holds no word: decoders give it an empty hypothesis (decode/search.py)."""
    too_short = batch.feat_lengths < min_frames  # [B]
    if not bool(too_short.any()):
        return batch, too_short
    missing = max(0, min_frames - batch.features.shape[1])
    features = torch.nn.functional.pad(batch.features, (0, 0, 0, missing))  # [B, max(T_max, min_frames), F]
    feat_lengths = batch.feat_lengths.clamp(min=min_frames)  # [B]
    feat_mask = lengths_to_mask(feat_lengths, features.shape[1])
    return replace(batch, features=features, feat_lengths=feat_lengths, feat_mask=feat_mask), too_short


def _pad_stack(tensors: list[torch.Tensor], fill: float | int) -> torch.Tensor:
    """Stack tensors [L_i, ...] into [B, L_max, ...] filled with ``fill``."""
    return torch.nn.utils.rnn.pad_sequence(tensors, batch_first=True, padding_value=fill)


class Collator:
    """Turns a list of dataset items into a :class:`Batch` (pads tokens with ``pad_id``)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, items: list[dict]) -> Batch:
        feat_lengths = torch.tensor([item["features"].shape[0] for item in items], dtype=torch.long)
        token_lengths = torch.tensor([item["tokens"].shape[0] for item in items], dtype=torch.long)
        features = _pad_stack([item["features"].float() for item in items], 0.0)
        tokens = _pad_stack([item["tokens"].long() for item in items], self.pad_id)
        if tokens.shape[1] == 0:
            tokens = tokens.new_full((len(items), 0), self.pad_id)
        has_boundaries = all("boundaries" in item for item in items)
        boundaries = _pad_stack([item["boundaries"].long() for item in items], -1) if has_boundaries else None
        return Batch(
            features=features,
            feat_lengths=feat_lengths,
            feat_mask=lengths_to_mask(feat_lengths, features.shape[1]),
            tokens=tokens,
            token_lengths=token_lengths,
            token_mask=lengths_to_mask(token_lengths, tokens.shape[1]),
            durations=torch.tensor([float(item["duration_s"]) for item in items], dtype=torch.float32),
            boundaries=boundaries,
            ids=[item["id"] for item in items],
            texts=[item["text"] for item in items],
            words=[item.get("words") for item in items],
        )


class LengthBucketBatchSampler(Sampler[list[int]]):
    """Batches of similar length so that padding stays small; shardable across processes.

    Per epoch: shuffle all indices (seeded by ``seed`` and the epoch), cut them into pools of
    ``global_batch * pool_batches``, sort each pool by length, cut pools into global batches of
    ``batch_size * num_replicas`` items, shuffle the batch order. Without ``shuffle`` the indices are
    sorted by length once. Process ``rank`` takes items ``rank, rank + num_replicas, ...`` of every
    global batch (a global batch smaller than ``num_replicas`` is dropped so every process gets the
    same number of batches). The order is a pure function of (seed, epoch), and ``start_batch``
    skips batches already done (exact resume). ``lengths_of_epoch(epoch)``, when given, supplies the
    lengths of each epoch instead of ``lengths`` (speed perturbation changes them from epoch to epoch).
    """

    def __init__(self, lengths: list[int], batch_size: int, shuffle: bool = True, seed: int = 0,
                 pool_batches: int = 50, drop_last: bool = False, num_replicas: int = 1, rank: int = 0,
                 lengths_of_epoch: Callable[[int], Sequence[int]] | None = None):
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} must be in [0, {num_replicas})")
        self.lengths = list(lengths)
        self.lengths_of_epoch = lengths_of_epoch
        self.batch_size = batch_size
        self.global_batch = batch_size * num_replicas
        self.shuffle = shuffle
        self.seed = seed
        self.pool_batches = pool_batches
        self.drop_last = drop_last
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.start_batch = 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch = epoch
        self.start_batch = start_batch

    def global_batches(self) -> list[list[int]]:
        """All global batches of the current epoch, in order."""
        lengths = self.lengths if self.lengths_of_epoch is None else list(self.lengths_of_epoch(self.epoch))
        order = list(range(len(lengths)))
        if not self.shuffle:
            order.sort(key=lambda i: lengths[i])
            return self._cut(order)
        rng = random.Random(self.seed * 100_003 + self.epoch)
        rng.shuffle(order)
        pool_size = self.global_batch * self.pool_batches
        batches: list[list[int]] = []
        for start in range(0, len(order), pool_size):
            pool = sorted(order[start:start + pool_size], key=lambda i: lengths[i])
            batches.extend(self._cut(pool))
        rng.shuffle(batches)
        return batches

    def batches(self) -> list[list[int]]:
        """This process's batches of the current epoch (before ``start_batch`` is applied)."""
        return [batch[self.rank::self.num_replicas] for batch in self.global_batches()]

    def _cut(self, indices: list[int]) -> list[list[int]]:
        size = self.global_batch
        batches = [indices[i:i + size] for i in range(0, len(indices), size)]
        if batches and (len(batches[-1]) < self.num_replicas or (self.drop_last and len(batches[-1]) < size)):
            batches.pop()
        return batches

    def __iter__(self):
        yield from self.batches()[self.start_batch:]

    def __len__(self) -> int:
        return max(0, len(self.global_batches()) - self.start_batch)
