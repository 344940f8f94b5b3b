"""Glancing language model sampler (GLM) for training the non-autoregressive decoder."""

from __future__ import annotations

import torch

from paraformer_asr.checks import assert_shape


def glancing_mix(acoustic: torch.Tensor, target_embeddings: torch.Tensor, first_pass_tokens: torch.Tensor,
                 targets: torch.Tensor, token_mask: torch.Tensor, ratio: float,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace some acoustic embeddings by target-token embeddings.

    acoustic / target_embeddings [B, N, D], first_pass_tokens / targets [B, N] long, token_mask
    [B, N] bool. Per utterance, d = number of valid positions where the first pass is wrong;
    round(ratio * d) valid positions, chosen uniformly at random, get the target embedding.
    Returns (mixed [B, N, D], replaced [B, N] bool).
    """
    dims = assert_shape(acoustic, "B,N,D", "glancing acoustic")
    assert_shape(target_embeddings, "B,N,D", "glancing target_embeddings", dims)
    assert_shape(first_pass_tokens, "B,N", "glancing first_pass_tokens", dims)
    assert_shape(targets, "B,N", "glancing targets", dims)
    wrong = ((first_pass_tokens != targets) & token_mask).sum(dim=1)  # [B]
    num_replace = torch.round(wrong.to(torch.float32) * ratio).long()  # [B]
    noise = torch.rand(targets.shape, generator=generator, device=targets.device)
    noise = noise.masked_fill(~token_mask, 2.0)  # padding sorts last, never chosen
    rank = noise.argsort(dim=1).argsort(dim=1)  # rank of each position among its row
    replaced = (rank < num_replace.unsqueeze(1)) & token_mask
    mixed = torch.where(replaced.unsqueeze(-1), target_embeddings, acoustic)
    return mixed, replaced
