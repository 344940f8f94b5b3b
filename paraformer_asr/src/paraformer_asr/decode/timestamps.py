"""Token and word times: when each output token's acoustic mass begins and ends.

With the CTC token extractor (``model.predictor: ctc``) a token spans its merged CTC frames (models/ctc_extractor.py);
the rest of this docstring is about the CIF.

Positions are continuous encoder-frame coordinates (frame t spans [t, t + 1)). The running sum C of the
integrated alphas, linear inside each frame, gives token k the stretch where C runs from k to k + 1 (see
models/cif.py). Token k therefore

* ends where C reaches k + 1 (the fire, inside the fire frame) or, when its frames there carry almost none of
  its mass, at the end of its last frame carrying at least ``min_weight`` of it;
* begins where C passes k (the previous fire) or, when the frames after the previous fire carry almost none
  of its mass (silence between words), at the first frame carrying at least ``min_weight`` of it.

A partial tail token (inference) ends at the end of the last frame with a positive alpha. Both rules only
ever shrink [C^-1(k), C^-1(k + 1)], so times are ordered: end_{k-1} <= start_k <= end_k.

:class:`FrameClock` turns positions into milliseconds through the subsampling factor and the front end's hop.
Words group tokens by their surface pieces (``tokenizer.pieces(ids)``): a piece of only whitespace or only
``▁`` separates words, a piece starting with ``▁`` starts one, an empty piece (a special token) is skipped; a
word spans its first token's start to its last token's end.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paraformer_asr.checks import assert_shape, lengths_to_mask
from paraformer_asr.config import Config
from paraformer_asr.data.setup import make_frontend
from paraformer_asr.data.tokenizer import WORD_START
from paraformer_asr.data.toy import FRAME_SECONDS
from paraformer_asr.models.cif import fire_frames, frame_token_weights, scatter_to_tokens

POSITION_TOLERANCE = 1e-6  # encoder frames
MIN_TOKEN_WEIGHT = 0.1  # share of a token a frame must carry to count as part of it (chosen on validation data)
# a speech frame's loudness above the utterance's floor, as a share of its floor-to-loud span (chosen on the
# validation split of the word-times corpus: 0.02-0.15 all gave word_boundary_mae_ms within 3 ms of the best)
SPEECH_SHARE = 0.1


@dataclass(frozen=True)
class FrameClock:
    """Encoder-frame positions -> milliseconds.

    Input frame i is centred at ``i * hop_ms + window_ms / 2`` (log-mel: 25 ms windows every 10 ms; toy: 10 ms
    blocks). Encoder frame t of an f-times subsampling stack (stride-2 3-tap convolutions) is centred on input
    frame f * t + f - 1; its stretch [t, t + 1) covers the f * hop_ms around that centre, so
    ms(x) = f * hop_ms * x + (f / 2 - 1) * hop_ms + window_ms / 2. No further offset: the errors measured on
    trained models differ in sign between word starts and ends (docs/architecture.md, "Timestamps").
    """

    hop_ms: float
    window_ms: float
    subsampling_factor: int

    @property
    def encoder_frame_ms(self) -> float:
        return self.subsampling_factor * self.hop_ms

    def ms(self, position: torch.Tensor) -> torch.Tensor:
        """Encoder-frame positions (any shape) -> milliseconds, same shape."""
        f = self.subsampling_factor
        return position * self.encoder_frame_ms + (f / 2 - 1) * self.hop_ms + self.window_ms / 2


def frame_clock(cfg: Config) -> FrameClock:
    """The clock of a config's features: toy frames are 10 ms blocks, audio goes through ``make_frontend``."""
    if cfg.data.kind == "toy":
        frame_ms = FRAME_SECONDS * 1000.0
        return FrameClock(frame_ms, frame_ms, cfg.subsampling_factor)
    frontend = make_frontend(cfg)
    to_ms = 1000.0 / frontend.sample_rate
    return FrameClock(frontend.hop_length * to_ms, frontend.win_length * to_ms, cfg.subsampling_factor)


