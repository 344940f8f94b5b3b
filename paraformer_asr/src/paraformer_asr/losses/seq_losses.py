"""Sequence losses: masked label-smoothed cross-entropy, CIF quantity loss, CTC."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from paraformer_asr.checks import assert_shape


def label_smoothed_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
                                 smoothing: float = 0.0) -> torch.Tensor:
    """Mean over valid tokens. logits [B, N, V], targets [B, N] long, mask [B, N] bool -> scalar.

    Returns 0 (with a graph) when the batch has no valid token.
    """
    dims = assert_shape(logits, "B,N,V", "ce logits")
    assert_shape(targets, "B,N", "ce targets", dims)
    assert_shape(mask, "B,N", "ce mask", dims)
    if not bool(mask.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[mask].float(), targets[mask], label_smoothing=smoothing)


def quantity_loss(alpha_sum: torch.Tensor, target_lengths: torch.Tensor,
                  length_normalized: bool = False) -> torch.Tensor:
    """|sum(alpha) - N| summed over the batch, divided by the batch size (a mean per utterance) or, with
    ``length_normalized``, by the number of target tokens sum(N) (FunASR's ``mae_loss(normalize_length=True)``).
    alpha_sum [B], target_lengths [B] -> scalar."""
    dims = assert_shape(alpha_sum, "B", "alpha_sum")
    assert_shape(target_lengths, "B", "target_lengths", dims)
    errors = (alpha_sum - target_lengths.to(alpha_sum.dtype)).abs()  # [B]
    if length_normalized:
        return errors.sum() / target_lengths.sum().clamp(min=1).to(errors.dtype)
    return errors.mean()


def hybrid_loss_weights(ctc_weight: float, combination: str) -> tuple[float, float]:
    """(weight of the decoder's loss, weight of the auxiliary CTC loss) of a model trained with both.

    'add': (1, ctc_weight), i.e. ce + ctc_weight * ctc; 'interpolate': (1 - ctc_weight, ctc_weight), FunASR's
    (1 - w) * att + w * ctc. A model without a CTC head passes ``ctc_weight`` 0 and gets (1, 0).
    """
    if combination == "add":
        return 1.0, ctc_weight
    if combination == "interpolate":
        return 1.0 - ctc_weight, ctc_weight
    raise ValueError(f"ctc combination must be 'add' or 'interpolate', got {combination!r}")


def ctc_loss(log_probs: torch.Tensor, input_lengths: torch.Tensor, targets: torch.Tensor,
             target_lengths: torch.Tensor, blank_id: int, normalization: str = "token") -> torch.Tensor:
    """CTC summed over the batch and divided by its target tokens (``normalization`` 'token') or by its utterances
    ('utterance'). log_probs [B, T, V], input_lengths [B], targets [B, S], target_lengths [B].

    Utterances whose target cannot fit in the encoder frames give an infinite loss; those are
    zeroed (``zero_infinity``) instead of turning the whole batch into NaN.
    """
    dims = assert_shape(log_probs, "B,T,V", "ctc log_probs")
    assert_shape(targets, "B,S", "ctc targets", dims)
    loss = F.ctc_loss(log_probs.transpose(0, 1), targets, input_lengths, target_lengths, blank=blank_id,
                      reduction="sum", zero_infinity=True)
    if normalization == "utterance":
        return loss / max(targets.shape[0], 1)
    if normalization != "token":
        raise ValueError(f"ctc normalization must be 'token' or 'utterance', got {normalization!r}")
    return loss / target_lengths.sum().clamp(min=1)
