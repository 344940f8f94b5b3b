"""Continuous integrate-and-fire (CIF) predictor, vectorised over time.

The predictor gives every encoder frame a weight alpha_t in (0, 1). Reading the alphas as
"amount of token" per frame, token k (0-based) owns the slice (k, k+1] of the running sum
c_t = alpha_1 + ... + alpha_t (in units of the firing threshold). Frame t therefore contributes
to token k with weight

    w[t, k] = max(0, min(c_t, k + 1) - max(c_{t-1}, k))

which is exactly what the sequential integrator does (accumulate until the sum reaches the
threshold, fire, carry the remainder into the next token). Each frame touches at most
ceil(max alpha) + 1 consecutive tokens, so the weights are computed for those candidates only
and scatter-added into the token slots with ``index_add`` (no loop over frames).

Token count: in training, the alphas are scaled so that they sum to the target length N
(exactly N tokens fire). At inference the alphas are first multiplied by ``alpha_scale`` (a
calibration buffer, 1 until :func:`fit_alpha_scale` sets it; see below), then
N = floor(c_T) + [frac(c_T) >= tail_threshold], i.e. round(sum alpha) for tail_threshold 0.5:
the leftover mass after the last full fire becomes a final token only if it is at least
``tail_threshold``, and such a partial token (mass < 1) is divided by its mass so that every
acoustic embedding is a weighted mean of frames.

Why a calibration scale: the predictor learns sum(alpha) ~ N on training inputs, seen through
SpecAugment and the encoder's dropout; without them (inference) its sums can come out a few percent
off, by an amount that drifts from epoch to epoch, so words go missing, mostly where two of them run
together (the predictor itself has no dropout before its sigmoid, which biased the sums low).
``alpha_scale`` = sum(N) / sum(alpha) over held-out utterances (the validation set, refitted at every
validation by the training loop) removes that bias, like the running statistics of a batch norm: estimated
from data, never trained by gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from paraformer_asr.checks import assert_shape, check_finite, check_padding_mask, lengths_to_mask

MIN_MASS = 1e-6


@dataclass
class CifOutput:
    """alphas [B, T] raw predictor weights (0 on padding); alpha_sum [B] their sum (quantity);
    integrated_alphas [B, T] the weights actually integrated (scaled to the target length in
    training, ``alphas`` x the ``alpha_scale`` calibration at inference); embeddings [B, N, D]; token_mask [B, N] bool;
    num_tokens [B] long; fire_frames [B, N] long (frame where token k fired, :func:`fire_frames`; -1 on padding)."""

    alphas: torch.Tensor
    alpha_sum: torch.Tensor
    integrated_alphas: torch.Tensor
    embeddings: torch.Tensor
    token_mask: torch.Tensor
    num_tokens: torch.Tensor
    fire_frames: torch.Tensor

    @property
    def frame_weights(self) -> torch.Tensor:
        """[B, T] what the alignment plot draws per encoder frame: the integrated alphas."""
        return self.integrated_alphas

    def select(self, rows: torch.Tensor) -> "CifOutput":
        """The utterances ``rows`` [R] long of this output, N shrunk to their longest count."""
        num_tokens = self.num_tokens[rows]  # [R]
        width = int(num_tokens.max()) if num_tokens.numel() > 0 else 0
        return CifOutput(alphas=self.alphas[rows], alpha_sum=self.alpha_sum[rows],
                         integrated_alphas=self.integrated_alphas[rows], embeddings=self.embeddings[rows, :width],
                         token_mask=self.token_mask[rows, :width], num_tokens=num_tokens,
                         fire_frames=self.fire_frames[rows, :width])

    def without_last_token(self) -> "CifOutput":
        """The same output with each utterance's last token removed (``model.predictor_bias`` 1: the last
        fire is the end-of-sentence token): num_tokens - 1 (at least 0), N shrinks to the new maximum;
        alphas, alpha_sum and integrated_alphas are kept."""
        num_tokens = (self.num_tokens - 1).clamp(min=0)
        width = int(num_tokens.max()) if num_tokens.numel() > 0 else 0
        token_mask = lengths_to_mask(num_tokens, width)  # [B, N'], N' <= N - 1
        embeddings = self.embeddings[:, :width] * token_mask.unsqueeze(-1).to(self.embeddings.dtype)  # [B, N', D]
        return replace(self, embeddings=embeddings, token_mask=token_mask, num_tokens=num_tokens,
                       fire_frames=self.fire_frames[:, :width].masked_fill(~token_mask, -1))


def fit_alpha_scale(alpha_sums: torch.Tensor, target_lengths: torch.Tensor) -> float:
    """The inference scale that makes the predicted token counts right on average over a set of utterances:
    alpha_sums [U] (raw sums of alpha, threshold units), target_lengths [U] -> sum(N) / sum(alpha_sum) as a
    float; 1.0 when there is no alpha mass to scale."""
    dims = assert_shape(alpha_sums, "U", "alpha_sums")
    assert_shape(target_lengths, "U", "target_lengths", dims)
    total_alpha = float(alpha_sums.double().sum())
    if total_alpha < MIN_MASS:
        return 1.0
    return float(target_lengths.double().sum()) / total_alpha


def scale_to_counts(alphas: torch.Tensor, counts: torch.Tensor, sums: torch.Tensor | None = None) -> torch.Tensor:
    """alphas [B, T] (threshold units), counts [B] -> the alphas scaled so that each row sums to its count (how
    training places exactly N fires, and how length candidates place N +- k). ``sums`` [B]: the rows' sums when
    already computed (training passes the quantity loss's, so that one sum feeds both and autograd adds up one path)."""
    sums = alphas.sum(dim=1) if sums is None else sums
    scale = counts.to(alphas.dtype) / sums.clamp(min=MIN_MASS)  # [B]
    return alphas * scale.unsqueeze(1)


def inference_token_count(alphas: torch.Tensor, tail_threshold: float = 0.5) -> torch.Tensor:
    """alphas [B, T] (threshold units) -> token count [B] long: full fires + 1 if the tail >= tail_threshold."""
    total = alphas.sum(dim=1)
    full = torch.floor(total)
    return (full + (total - full >= tail_threshold).to(full.dtype)).long()


def token_share(previous: torch.Tensor, cumsum: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The part of a frame's running-sum interval (c_{t-1}, c_t] that lies in token k's slice (k, k + 1]:
    max(0, min(c_t, k + 1) - max(c_{t-1}, k)), broadcast over float64 ``previous``, ``cumsum`` and ``tokens``."""
    return (torch.minimum(cumsum, tokens + 1.0) - torch.maximum(previous, tokens)).clamp(min=0.0)


def frame_token_weights(alphas: torch.Tensor, num_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """How much of each frame's weight goes to which token.

    alphas [B, T] (threshold units, >= 0), num_tokens [B] long -> (weights [B, T, K] float64, slots [B, T, K]
    long): frame t gives ``weights[b, t, j]`` to token ``slots[b, t, j]``, its j-th candidate (tokens
    floor(c_{t-1}) .. floor(c_{t-1}) + K - 1, K = ceil(max alpha) + 1). Candidates at or past ``num_tokens``
    get weight 0 and the overflow slot N = max(num_tokens).
    """
    batch = alphas.shape[0]
    max_tokens = int(num_tokens.max()) if batch > 0 else 0
    # Positions on the "token axis" in float64: c_t reaches ~N, and float32 would lose ~1e-5 there.
    cumsum = torch.cumsum(alphas.double(), dim=1)  # [B, T]  c_t
    previous = cumsum - alphas.double()  # [B, T]  c_{t-1}
    touched = int(math.ceil(float(alphas.detach().max()))) + 1 if alphas.numel() > 0 else 1
    first = torch.floor(previous.detach()).long().clamp(min=0)  # [B, T] first token each frame touches
    candidates = first.unsqueeze(-1) + torch.arange(touched, device=alphas.device)  # [B, T, K] token ids
    keep = candidates < num_tokens.view(batch, 1, 1)
    weights = token_share(previous.unsqueeze(-1), cumsum.unsqueeze(-1), candidates.double()) * keep  # [B, T, K]
    slots = torch.where(keep, candidates, torch.full_like(candidates, max_tokens))
    return weights, slots


def scatter_to_tokens(values: torch.Tensor, slots: torch.Tensor, num_tokens: int, reduce: str,
                      fill: float) -> torch.Tensor:
    """Gather per-token results from every frame's candidates (:func:`frame_token_weights`).

    values [B, T, K, *] (what frame t gives its j-th candidate), slots [B, T, K] long (the candidates' token ids,
    ``num_tokens`` for the overflow slot) -> [B, num_tokens, *]: the values of each token reduced by ``reduce``
    ("sum", "amin" or "amax"; the last two for [B, T, K] values), ``fill`` where no value lands. Batch rows are
    flattened to rows b * (num_tokens + 1) + slot of one buffer, so one index_add / scatter_reduce does all.
    """
    batch, rest = slots.shape[0], values.shape[3:]
    rows = (slots + (torch.arange(batch, device=slots.device) * (num_tokens + 1)).view(batch, 1, 1)).reshape(-1)
    flat = values.reshape(rows.numel(), *rest)  # [B*T*K, *]
    out = values.new_full((batch * (num_tokens + 1), *rest), fill)
    out = out.index_add(0, rows, flat) if reduce == "sum" else out.scatter_reduce(0, rows, flat, reduce)
    return out.view(batch, num_tokens + 1, *rest)[:, :num_tokens]


def fire_frames(alphas: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
    """The frame where each token fires: alphas [B, T] (integrated, threshold units, 0 on padding), token_mask
    [B, N] bool -> [B, N] long, the first frame with c_t >= k + 1 (the last frame with alpha > 0 for a partial
    tail token), -1 on padding. Running sums in float64. While an ONNX export traces it (the TorchScript exporter
    has no searchsorted), the frames before each fire are counted by comparison instead: the same numbers."""
    cumsum = torch.cumsum(alphas.detach().double(), dim=1)  # [B, T]  c_t
    levels = torch.arange(1, token_mask.shape[1] + 1, device=alphas.device, dtype=torch.float64)  # [N]  k + 1
    if torch.onnx.is_in_onnx_export():
        fire = (cumsum.unsqueeze(-1) < levels).long().sum(dim=1)  # [B, N] frames before c_t reaches k + 1
    else:
        fire = torch.searchsorted(cumsum.contiguous(), levels.expand(cumsum.shape[0], -1).contiguous())  # [B, N]
    last_active = (alphas > 0).long().cumsum(1).argmax(1)  # [B] last frame with alpha > 0
    fire = torch.minimum(fire, last_active.unsqueeze(1))
    return torch.where(token_mask, fire, torch.full_like(fire, -1))


def cif_integrate(hidden: torch.Tensor, alphas: torch.Tensor,
                  num_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Vectorised integrate-and-fire.

    hidden [B, T, D], alphas [B, T] (threshold units, >= 0, zero on padding), num_tokens [B] long
    -> embeddings [B, N, D] (N = max num_tokens, zeros on padding), token_mask [B, N] bool,
    fire_frames [B, N] long (:func:`fire_frames`).
    """
    dims = assert_shape(hidden, "B,T,D", "cif hidden")
    assert_shape(alphas, "B,T", "cif alphas", dims)
    assert_shape(num_tokens, "B", "cif num_tokens", dims)
    max_tokens = int(num_tokens.max()) if hidden.shape[0] > 0 else 0
    weights, slots = frame_token_weights(alphas, num_tokens)  # [B, T, K] each
    weights = weights.to(hidden.dtype)

    contributions = weights.unsqueeze(-1) * hidden.unsqueeze(2)  # [B, T, K, D]
    sums = scatter_to_tokens(contributions, slots, max_tokens, "sum", 0.0)  # [B, N, D]
    mass = scatter_to_tokens(weights, slots, max_tokens, "sum", 0.0)  # [B, N]

    token_mask = lengths_to_mask(num_tokens, max_tokens)
    partial = token_mask & (mass < 1.0)
    scale = torch.where(partial, 1.0 / mass.clamp(min=MIN_MASS), torch.ones_like(mass))
    embeddings = sums * scale.unsqueeze(-1)
    return embeddings, token_mask, fire_frames(alphas, token_mask)


def dense_cif_integrate(hidden: torch.Tensor, alphas: torch.Tensor, num_tokens: torch.Tensor,
                        slots: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`cif_integrate` written for export (models/export graphs): the same weights and outputs, but over
    ``slots`` token positions fixed by the input's shape instead of max(num_tokens), so that no shape depends on
    the data, and with dense [B, T, slots] weights and a batched matmul instead of the scatter-add.

    hidden [B, T, D], alphas [B, T] (threshold units, >= 0, zero on padding), num_tokens [B] long (<= slots)
    -> embeddings [B, slots, D] (zeros past each count), token_mask [B, slots] bool, fire_frames [B, slots] long
    (:func:`fire_frames`, -1 past each count). Running sums in float64, as in :func:`cif_integrate`.
    """
    cumsum = torch.cumsum(alphas.double(), dim=1)  # [B, T]  c_t
    previous = cumsum - alphas.double()  # [B, T]  c_{t-1}
    tokens = torch.arange(slots, device=hidden.device, dtype=torch.float64)  # [N]
    token_mask = tokens.unsqueeze(0) < num_tokens.unsqueeze(1)  # [B, N]
    weights = token_share(previous.unsqueeze(-1), cumsum.unsqueeze(-1), tokens)  # [B, T, N]
    weights = weights * token_mask.unsqueeze(1)
    sums = torch.bmm(weights.transpose(1, 2).to(hidden.dtype), hidden)  # [B, N, D]
    mass = weights.sum(dim=1)  # [B, N]
    partial = token_mask & (mass < 1.0)
    scale = torch.where(partial, 1.0 / mass.clamp(min=MIN_MASS), torch.ones_like(mass))  # [B, N]
    embeddings = sums * scale.unsqueeze(-1).to(hidden.dtype)  # [B, N, D]
    return embeddings, token_mask, fire_frames(alphas, token_mask)


class CifPredictor(nn.Module):
    """Conv1d over time -> ReLU -> Linear -> sigmoid gives alpha per encoder frame.

    No dropout before the sigmoid: the sigmoid is convex below 0.5, so noise there raises the mean alpha in
    training (Jensen), the quantity loss fits that inflated sum to N, and the eval-mode sums come out low.

    forward(hidden [B, T, D], mask [B, T] bool, target_lengths [B] | None) -> CifOutput.
    With ``target_lengths`` (training) the alphas are scaled to sum to them; without, they are multiplied
    by the ``alpha_scale`` buffer (see the module docstring) and the token count comes from
    :func:`inference_token_count`.
    """

    def __init__(self, d_model: int, kernel_size: int = 3, threshold: float = 1.0, tail_threshold: float = 0.5):
        super().__init__()
        self.d_model = d_model
        self.threshold = threshold
        self.tail_threshold = tail_threshold
        self.conv = nn.Conv1d(d_model, d_model, kernel_size, padding=kernel_size // 2)
        self.proj = nn.Linear(d_model, 1)
        self.register_buffer("alpha_scale", torch.ones(()))  # scalar, set by fit_alpha_scale, not by gradient

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Checkpoints written before the calibration scale existed hold no alpha_scale: they keep the raw alphas.
        state_dict.setdefault(prefix + "alpha_scale", torch.ones(()))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def predict_alphas(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """hidden [B, T, D], mask [B, T] -> alphas [B, T] in (0, 1), exactly 0 on padding."""
        hidden = hidden.masked_fill(~mask.unsqueeze(-1), 0.0)  # the conv must see zeros past the end
        x = torch.relu(self.conv(hidden.transpose(1, 2))).transpose(1, 2)  # [B, T, D]
        alphas = torch.sigmoid(self.proj(x)).squeeze(-1)  # [B, T]
        return alphas * mask

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor,
                target_lengths: torch.Tensor | None = None) -> CifOutput:
        dims = assert_shape(hidden, f"B,T,{self.d_model}", "predictor input")
        check_padding_mask(mask, "predictor mask", (dims["B"], dims["T"]))
        # The alphas and their sums run in float32 even under autocast: in bf16 a sum near 154 has a step
        # of 1.0, so the quantity loss could not see sub-token errors. The embeddings go back to the input's dtype.
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            hidden32 = hidden.float()
            alphas = self.predict_alphas(hidden32, mask)
            check_finite(alphas, "cif alphas")
            threshold_alphas = alphas / self.threshold  # [B, T] in threshold units
            alpha_sum = threshold_alphas.sum(dim=1)  # [B]
            if target_lengths is not None:
                assert_shape(target_lengths, "B", "target_lengths", dims)
                integrated = scale_to_counts(threshold_alphas, target_lengths, alpha_sum)
                num_tokens = target_lengths.long()
            else:
                integrated = threshold_alphas * self.alpha_scale
                num_tokens = inference_token_count(integrated, self.tail_threshold / self.threshold)
            embeddings, token_mask, fires = cif_integrate(hidden32, integrated, num_tokens)
        return CifOutput(alphas=alphas, alpha_sum=alpha_sum, integrated_alphas=integrated,
                         embeddings=embeddings.to(hidden.dtype), token_mask=token_mask, num_tokens=num_tokens,
                         fire_frames=fires)
