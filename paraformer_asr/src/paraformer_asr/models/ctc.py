"""CTC head on the encoder output (optional auxiliary loss, usable by any model of the package)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from paraformer_asr.losses import ctc_loss


class CtcHead(nn.Module):
    """encoder_out [B, T, D] -> log-probabilities [B, T, V] (blank included in V)."""

    def __init__(self, d_model: int, vocab_size: int):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, encoder_out: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.proj(encoder_out).float(), dim=-1)

    def loss(self, encoder_out: torch.Tensor, enc_mask: torch.Tensor, tokens: torch.Tensor,
             token_lengths: torch.Tensor, blank_id: int, normalization: str = "token") -> torch.Tensor:
        """encoder_out [B, T, D], enc_mask [B, T] bool, tokens [B, S], token_lengths [B] -> scalar CTC loss
        (:func:`ctc_loss`, per target token or per utterance)."""
        return ctc_loss(self(encoder_out), enc_mask.sum(1), tokens, token_lengths, blank_id, normalization)


def optional_ctc_head(d_model: int, vocab_size: int, ctc_weight: float, blank_id: int | None) -> CtcHead | None:
    """The auxiliary CTC head when ``ctc_weight > 0`` (the tokenizer must then have a blank), else None."""
    if ctc_weight <= 0:
        return None
    if blank_id is None:
        raise ValueError("ctc_weight > 0 needs a tokenizer with a blank token")
    return CtcHead(d_model, vocab_size)


def ctc_log_likelihood(log_probs: torch.Tensor, input_lengths: torch.Tensor, tokens: torch.Tensor,
                       token_lengths: torch.Tensor, blank_id: int) -> torch.Tensor:
    """log P_ctc(tokens | frames): the CTC forward algorithm's sum over every alignment of each token sequence.
    log_probs [H, T, V], input_lengths [H], tokens [H, N] (past each length ignored), token_lengths [H] -> [H]
    float; -inf for a sequence no alignment can produce (more frames needed than there are, or a blank among its
    tokens)."""
    positions = torch.arange(tokens.shape[1], device=tokens.device)  # [N]
    valid = positions < token_lengths.unsqueeze(1)  # [H, N]
    has_blank = ((tokens == blank_id) & valid).any(dim=1)  # [H]
    targets = tokens.masked_fill(~valid | (tokens == blank_id), 0 if blank_id != 0 else 1)  # [H, N]
    loss = F.ctc_loss(log_probs.float().transpose(0, 1), targets, input_lengths, token_lengths, blank=blank_id,
                      reduction="none", zero_infinity=False)  # [H]
    return (-loss).masked_fill(has_blank, float("-inf"))


def length_norm(lengths: torch.Tensor, length_penalty: float) -> torch.Tensor:
    """What a hypothesis's summed score is divided by: its token count (at least 1) to the power ``length_penalty``.
    lengths long [...] -> float [...]."""
    return lengths.clamp(min=1).to(torch.float32) ** length_penalty


def ctc_rescored(scores: torch.Tensor, hypotheses: torch.Tensor, lengths: torch.Tensor, log_probs: torch.Tensor,
                 frames: torch.Tensor, blank_id: int, weight: float, length_penalty: float = 1.0) -> torch.Tensor:
    """Hypotheses' normalised scores plus ``weight`` x their CTC log-likelihood (:func:`ctc_log_likelihood`) divided
    by their token count to the power ``length_penalty`` (1: per token, as the scores are by default).
    scores [B, H] (-inf: a hypothesis that does not exist), hypotheses [B, H, N], lengths [B, H], log_probs [B, T, V]
    (the CTC head's, once per utterance), frames [B] -> [B, H]. A hypothesis no alignment can produce gets -inf; an
    utterance none of whose hypotheses can be aligned keeps its scores."""
    batch, width = scores.shape
    likelihood = ctc_log_likelihood(log_probs.repeat_interleave(width, dim=0), frames.repeat_interleave(width),
                                    hypotheses.flatten(0, 1), lengths.flatten(), blank_id).view(batch, width)
    rescored = scores + weight * likelihood / length_norm(lengths, length_penalty)  # [B, H]
    return torch.where(rescored.isfinite().any(dim=1, keepdim=True), rescored, scores)
