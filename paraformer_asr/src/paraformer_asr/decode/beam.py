"""Beam search over per-position posteriors of a non-autoregressive model."""

from __future__ import annotations

from typing import Callable, Protocol

import torch

from paraformer_asr.checks import assert_shape

# history [B*beam, k] long, position k -> log-probs [B*beam, V] (e.g. the token n-gram LM)
PrefixScorer = Callable[[torch.Tensor], torch.Tensor]


class StateScorer(Protocol):
    """A scorer that keeps a state per hypothesis instead of reading its history (e.g. the hotword trie's node,
    decode/hotwords.py): the search carries the state [R, ...] (R = B * beam) through its reordering."""

    def initial_state(self, rows: int) -> torch.Tensor:
        """The state of ``rows`` empty hypotheses: [R, ...]."""

    def __call__(self, state: torch.Tensor, position: int) -> torch.Tensor:
        """state [R, ...] -> [R, V]: what each next token at ``position`` adds to the score."""

    def advance(self, state: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """state [R, ...] of the hypotheses kept, tokens [R] the token each was extended with -> the new state."""


def factorized_beam_search(log_probs: torch.Tensor, token_mask: torch.Tensor, beam_size: int, pad_id: int,
                           prefix_scorer: PrefixScorer | None = None, scorer_weight: float = 0.0,
                           state_scorer: StateScorer | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """k-best sequences of a position-wise factorised distribution, batched over utterances.

    log_probs [B, N, V], token_mask [B, N] bool -> tokens [B, beam, N] (pad_id past each
    utterance's length) and scores [B, beam] (sum of log-probs, plus ``scorer_weight`` times the
    prefix scorer's log-probs when one is given, plus the state scorer's terms when one is given), best first.
    Beams that cannot exist (fewer than ``beam`` distinct sequences) score -inf. The loop runs over token
    positions, not frames.
    """
    dims = assert_shape(log_probs, "B,N,V", "beam log_probs")
    assert_shape(token_mask, "B,N", "beam token_mask", dims)
    batch, length, vocab = log_probs.shape
    device = log_probs.device
    scores = torch.full((batch, beam_size), float("-inf"), device=device)
    scores[:, 0] = 0.0
    tokens = torch.full((batch, beam_size, 0), pad_id, dtype=torch.long, device=device)
    pad_only = torch.full((vocab,), float("-inf"), device=device)
    pad_only[pad_id] = 0.0
    state = state_scorer.initial_state(batch * beam_size) if state_scorer is not None else None
    first_rows = (torch.arange(batch, device=device) * beam_size).unsqueeze(1)  # [B, 1]
    for position in range(length):
        step = log_probs[:, position].float()  # [B, V]
        if prefix_scorer is not None and scorer_weight != 0.0:
            history = tokens.reshape(batch * beam_size, position)
            step = step.unsqueeze(1) + scorer_weight * prefix_scorer(history).view(batch, beam_size, vocab)
        else:
            step = step.unsqueeze(1).expand(batch, beam_size, vocab)
        if state_scorer is not None:
            step = step + state_scorer(state, position).view(batch, beam_size, vocab)
        active = token_mask[:, position].view(batch, 1, 1)
        step = torch.where(active, step, pad_only.view(1, 1, vocab))  # finished utterances only extend with pad
        total = (scores.unsqueeze(-1) + step).reshape(batch, beam_size * vocab)
        scores, flat = total.topk(beam_size, dim=1)  # [B, beam]
        origin = torch.div(flat, vocab, rounding_mode="floor")
        chosen = flat % vocab
        if state_scorer is not None:
            kept = (first_rows + origin).flatten()  # [B*beam] the rows the new beams extend
            state = state_scorer.advance(state.index_select(0, kept), chosen.flatten())
        tokens = torch.cat([tokens.gather(1, origin.unsqueeze(-1).expand(-1, -1, position)),
                            chosen.unsqueeze(-1)], dim=2)
    return tokens, scores