def _position_in_frame(cumsum: torch.Tensor, alphas: torch.Tensor, levels: torch.Tensor,
                       frame: torch.Tensor) -> torch.Tensor:
    """Position x inside ``frame`` where the running sum C (linear inside each frame) reaches each level.

    cumsum / alphas [B, T] float64, levels [B, N] float64, frame [B, N] long (the frame holding each level; T for
    a level never reached) -> [B, N] float64 in [frame, frame + 1], or T where frame is T.
    """
    inside = frame.clamp(0, cumsum.shape[1] - 1)
    before = (cumsum - alphas).gather(1, inside)  # c_{t-1}
    alpha = alphas.gather(1, inside)
    fraction = torch.where(alpha > 0, (levels - before) / alpha.clamp(min=1e-12), torch.zeros_like(alpha))
    never = torch.full_like(alpha, cumsum.shape[1])
    return torch.where(frame < cumsum.shape[1], frame + fraction.clamp(0.0, 1.0), never)


def cif_token_spans(alphas: torch.Tensor, num_tokens: torch.Tensor,
                    min_weight: float = MIN_TOKEN_WEIGHT) -> tuple[torch.Tensor, torch.Tensor]:
    """alphas [B, T'] (the integrated alphas, threshold units, 0 on padding), num_tokens [B] long
    -> (starts [B, N], ends [B, N]) float64 encoder-frame positions (module docstring), 0 on padding."""
    dims = assert_shape(alphas, "B,T", "timestamp alphas")
    assert_shape(num_tokens, "B", "timestamp num_tokens", dims)
    batch, frames = alphas.shape
    width = int(num_tokens.max()) if batch > 0 else 0
    alphas = alphas.detach().double()
    cumsum = torch.cumsum(alphas, dim=1)  # [B, T']
    valid = lengths_to_mask(num_tokens, width)  # [B, N]
    levels = torch.arange(width, dtype=torch.float64, device=alphas.device).expand(batch, -1)  # [B, N]: k
    passing = torch.searchsorted(cumsum.contiguous(), levels.contiguous(), right=True)  # [B, N] first c_t > k
    begins = _position_in_frame(cumsum, alphas, levels, passing)
    fires = _position_in_frame(cumsum, alphas, levels + 1.0, fire_frames(alphas, valid))  # a tail: its last frame

    weights, slots = frame_token_weights(alphas, num_tokens)  # [B, T', K]
    frame_index = torch.arange(frames, device=alphas.device).view(1, frames, 1).expand_as(slots)
    significant = (weights > 0) & (weights >= min_weight)
    first = scatter_to_tokens(torch.where(significant, frame_index, frames), slots, width, "amin", frames)
    last = scatter_to_tokens(torch.where(significant, frame_index, -1), slots, width, "amax", -1)
    first, last = first.double(), last.double()  # [B, N]; frames / -1: no significant frame

    found = last >= 0
    starts = torch.where(found, torch.maximum(begins, first), begins)
    ends = torch.where(found, torch.minimum(fires, last + 1.0), fires)
    return starts * valid, ends * valid


def cif_fire_spans(alphas: torch.Tensor, num_tokens: torch.Tensor, extra_fires: int = 0,
                   min_weight: float = MIN_TOKEN_WEIGHT) -> tuple[torch.Tensor, torch.Tensor]:
    """alphas [B, T'] (the predictor's alphas in threshold units, 0 on padding), num_tokens [B] (output tokens)
    -> (starts [B, N], ends [B, N]) float64 encoder-frame positions, 0 on padding.

    The alphas are first scaled to sum to the number of fires, num_tokens + ``extra_fires`` (1 with
    ``model.predictor_bias``: the end-of-sentence fire), as in training, where the predictor learns its
    alignment under that scaling; the leftover mass at inference (the tail rule) then does not shift the
    last token."""
    alphas = alphas.detach().double()
    fires = (num_tokens + extra_fires).to(torch.float64)  # [B]
    scale = torch.where(fires > 0, fires / alphas.sum(1).clamp(min=1e-12), torch.zeros_like(fires))
    return cif_token_spans(alphas * scale.unsqueeze(1), num_tokens, min_weight)


