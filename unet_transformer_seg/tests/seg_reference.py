"""Plain-loop reference implementations that the vectorised code is checked against."""

import math

import torch


def attention_reference(mha, query, key, value, mask=None):
    """Loop over batch items, heads and queries; mask [B, T, S] bool (True = attend) or None."""
    batch, length, dim = query.shape
    q, k, v = mha.q_proj(query), mha.k_proj(key), mha.v_proj(value)
    out = torch.zeros(batch, length, dim)
    d = mha.head_dim
    for b in range(batch):
        for h in range(mha.num_heads):
            cols = slice(h * d, (h + 1) * d)
            for t in range(length):
                scores = torch.stack([q[b, t, cols] @ k[b, s, cols] / math.sqrt(d) for s in range(key.shape[1])])
                if mask is not None:
                    scores = scores.masked_fill(~mask[b, t], float("-inf"))
                weights = torch.softmax(scores, dim=0)
                out[b, t, cols] = (weights[:, None] * v[b, :, cols]).sum(0)
    return mha.out_proj(out)


def confusion_reference(pred, target, num_classes):
    """Counts pixel by pixel."""
    matrix = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    for p, t in zip(pred.flatten().tolist(), target.flatten().tolist()):
        matrix[t, p] += 1
    return matrix
