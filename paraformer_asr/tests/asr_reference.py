"""Plain-loop reference implementations used to check the vectorised code (test helper)."""

from __future__ import annotations

import torch


def loop_cif(hidden: torch.Tensor, alphas: torch.Tensor, num_tokens: torch.Tensor) -> tuple[list, list]:
    """Sequential integrate-and-fire, one frame at a time (threshold 1).

    hidden [B, T, D], alphas [B, T], num_tokens [B] -> (per utterance: list of embeddings [D],
    list of fire frames). A frame whose alpha completes a token fires it and carries the rest
    over (possibly firing again if alpha > 1); after the last frame an unfinished token is kept
    (divided by its mass) only while fewer than num_tokens have fired.
    """
    all_embeddings, all_fires = [], []
    for b in range(hidden.shape[0]):
        wanted = int(num_tokens[b])
        embeddings, fires = [], []
        acc = 0.0
        current = torch.zeros(hidden.shape[2], dtype=torch.float64)
        last_valid = 0
        for t in range(hidden.shape[1]):
            remaining = float(alphas[b, t])
            if remaining > 0:
                last_valid = t
            frame = hidden[b, t].double()
            while len(embeddings) < wanted and acc + remaining >= 1.0:
                part = 1.0 - acc
                current = current + part * frame
                embeddings.append(current)
                fires.append(t)
                current = torch.zeros_like(current)
                acc = 0.0
                remaining -= part
            if len(embeddings) < wanted:
                acc += remaining
                current = current + remaining * frame
        if len(embeddings) < wanted and acc > 0:
            embeddings.append(current / acc)
            fires.append(last_valid)
        all_embeddings.append(embeddings)
        all_fires.append(fires)
    return all_embeddings, all_fires