def spans_to_ms(starts: torch.Tensor, ends: torch.Tensor, num_tokens: torch.Tensor, encoder_frames: torch.Tensor,
                clock: FrameClock, durations_ms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Token spans in encoder-frame positions (starts / ends [B, N] float64), num_tokens [B], encoder_frames [B]
    (valid encoder frames), durations_ms [B] -> (start_ms [B, N], end_ms [B, N]) float64, 0 on padding.

    The first encoder frame stands for the audio from its beginning and the last one for the audio up to its
    end (the subsampling's last frame is centred up to f - 1 input frames before the end): position 0 is 0 ms
    and position ``encoder_frames`` is the duration. Times are clipped to [0, duration].
    """
    limit = durations_ms.to(starts).unsqueeze(1)  # [B, 1]
    last = encoder_frames.to(starts).unsqueeze(1)  # [B, 1]

    def to_ms(position: torch.Tensor) -> torch.Tensor:  # rounding of the running sum: compare with a tolerance
        ms = torch.where(position >= last - POSITION_TOLERANCE, limit, clock.ms(position))
        ms = torch.where(position <= POSITION_TOLERANCE, torch.zeros_like(ms), ms)
        return torch.minimum(ms.clamp(min=0.0), limit)

    valid = torch.arange(starts.shape[1], device=starts.device).unsqueeze(0) < num_tokens.unsqueeze(1)
    return to_ms(starts) * valid, to_ms(ends) * valid


def decoded_token_times(model, extraction, features: torch.Tensor, feat_lengths: torch.Tensor,
                        durations_s: torch.Tensor, clock: FrameClock) -> tuple[torch.Tensor, torch.Tensor]:
    """Token times of a Paraformer's decoded batch: ``extraction`` from ``model.decode_aligned`` (inference; the
    CIF's fires or the CTC path's frames, through ``model.token_spans``), the batch's features [B, T, F] and
    feat_lengths [B], durations_s [B] -> (start_ms [B, N], end_ms [B, N]), ends carried to the end of their
    speech (:func:`extend_ends_through_speech`)."""
    starts, ends = model.token_spans(extraction)  # [B, N] encoder-frame positions
    encoder_frames = model.encoder.output_lengths(feat_lengths)
    durations_ms = durations_s.double() * 1000.0
    start_ms, end_ms = spans_to_ms(starts, ends, extraction.num_tokens, encoder_frames, clock, durations_ms)
    speech = speech_frames(features, feat_lengths)  # [B, T]
    return start_ms, extend_ends_through_speech(start_ms, end_ms, extraction.num_tokens, speech, clock,
                                                durations_ms)


def speech_frames(features: torch.Tensor, feat_lengths: torch.Tensor,
                  share: float = SPEECH_SHARE) -> torch.Tensor:
    """features [B, T, F] (log-mel, normalised or not), feat_lengths [B] -> speech [B, T] bool: a frame's mean
    over the bins lies above the utterance's floor (its 10 % quantile) by at least ``share`` of the span from
    the floor to its loud frames (its 90 % quantile); False on padding."""
    valid = lengths_to_mask(feat_lengths, features.shape[1])  # [B, T]
    loudness = features.float().mean(dim=2).masked_fill(~valid, float("nan"))  # [B, T]
    floor, loud = torch.nanquantile(loudness, loudness.new_tensor([0.1, 0.9]), dim=1, keepdim=True)  # [B, 1] each
    return (loudness > floor + share * (loud - floor)) & valid


def extend_ends_through_speech(start_ms: torch.Tensor, end_ms: torch.Tensor, num_tokens: torch.Tensor,
                               speech: torch.Tensor, clock: FrameClock, durations_ms: torch.Tensor) -> torch.Tensor:
    """Token ends carried through the speech that follows them: when the input frame at a token's end is speech
    (``speech`` [B, T], :func:`speech_frames`), the end moves to the end of that run of speech frames, never past
    the next token's start (the last token: the duration). A subword unit's CIF weight gathers early in its word
    (a BPE word's fire comes some 230 ms before the word's end on the word-times corpus), and a word's end is where
    its sound stops. start_ms / end_ms [B, N], num_tokens [B], durations_ms [B] -> end_ms [B, N]."""
    batch, frames = speech.shape
    index = torch.arange(frames, device=speech.device).expand(batch, -1)  # [B, T]
    stops = torch.where(speech, torch.full_like(index, frames), index)  # non-speech frames stop a run
    run_end = torch.flip(torch.cummin(torch.flip(stops, [1]), dim=1).values, [1])  # [B, T] first stop at or after t
    frame = ((end_ms - clock.window_ms / 2) / clock.hop_ms).floor().long().clamp(0, frames - 1)  # [B, N]
    run_end_ms = (run_end.gather(1, frame) - 0.5).double() * clock.hop_ms + clock.window_ms / 2  # end of the run
    next_start = torch.cat([start_ms[:, 1:], torch.zeros_like(start_ms[:, :1])], dim=1)  # [B, N]
    positions = torch.arange(end_ms.shape[1], device=end_ms.device).unsqueeze(0)
    limit = torch.where(positions + 1 < num_tokens.unsqueeze(1), next_start, durations_ms.to(end_ms).unsqueeze(1))
    extended = torch.maximum(end_ms, torch.minimum(run_end_ms, limit))
    valid = positions < num_tokens.unsqueeze(1)
    return torch.where(speech.gather(1, frame) & valid, extended, end_ms)


def group_words(pieces: list[str]) -> list[tuple[str, int, int]]:
    """Surface pieces of a token sequence -> words as (text, first token index, last token index)."""
    words: list[tuple[str, int, int]] = []
    current: list[int] = []

    def close() -> None:
        if current:
            words.append(("".join(pieces[i].replace(WORD_START, "") for i in current), current[0], current[-1]))
            current.clear()

    for index, piece in enumerate(pieces):
        if not piece:  # no surface form (a special token): neither text nor separator
            continue
        if not piece.replace(WORD_START, "").strip():  # only whitespace and/or ▁: a separator
            close()
            continue
        if piece.startswith(WORD_START):
            close()
        current.append(index)
    close()
    return words


def word_times(pieces: list[str], token_times: list[tuple[float, float]]) -> list[dict]:
    """-> [{"word", "start_ms", "end_ms"}] (whole milliseconds): each word spans its first token's start to its
    last token's end."""
    if len(pieces) != len(token_times):
        raise ValueError(f"{len(pieces)} pieces but {len(token_times)} token times")
    return [{"word": text, "start_ms": round(token_times[first][0]), "end_ms": round(token_times[last][1])}
            for text, first, last in group_words(pieces)]


def token_entries(pieces: list[str], token_times: list[tuple[float, float]]) -> list[dict]:
    """-> [{"token", "start_ms", "end_ms"}] (whole milliseconds), one per token."""
    return [{"token": piece, "start_ms": round(start), "end_ms": round(end)}
            for piece, (start, end) in zip(pieces, token_times)]


def reference_times(batch, clock: FrameClock) -> list[list[float]] | None:
    """Known true boundaries of a batch in ms, per utterance: toy token ends ((last frame + 1) * hop) or the
    starts and ends of timed manifest words; None when the data has neither."""
    if batch.boundaries is not None:
        return [((row[row >= 0] + 1).double() * clock.hop_ms).tolist() for row in batch.boundaries.cpu()]
    if any(words is not None for words in batch.words):
        return [[t for w in words or [] for t in (w["start_ms"], w["end_ms"])] for words in batch.words]
    return None


def alignment_plot_data(batch, alphas: torch.Tensor, encoder_frames: torch.Tensor, token_times: tuple,
                        pieces: list[list[str]], clock: FrameClock, limit: int = 3) -> list[dict]:
    """What plots/cif_alignment.png draws for the first ``limit`` utterances of a decoded batch.

    batch: the Batch (features [B, T, F]); alphas [B, T'] and encoder_frames [B] of the CIF; token_times:
    (start_ms, end_ms) [B, N] from :func:`decoded_token_times`; pieces: each utterance's token pieces. Dicts of
    plain lists: 'features' [T][F], 'frame_ms' (input hop), 'alpha_ms' (centre of each encoder frame),
    'alphas', 'tokens', 'starts_ms', 'ends_ms', and 'reference_ms' when the true boundaries are known.
    """
    references = reference_times(batch, clock)
    plots = []
    for row in range(min(limit, batch.size)):
        frames, count = int(encoder_frames[row]), len(pieces[row])
        entry = {
            "features": batch.features[row, :int(batch.feat_lengths[row])].float().cpu().tolist(),
            "frame_ms": clock.hop_ms,
            "alpha_ms": clock.ms(torch.arange(frames, dtype=torch.float64) + 0.5).tolist(),
            "alphas": alphas[row, :frames].detach().float().cpu().tolist(),
            "tokens": pieces[row],
            "starts_ms": token_times[0][row, :count].cpu().tolist(),
            "ends_ms": token_times[1][row, :count].cpu().tolist(),
        }
        if references is not None:
            entry["reference_ms"] = references[row]
        plots.append(entry)
    return plots
