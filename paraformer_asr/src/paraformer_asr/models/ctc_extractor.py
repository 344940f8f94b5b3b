"""Token extraction from CTC (Paraformer-v2, arXiv 2409.17746): the decoder's queries read off a CTC path.

Instead of the CIF's integrate-and-fire, every output token owns the encoder frames a CTC path assigns to it:

* inference: the greedy CTC path (argmax per frame); consecutive frames with the same non-blank label merge into
  one token, blank frames belong to no token;
* training: the Viterbi forced alignment of the reference under the same CTC posteriors, so the number of
  queries equals the target length and query k belongs to reference token k.

Token k's query is the mean of the encoder states of its frames (``model.ctc_queries: states``), or, as in the
paper, the mean of its frames' CTC posteriors [V] through a linear map to D (``posteriors``: the decoder then
starts from what the CTC head heard, a soft token, and refines it against the encoder). The map is applied per frame
before the mean (a linear map of a mean is the mean of the maps), so both kinds pool the same way. Its span
[first frame, last frame + 1) gives its time (decode/timestamps.py). The alignment is a max-product DP over time, batched over utterances and
states; the frame merge is a cumsum, the means one token-by-frame matrix product (no loop over frames or tokens).

Length candidates (the CTC counterpart of the CIF's N +- k): the greedy path again with the blank's log-prob raised
or lowered by a few steps of BLANK_OFFSET_STEP. Raising it drops the tokens the path holds least surely (a letter
read twice, a piece split in two); lowering it lets in a token wherever a label came second to the blank by less
than the offset (a piece the path merged or missed). Each offset gives one merged path, so one candidate count;
the decoder, the LM and the CTC score choose among them (decode/paraformer_search.py, decode_length_candidates). As with
the CIF's candidates, none is empty unless the plain path is: an empty hypothesis scores 0 per token, more than any
other can.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from paraformer_asr.checks import assert_shape, check_padding_mask, lengths_to_mask

NO_TOKEN = -1  # token index of a blank or padding frame
BLANK_OFFSET_STEP = 0.5  # nats between neighbouring length candidates' blank offsets: the tuning grid's spread
# of 5 reaches +-2.5 nats (docs/history.md, "Length candidates for the CTC token extractor")


@dataclass
class CtcExtraction:
    """embeddings [B, N, D] (mean encoder state of each token's frames, 0 on padding); token_mask [B, N] bool;
    num_tokens [B] long; frame_starts / frame_ends [B, N] long: each token's frames [start, end) (0 on padding);
    frame_weights [B, T] the CTC posterior of not-blank per frame (0 on padding; what the alignment plot draws);
    frame_tokens [B, T] long: the token each frame belongs to (-1 for blank and padding frames)."""

    embeddings: torch.Tensor
    token_mask: torch.Tensor
    num_tokens: torch.Tensor
    frame_starts: torch.Tensor
    frame_ends: torch.Tensor
    frame_weights: torch.Tensor
    frame_tokens: torch.Tensor

    def select(self, rows: torch.Tensor) -> "CtcExtraction":
        """The utterances ``rows`` [R] long of this extraction, N shrunk to their longest count."""
        num_tokens = self.num_tokens[rows]  # [R]
        width = int(num_tokens.max()) if num_tokens.numel() > 0 else 0
        return CtcExtraction(embeddings=self.embeddings[rows, :width], token_mask=self.token_mask[rows, :width],
                             num_tokens=num_tokens, frame_starts=self.frame_starts[rows, :width],
                             frame_ends=self.frame_ends[rows, :width], frame_weights=self.frame_weights[rows],
                             frame_tokens=self.frame_tokens[rows])


def blank_offsets(spread: int, device: torch.device | None = None) -> torch.Tensor:
    """The length candidates' offsets of the blank log-prob: [2 * spread + 1], from spread x BLANK_OFFSET_STEP down
    to -spread x BLANK_OFFSET_STEP (fewest tokens first; the middle one, 0, is the plain greedy path)."""
    return torch.arange(spread, -spread - 1, -1, device=device) * BLANK_OFFSET_STEP


def offset_blank(log_probs: torch.Tensor, offsets: torch.Tensor, blank_id: int) -> torch.Tensor:
    """log_probs [B, T, V], offsets [K] -> [B*K, T, V]: row b*K + k is utterance b with ``offsets[k]`` added to the
    blank's log-prob (scores for the greedy path, no longer normalised)."""
    width = offsets.shape[0]
    shifted = log_probs.repeat_interleave(width, dim=0)  # [B*K, T, V]
    shifted[..., blank_id] += offsets.to(shifted.dtype).repeat(log_probs.shape[0]).unsqueeze(1)  # [B*K, 1]
    return shifted


def candidate_frame_tokens(log_probs: torch.Tensor, mask: torch.Tensor, offsets: torch.Tensor,
                           blank_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The length candidates' paths: log_probs [B, T, V], mask [B*K, T] (each utterance's mask K times), offsets [K]
    (:func:`blank_offsets`, 0 in the middle) -> (frame_tokens [B*K, T] long, num_tokens [B*K]): row b*K + k the
    merged greedy path of utterance b with ``offsets[k]`` added to the blank's log-prob; a path left without tokens
    where the plain one (offset 0) has some is replaced by the plain one."""
    batch, width = log_probs.shape[0], offsets.shape[0]
    frame_tokens = greedy_frame_tokens(offset_blank(log_probs, offsets, blank_id), mask, blank_id)  # [B*K, T]
    num_tokens = (frame_tokens.max(dim=1).values + 1).clamp(min=0)  # [B*K]
    middle = torch.arange(batch, device=log_probs.device) * width + width // 2  # [B] rows of offset 0
    plain_tokens = frame_tokens[middle].repeat_interleave(width, dim=0)  # [B*K, T]
    plain_counts = num_tokens[middle].repeat_interleave(width)  # [B*K]
    keep = (num_tokens > 0) | (plain_counts == 0)  # [B*K]
    return (torch.where(keep.unsqueeze(1), frame_tokens, plain_tokens),
            torch.where(keep, num_tokens, plain_counts))


def greedy_frame_tokens(log_probs: torch.Tensor, mask: torch.Tensor, blank_id: int) -> torch.Tensor:
    """The greedy CTC path, merged: log_probs [B, T, V], mask [B, T] bool -> frame_tokens [B, T] long, the index
    of the output token each frame belongs to (-1 for blank and padding frames). A token starts at every
    non-blank frame whose label differs from the previous frame's; repeats merge, and a blank between two
    equal labels makes two tokens."""
    best = log_probs.argmax(dim=-1).masked_fill(~mask, blank_id)  # [B, T]
    previous = torch.cat([torch.full_like(best[:, :1], blank_id), best[:, :-1]], dim=1)  # [B, T]
    voiced = best != blank_id
    starts = voiced & (best != previous)  # [B, T] first frame of each token
    index = starts.long().cumsum(dim=1) - 1  # [B, T] token index of every frame from its start on
    return torch.where(voiced, index, torch.full_like(index, NO_TOKEN))


def forced_alignment(log_probs: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor, target_lengths: torch.Tensor,
                     blank_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Viterbi alignment of each reference under CTC posteriors.

    log_probs [B, T, V], mask [B, T] bool, targets [B, S] long, target_lengths [B] -> (frame_tokens [B, T] long:
    the reference position k each frame emits, -1 for blank and padding frames; feasible [B] bool: whether the
    reference fits in the frames). Infeasible rows (too few frames) get an even split of their frames instead,
    so every row still has its target length of tokens. States are the usual blank-interleaved reference
    (2S + 1 of them); the DP runs over time, batched over utterances and states.
    """
    dims = assert_shape(log_probs, "B,T,V", "alignment log_probs")
    assert_shape(targets, "B,S", "alignment targets", dims)
    batch, frames, _ = log_probs.shape
    device = log_probs.device
    states = 2 * targets.shape[1] + 1
    extended = torch.full((batch, states), blank_id, dtype=torch.long, device=device)
    extended[:, 1::2] = targets  # [B, L]: blank, y1, blank, y2, ..., blank
    emissions = log_probs.detach().float().gather(2, extended.unsqueeze(1).expand(batch, frames, states))  # [B, T, L]
    valid_states = torch.arange(states, device=device).unsqueeze(0) < (2 * target_lengths + 1).unsqueeze(1)  # [B, L]
    skip = torch.zeros_like(valid_states)
    skip[:, 2:] = (extended[:, 2:] != blank_id) & (extended[:, 2:] != extended[:, :-2])  # y_k -> y_{k+1} past a blank
    minus_inf = torch.tensor(float("-inf"), device=device)

    score = torch.full((batch, states), float("-inf"), device=device)
    score[:, :2] = emissions[:, 0, :2]
    score = torch.where(valid_states, score, minus_inf)
    steps = torch.zeros(batch, frames, states, dtype=torch.long, device=device)  # back-pointer: 0, 1 or 2 states back
    for t in range(1, frames):
        stay = score
        advance = torch.cat([score.new_full((batch, 1), float("-inf")), score[:, :-1]], dim=1)
        jump = torch.cat([score.new_full((batch, 2), float("-inf")), score[:, :-2]], dim=1)
        jump = torch.where(skip, jump, minus_inf)
        best, step = torch.stack([stay, advance, jump], dim=-1).max(dim=-1)  # [B, L]
        updated = torch.where(valid_states, best + emissions[:, t], minus_inf)
        live = mask[:, t].unsqueeze(1)  # [B, 1]: padding frames keep the score and stay in place
        score = torch.where(live, updated, score)
        steps[:, t] = torch.where(live, step, torch.zeros_like(step))

    last = 2 * target_lengths  # [B] final blank; the state before it is the last token
    final_blank = score.gather(1, last.unsqueeze(1)).squeeze(1)
    final_token = score.gather(1, (last - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    final_token = torch.where(target_lengths > 0, final_token, minus_inf)
    state = torch.where(final_token > final_blank, last - 1, last)  # [B]
    feasible = torch.maximum(final_blank, final_token) > float("-inf")
    path = torch.empty(batch, frames, dtype=torch.long, device=device)
    path[:, -1] = state
    for t in range(frames - 1, 0, -1):
        state = state - steps[:, t].gather(1, state.unsqueeze(1)).squeeze(1)
        path[:, t - 1] = state
    frame_tokens = torch.where((path % 2 == 1) & mask, (path - 1) // 2, torch.full_like(path, NO_TOKEN))
    return torch.where(feasible.unsqueeze(1), frame_tokens, even_split(mask, target_lengths)), feasible


def even_split(mask: torch.Tensor, target_lengths: torch.Tensor) -> torch.Tensor:
    """mask [B, T], target_lengths [B] -> frame_tokens [B, T]: frame t of T_b goes to token floor(t * S_b / T_b)
    (-1 on padding and for S_b = 0)."""
    frame_lengths = mask.sum(dim=1, keepdim=True).clamp(min=1)  # [B, 1]
    position = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)  # [1, T]
    tokens = torch.div(position * target_lengths.unsqueeze(1), frame_lengths, rounding_mode="floor")
    return torch.where(mask & (target_lengths.unsqueeze(1) > 0), tokens, torch.full_like(tokens, NO_TOKEN))


def pool_frames(hidden: torch.Tensor, frame_tokens: torch.Tensor, num_tokens: torch.Tensor,
                width: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean encoder state of each token's frames.

    hidden [B, T, D], frame_tokens [B, T] long (-1: no token), num_tokens [B] -> (embeddings [B, N, D], frame_starts
    [B, N] long, frame_ends [B, N] long (exclusive)); N = ``width``, by default max num_tokens (the exported graph
    passes T: no shape then depends on the data). A token without frames gets zeros and the span [0, 0). One
    token-by-frame membership matrix does it all: a matrix product for the means, a min / max for the spans.
    """
    frames = hidden.shape[1]
    if width is None:
        width = int(num_tokens.max()) if hidden.shape[0] > 0 else 0
    token_index = torch.arange(width, device=hidden.device).view(1, -1, 1)  # [1, N, 1]
    members = frame_tokens.unsqueeze(1) == token_index  # [B, N, T]: frame t belongs to token n
    counts = members.sum(dim=2, keepdim=True).clamp(min=1).to(hidden.dtype)  # [B, N, 1]
    embeddings = torch.bmm(members.to(hidden.dtype), hidden) / counts  # [B, N, D]
    frame_index = torch.arange(frames, device=hidden.device).view(1, 1, -1)  # [1, 1, T]
    first = torch.where(members, frame_index, torch.full_like(frame_index, frames)).amin(dim=2)  # [B, N]
    last = torch.where(members, frame_index, torch.full_like(frame_index, -1)).amax(dim=2)  # [B, N]
    has_frames = last >= 0
    starts = torch.where(has_frames, first, torch.zeros_like(first))
    ends = torch.where(has_frames, last + 1, torch.zeros_like(last))
    return embeddings, starts, ends


class CtcTokenExtractor(nn.Module):
    """forward(hidden [B, T, D], mask [B, T] bool, log_probs [B, T, V] of the CTC head, targets [B, S] | None,
    target_lengths [B] | None) -> CtcExtraction: forced alignment of the targets when given (training; N = S),
    the merged greedy path otherwise. It reads the model's CTC head; its only parameters are the posteriors' map
    to D (``queries`` 'posteriors')."""

    def __init__(self, d_model: int, blank_id: int, queries: str = "states", vocab_size: int | None = None):
        super().__init__()
        self.d_model = d_model
        self.blank_id = blank_id
        self.queries = queries
        self.posterior_map = nn.Linear(vocab_size, d_model) if queries == "posteriors" else None

    def frame_queries(self, hidden: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
        """What each frame adds to its token's query: hidden [B, T, D], log_probs [B, T, V] -> [B, T, D], the encoder
        states, or the CTC posteriors mapped to D."""
        if self.posterior_map is None:
            return hidden
        return self.posterior_map(log_probs.exp().to(hidden.dtype))  # [B, T, D]

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor, log_probs: torch.Tensor,
                targets: torch.Tensor | None = None, target_lengths: torch.Tensor | None = None) -> CtcExtraction:
        dims = assert_shape(hidden, f"B,T,{self.d_model}", "ctc extractor input")
        check_padding_mask(mask, "ctc extractor mask", (dims["B"], dims["T"]))
        assert_shape(log_probs, "B,T,V", "ctc extractor log_probs", dims)
        if targets is None:
            return self.greedy(hidden, mask, log_probs)
        assert_shape(target_lengths, "B", "target_lengths", dims)
        frame_tokens, _ = forced_alignment(log_probs, mask, targets, target_lengths, self.blank_id)
        return frames_to_extraction(self.frame_queries(hidden, log_probs), mask, log_probs, frame_tokens,
                                    target_lengths.long(), self.blank_id)

    def greedy(self, hidden: torch.Tensor, mask: torch.Tensor, log_probs: torch.Tensor,
               width: int | None = None) -> CtcExtraction:
        """Inference: the queries of the merged greedy path (``width`` token slots, as :func:`pool_frames`)."""
        frame_tokens = greedy_frame_tokens(log_probs, mask, self.blank_id)  # [B, T]
        num_tokens = (frame_tokens.max(dim=1).values + 1).clamp(min=0)  # [B]
        return frames_to_extraction(self.frame_queries(hidden, log_probs), mask, log_probs, frame_tokens, num_tokens,
                                    self.blank_id, width)


def frames_to_extraction(hidden: torch.Tensor, mask: torch.Tensor, log_probs: torch.Tensor, frame_tokens: torch.Tensor,
                         num_tokens: torch.Tensor, blank_id: int, width: int | None = None) -> CtcExtraction:
    """Each frame's token [B, T] and query [B, T, D] (``hidden``: :meth:`CtcTokenExtractor.frame_queries`) -> the
    CtcExtraction: pooled queries and spans (:func:`pool_frames`), the token
    mask, and the not-blank posterior of every frame."""
    embeddings, starts, ends = pool_frames(hidden, frame_tokens, num_tokens, width)  # [B, N, D], [B, N], [B, N]
    token_mask = lengths_to_mask(num_tokens, embeddings.shape[1])  # [B, N]
    not_blank = (1.0 - log_probs.detach()[..., blank_id].exp()) * mask  # [B, T]
    return CtcExtraction(embeddings=embeddings, token_mask=token_mask, num_tokens=num_tokens, frame_starts=starts,
                         frame_ends=ends, frame_weights=not_blank, frame_tokens=frame_tokens)
