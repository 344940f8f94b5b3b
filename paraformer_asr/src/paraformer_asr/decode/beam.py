"""Beam search over per-position posteriors of a non-autoregressive model."""

from __future__ import annotations

from typing import Callable

import torch

from paraformer_asr.checks import assert_shape

# history [B*beam, k] long, position k -> log-probs [B*beam, V] (e.g. the token n-gram LM)
PrefixScorer = Callable[[torch.Tensor], torch.Tensor]


def factorized_beam_search(log_probs: torch.Tensor, token_mask: torch.Tensor, beam_size: int, pad_id: int,
                           prefix_scorer: PrefixScorer | None = None,
                           scorer_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """k-best sequences of a position-wise factorised distribution, batched over utterances.

    log_probs [B, N, V], token_mask [B, N] bool -> tokens [B, beam, N] (pad_id past each
    utterance's length) and scores [B, beam] (sum of log-probs, plus ``scorer_weight`` times the
    prefix scorer's log-probs when one is given), best first. Beams that cannot exist (fewer
    than ``beam`` distinct sequences) score -inf. The loop runs over token positions, not frames.
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
    for position in range(length):
        step = log_probs[:, position].float()  # [B, V]
        if prefix_scorer is not None and scorer_weight != 0.0:
            history = tokens.reshape(batch * beam_size, position)
            step = step.unsqueeze(1) + scorer_weight * prefix_scorer(history).view(batch, beam_size, vocab)
        else:
            step = step.unsqueeze(1).expand(batch, beam_size, vocab)
        active = token_mask[:, position].view(batch, 1, 1)
        step = torch.where(active, step, pad_only.view(1, 1, vocab))  # finished utterances only extend with pad
        total = (scores.unsqueeze(-1) + step).reshape(batch, beam_size * vocab)
        scores, flat = total.topk(beam_size, dim=1)  # [B, beam]
        origin = torch.div(flat, vocab, rounding_mode="floor")
        chosen = flat % vocab
        tokens = torch.cat([tokens.gather(1, origin.unsqueeze(-1).expand(-1, -1, position)),
                            chosen.unsqueeze(-1)], dim=2)
    return tokens, scores
