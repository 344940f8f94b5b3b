"""Token n-gram language model with interpolated Kneser-Ney smoothing, for shallow fusion.

It works on token ids, whatever they stand for: characters with ``data.tokenizer: char``, subword units with
``bpe`` / ``unigram`` (then an order-N model spans N subword units, usually more than N characters).

Estimation (Chen & Goodman's interpolated Kneser-Ney with one discount per order):
    Each training sequence is padded as ``[bos] * (order - 1) + tokens + [eos]``; every position after the padding
    is one event (``eos`` included, ``bos`` and ``pad`` never predicted).
    Adjusted count a(g) of an m-gram g: the raw count for the highest order and for n-grams that start with ``bos``
    (they have no left context), otherwise the continuation count |{x : c(x g) > 0}|.
    Discount per order: D_m = n1 / (n1 + 2 n2) from the number of m-grams with adjusted count 1 and 2 (0.5 when
    either is zero).
    P_m(w | h) = max(a(h w) - D_m, 0) / a(h .) + D_m * |{w : a(h w) > 0}| / a(h .) * P_{m-1}(w | h[1:])
    with P_0 uniform over the predictable tokens, and P_m(w | h) = P_{m-1}(w | h[1:]) when h was never seen.

After fitting, the full interpolated distribution of every seen context (of every length 0 .. order-1) is stored as
one row of a dense log-probability table [num_contexts, V], shortest contexts first. A context of k tokens is
encoded as an integer in base V (its newest token least significant) plus the offset V^0 + ... + V^(k-1), so the
keys of all lengths form one sorted array whose positions are the table's rows. A query encodes every suffix of
its history at once (a cumulative sum), finds them all with one binary search, and takes the longest seen one: the
highest position found.

Contract: log_probs(histories int64 [B, H]) -> float32 [B, V]; logsumexp over the predictable tokens is 0; ``pad``,
``bos`` and ``exclude_ids`` get -inf. Histories are right-aligned (the last column is the previous token) and may be
left-padded with ``pad_id`` or ``bos_id``: both mean "start of sentence".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from paraformer_asr.checks import assert_shape
from paraformer_asr.errors import DataError

SMOOTHING = "interpolated_kneser_ney"
_FALLBACK_DISCOUNT = 0.5


class TokenNgramLM:
    """Interpolated Kneser-Ney n-gram model over token ids ``0 .. vocab_size - 1``."""

    def __init__(
        self,
        order: int,
        vocab_size: int,
        bos_id: int,
        eos_id: int,
        pad_id: int,
        exclude_ids: Sequence[int] = (),
    ) -> None:
        if order < 1:
            raise ValueError(f"n-gram order must be >= 1, got {order}")
        special = {"bos_id": bos_id, "eos_id": eos_id, "pad_id": pad_id}
        for name, value in [*special.items(), *(("exclude_ids", v) for v in exclude_ids)]:
            if not 0 <= value < vocab_size:
                raise ValueError(f"{name} {value} is outside the vocabulary [0, {vocab_size})")
        if len({bos_id, eos_id, pad_id}) != 3 or eos_id in exclude_ids:
            raise ValueError("bos_id, eos_id and pad_id must differ and eos_id cannot be excluded")
        if vocab_size ** max(order - 1, 1) >= 2**62:
            raise ValueError(f"vocab_size {vocab_size} ** (order - 1) is too large to encode contexts")
        self.order = int(order)
        self.vocab_size = int(vocab_size)
        self.bos_id, self.eos_id, self.pad_id = int(bos_id), int(eos_id), int(pad_id)
        self.exclude_ids = sorted({int(i) for i in exclude_ids})
        predictable = torch.ones(vocab_size, dtype=torch.bool)
        predictable[[self.bos_id, self.pad_id, *self.exclude_ids]] = False
        self.predictable = predictable  # [V]
        self.ngram_counts: dict[tuple[int, ...], int] = {}
        self.discounts: list[float] = []  # D_1 .. D_order
        context_length = self.order - 1
        self._suffix_powers = vocab_size ** torch.arange(context_length, dtype=torch.int64)  # [order - 1]: V^j
        self._length_offsets = torch.cat([torch.zeros(1, dtype=torch.int64),
                                          self._suffix_powers.cumsum(0)])  # [order]: V^0 + ... + V^(k-1)
        self._context_keys: torch.Tensor | None = None  # [num_contexts] sorted int64: encoded key + length offset
        self._table: torch.Tensor | None = None  # [num_contexts, V] log-probabilities, rows as the keys

    # ----------------------------------------------------------------------------------------------- estimation
    def fit(self, sequences: Iterable[Sequence[int]]) -> TokenNgramLM:
        """Estimate from token-id sequences (transcripts without bos/eos). Returns self."""
        counts: Counter[tuple[int, ...]] = Counter()
        allowed = set(self.predictable.nonzero().flatten().tolist()) - {self.eos_id}
        num_sequences = 0
        for sequence in sequences:
            tokens = [int(t) for t in sequence]
            bad = set(tokens) - allowed
            if bad:
                raise ValueError(f"token ids {sorted(bad)} cannot occur inside a training sequence")
            padded = [self.bos_id] * (self.order - 1) + tokens + [self.eos_id]
            counts.update(tuple(padded[i : i + self.order]) for i in range(len(padded) - self.order + 1))
            num_sequences += 1
        if num_sequences == 0:
            raise DataError("cannot estimate an n-gram language model from zero sequences")
        self.ngram_counts = dict(counts)
        self._build()
        return self

    def _build(self) -> None:
        adjusted = self._adjusted_counts()  # per order m = 1..order: {m-gram: adjusted count}
        self.discounts = [_discount(adjusted[m].values()) for m in range(1, self.order + 1)]
        uniform = self.predictable.double() / self.predictable.sum()  # [V]
        lower_rows = uniform[None, :]  # P_0, one row for the empty "context of the context"
        lower_keys = torch.zeros(1, dtype=torch.int64)
        keys_per_length, rows_per_length = [], []
        for m in range(1, self.order + 1):
            keys, counts = self._context_matrix(adjusted[m], m - 1)  # [C], [C, V]
            backoff = lower_rows[self._lookup_suffix_rows(keys, m - 1, lower_keys)]  # [C, V]
            discount = self.discounts[m - 1]
            total = counts.sum(dim=1, keepdim=True)  # [C, 1]
            types = (counts > 0).sum(dim=1, keepdim=True)  # [C, 1]
            rows = (counts - discount).clamp(min=0) / total + discount * types / total * backoff  # [C, V]
            keys_per_length.append(keys)
            rows_per_length.append(rows)
            lower_rows, lower_keys = rows, keys
        self._context_keys = torch.cat([keys + self._length_offsets[k] for k, keys in enumerate(keys_per_length)])
        self._table = torch.cat(rows_per_length).log().float()  # zeros (unpredictable tokens) become -inf

    def _adjusted_counts(self) -> list[dict[tuple[int, ...], int]]:
        """Adjusted counts per order, derived from the highest-order raw counts (index m = n-gram length)."""
        raw: list[dict[tuple[int, ...], int]] = [{} for _ in range(self.order + 1)]
        raw[self.order] = self.ngram_counts
        adjusted: list[dict[tuple[int, ...], int]] = [{} for _ in range(self.order + 1)]
        adjusted[self.order] = self.ngram_counts
        for m in range(self.order - 1, 0, -1):
            raw_m: defaultdict[tuple[int, ...], int] = defaultdict(int)
            continuation: defaultdict[tuple[int, ...], int] = defaultdict(int)
            for gram, count in raw[m + 1].items():
                raw_m[gram[1:]] += count  # every event has exactly one m-gram ending at it
                continuation[gram[1:]] += 1  # one more distinct left extension
            raw[m] = dict(raw_m)
            adjusted[m] = {g: (raw_m[g] if g[0] == self.bos_id else continuation[g]) for g in raw_m}
        return adjusted

    def _context_matrix(self, grams: Mapping[tuple[int, ...], int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Group m-grams by their context (first ``length`` tokens): sorted keys [C] and counts [C, V] float64."""
        contexts = sorted({gram[:length] for gram in grams})
        keys = torch.tensor([self._encode(context) for context in contexts], dtype=torch.int64)
        row_of = {context: row for row, context in enumerate(contexts)}
        counts = torch.zeros(len(contexts), self.vocab_size, dtype=torch.float64)
        rows = torch.tensor([row_of[gram[:length]] for gram in grams], dtype=torch.int64)
        columns = torch.tensor([gram[length] for gram in grams], dtype=torch.int64)
        counts[rows, columns] = torch.tensor(list(grams.values()), dtype=torch.float64)
        order = torch.argsort(keys)
        return keys[order], counts[order]

    def _encode(self, context: Sequence[int]) -> int:
        key = 0
        for token in context:
            key = key * self.vocab_size + token
        return key

    def _lookup_suffix_rows(self, keys: torch.Tensor, length: int, lower_keys: torch.Tensor) -> torch.Tensor:
        """Row in the next-lower table of each context's suffix without its first token (always present)."""
        if length == 0:
            return torch.zeros_like(keys)
        suffix_keys = keys % (self.vocab_size ** (length - 1))  # drop the most significant (oldest) token
        return torch.searchsorted(lower_keys, suffix_keys)

    # ----------------------------------------------------------------------------------------------- queries
    def log_probs(self, histories: torch.Tensor) -> torch.Tensor:
        """Next-token log-probabilities. histories int64 [B, H] (H >= 0) -> float32 [B, V]."""
        table = self._fitted_table()
        assert_shape(histories, "B,H", name="n-gram LM histories")
        histories = histories.long().cpu()
        if histories.numel() and (histories.min() < 0 or histories.max() >= self.vocab_size):
            raise ValueError(f"history token ids must be in [0, {self.vocab_size})")
        context_length = self.order - 1
        if context_length == 0:
            return table[torch.zeros(histories.shape[0], dtype=torch.int64)]  # [B, V]: the unigram row
        start = torch.full((histories.shape[0], context_length), self.bos_id, dtype=torch.int64)
        contexts = torch.cat([start, histories], dim=1)[:, -context_length:]  # [B, order - 1], newest last
        contexts = contexts.masked_fill(contexts == self.pad_id, self.bos_id)
        suffixes = (contexts.flip(1) * self._suffix_powers).cumsum(dim=1)  # [B, order - 1]: the last 1, 2, .. tokens
        queries = suffixes + self._length_offsets[1:]  # [B, order - 1]
        keys = self._context_keys
        position = torch.searchsorted(keys, queries).clamp(max=keys.numel() - 1)  # [B, order - 1]
        found = keys[position] == queries
        rows = torch.where(found, position, 0).amax(dim=1)  # [B]: the longest seen suffix (row 0: no context)
        return table[rows]  # [B, V]

    def score_sequence(self, tokens: Sequence[int], include_eos: bool = True) -> float:
        """Natural-log probability of a token sequence (without bos), plus the final eos when ``include_eos``."""
        tokens = [int(t) for t in tokens]
        targets = tokens + [self.eos_id] if include_eos else tokens
        if not targets:
            return 0.0
        padded = torch.tensor([self.bos_id] * max(self.order - 1, 0) + tokens, dtype=torch.int64)
        width = self.order - 1
        histories = padded.unfold(0, width, 1)[: len(targets)] if width else torch.zeros(len(targets), 0).long()
        log_probs = self.log_probs(histories)  # [L, V]
        return log_probs[torch.arange(len(targets)), torch.tensor(targets)].double().sum().item()

    def _fitted_table(self) -> torch.Tensor:
        if self._table is None:
            raise RuntimeError("TokenNgramLM is not fitted: call fit() or from_dict() first")
        return self._table

    # ----------------------------------------------------------------------------------------------- storage
    def to_dict(self) -> dict[str, Any]:
        """Plain types only (safe in checkpoints loaded with ``weights_only=True``); tables are rebuilt on load."""
        self._fitted_table()
        return {
            "smoothing": SMOOTHING,
            "order": self.order,
            "vocab_size": self.vocab_size,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "pad_id": self.pad_id,
            "exclude_ids": list(self.exclude_ids),
            "ngram_counts": [[*gram, count] for gram, count in sorted(self.ngram_counts.items())],
        }

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> TokenNgramLM:
        try:
            if state["smoothing"] != SMOOTHING:
                raise ValueError(f"unknown smoothing {state['smoothing']!r}")
            model = cls(
                state["order"], state["vocab_size"], state["bos_id"], state["eos_id"], state["pad_id"],
                state["exclude_ids"],
            )
            counts = {tuple(int(t) for t in row[:-1]): int(row[-1]) for row in state["ngram_counts"]}
            if not counts or any(len(gram) != model.order for gram in counts):
                raise ValueError("n-gram counts are empty or of the wrong order")
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise DataError(f"invalid n-gram language model state: {err}") from None
        model.ngram_counts = counts
        model._build()
        return model


def _discount(adjusted_counts: Iterable[int]) -> float:
    histogram = Counter(adjusted_counts)
    n1, n2 = histogram.get(1, 0), histogram.get(2, 0)
    if n1 == 0 or n2 == 0:
        return _FALLBACK_DISCOUNT
    return n1 / (n1 + 2 * n2)
