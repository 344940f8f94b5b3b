"""Streaming a Paraformer: what one utterance carries from one piece of its features to the next, so that each piece
costs the work of its own frames and not a pass over everything before it.

- :class:`EncoderStream`: the chunked encoder (models/encoder.py, :func:`chunk_attention_mask`) chunk by chunk. The
  subsampling runs on the input frames received, less those it has already turned into encoder frames (a few input
  frames carried over); each block keeps the keys and values of the ``left_chunks`` chunks its next chunk's queries
  see. Its outputs are those of the masked pass over the whole utterance.
- :func:`integrate_chunk` / :class:`CifCarry`: integrate-and-fire across chunk boundaries: the weight and the
  weighted sum of the token still being integrated are carried over; :func:`finish_carry` applies the tail rule.
  The fires and embeddings are those of :func:`paraformer_asr.models.cif.cif_integrate` over the whole utterance.
- :class:`CifStream`: the predictor's alphas (its convolution needs ``cif_kernel_size // 2`` frames after each
  frame, so the last ones of a chunk wait for the next) and the carried integration.
- :class:`ParaformerStream`: all of it, plus the decoder's cross-attention keys and values of the encoder frames so
  far and the embeddings of the tokens fired so far; :meth:`ParaformerStream.logits` runs the decoder over them.

Streams hold one utterance (batch 1 inside) and run the model in eval mode; call them under ``torch.no_grad()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from paraformer_asr.models.cif import MIN_MASS, scatter_to_tokens, token_share
from paraformer_asr.models.encoder import Encoder, subsampled_lengths
from paraformer_asr.models.layers import KeyValue
from paraformer_asr.models.paraformer import Paraformer


def _empty_key_value(heads: int, head_dim: int, like: torch.Tensor) -> KeyValue:
    empty = like.new_zeros((1, heads, 0, head_dim))  # [1, H, 0, Dh]
    return empty, empty


class EncoderStream:
    """The encoder of one utterance, fed its features piece by piece.

    ``chunk_size`` C encoder frames per attention chunk (0: one chunk, the whole utterance, encoded at
    :meth:`finish`), ``left_chunks`` chunks of look-back (None: all), ``right_frames`` R frames of look-ahead for the
    first block. :meth:`push` (features [T, F]) and :meth:`finish` return the encoder frames [T_out, D] they complete:
    a chunk is encoded once its C frames and R frames after them have come out of the subsampling. Concatenated, the
    outputs equal ``encoder(features, mask, chunk_size=C)`` over the whole utterance.
    """

    def __init__(self, encoder: Encoder, chunk_size: int, left_chunks: int | None = None, right_frames: int = 0):
        if encoder.training:
            raise ValueError("an encoder stream runs the encoder in eval mode (call model.eval() first)")
        if chunk_size < 0 or right_frames < 0 or (left_chunks is not None and left_chunks < 0):
            raise ValueError(f"chunk_size ({chunk_size}) and right_frames ({right_frames}) must be >= 0, left_chunks "
                             f"({left_chunks}) >= 0 or None")
        self.encoder = encoder
        self.chunk_size = chunk_size
        self.left_chunks = left_chunks
        self.right_frames = right_frames
        like = next(encoder.parameters())
        self.inputs = like.new_zeros((0, encoder.input_dim))  # [L, F] input frames not yet subsampled
        self.embedded = like.new_zeros((0, encoder.d_model))  # [P, D] subsampled frames waiting for their chunk
        self.subsampled = 0  # frames the subsampling has given so far: the position of the next one
        attention = encoder.blocks[0].self_attn
        self.caches = [_empty_key_value(attention.num_heads, attention.head_dim, like)
                       for _ in encoder.blocks]  # per block (k, v) [1, H, L_c, Dh]

    def push(self, features: torch.Tensor) -> torch.Tensor:
        """features [T, F] (the next input frames) -> the encoder frames [T_out, D] they complete."""
        self._subsample(features)
        return self._encode_ready(final=False)

    def finish(self) -> torch.Tensor:
        """The end of the utterance -> the encoder frames [T_out, D] still pending (the last chunk may be short)."""
        return self._encode_ready(final=True)

    def _subsample(self, features: torch.Tensor) -> None:
        """Run the subsampling over the carried and the new input frames; keep the inputs of frames not yet given.
        Output frame j of f-times subsampling (stride-2 3-tap convolutions) reads input frames f*j .. f*j + 2(f - 1),
        so convolutions started at input frame f * (frames given) continue the whole utterance's grid exactly."""
        if features.dim() != 2 or features.shape[1] != self.encoder.input_dim:
            raise ValueError(f"stream features must be [T, {self.encoder.input_dim}], got {tuple(features.shape)}")
        inputs = torch.cat([self.inputs, features.to(self.inputs)])  # [L, F]
        factor = self.encoder.subsampling_factor
        count = int(subsampled_lengths(torch.tensor(inputs.shape[0]), factor))
        if count < 1:
            self.inputs = inputs
            return
        x = self.encoder.subsampling(inputs.unsqueeze(0))  # [1, count, D]
        x = self.encoder.positions(x * math.sqrt(self.encoder.d_model), offset=self.subsampled)  # [1, count, D]
        self.embedded = torch.cat([self.embedded, x[0]])  # [P + count, D]
        self.subsampled += count
        self.inputs = inputs[count * factor:]  # [L', F]

    def _encode_ready(self, final: bool) -> torch.Tensor:
        """Encode every chunk whose frames and look-ahead are all there (at the end: whatever is left)."""
        outputs = []
        while self.embedded.shape[0] > 0:
            pending = self.embedded.shape[0]
            size = self.chunk_size if self.chunk_size > 0 else pending
            if not final and (self.chunk_size == 0 or pending < size + self.right_frames):
                break
            size = min(size, pending)
            ahead = self.embedded[size:size + self.right_frames]  # [R', D], R' < R only at the end
            outputs.append(self._encode_chunk(self.embedded[:size], ahead))
            self.embedded = self.embedded[size:]
        return torch.cat(outputs) if outputs else self.embedded.new_zeros((0, self.encoder.d_model))

    def _encode_chunk(self, chunk: torch.Tensor, ahead: torch.Tensor) -> torch.Tensor:
        """chunk [C, D], ahead [R', D] (embedded frames) -> encoder output [C, D]; the block caches move on."""
        x = chunk.unsqueeze(0)  # [1, C, D]
        for index, block in enumerate(self.encoder.blocks):
            block_ahead = ahead.unsqueeze(0) if index == 0 and ahead.shape[0] > 0 else None  # [1, R', D]
            x, (k, v) = block.forward_chunk(x, self.caches[index], block_ahead)
            self.caches[index] = self._kept(torch.cat([self.caches[index][0], k], dim=2),
                                            torch.cat([self.caches[index][1], v], dim=2))
        return self.encoder.final_norm(x)[0]  # [C, D]

    def _kept(self, k: torch.Tensor, v: torch.Tensor) -> KeyValue:
        """The keys and values [1, H, L, Dh] the next chunk's queries see: the last ``left_chunks`` chunks (only the
        utterance's last chunk can be short, so those are left_chunks * C frames)."""
        if self.left_chunks is None:
            return k, v
        keep = self.left_chunks * self.chunk_size
        return k[:, :, k.shape[2] - keep:], v[:, :, v.shape[2] - keep:]


@dataclass
class CifCarry:
    """What the CIF carries between chunks: ``weight`` (threshold units, in [0, 1)) and ``embedding`` [D] (the
    weighted sum of its frames so far) of the token being integrated, the number of ``frames`` integrated so far and
    the index of the last of them with alpha > 0 (``last_active``, where a tail token fires)."""

    weight: float
    embedding: torch.Tensor
    frames: int = 0
    last_active: int = 0

    @classmethod
    def start(cls, d_model: int, like: torch.Tensor) -> CifCarry:
        return cls(0.0, like.new_zeros(d_model))


def integrate_chunk(carry: CifCarry, hidden: torch.Tensor,
                    alphas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, CifCarry]:
    """Integrate-and-fire over the next frames of an utterance.

    carry (from the frames before), hidden [T, D], alphas [T] (integrated, threshold units, >= 0) -> (embeddings
    [K, D] of the K tokens that fire in these frames, their fire frames [K] long counted from the utterance's start,
    the carry after them). The running sum restarts at the carried token: c_t = carry.weight + alpha_1 + ... +
    alpha_t (float64), token j of the chunk owns the slice (j, j + 1] of it and frame t gives it
    max(0, min(c_t, j + 1) - max(c_{t-1}, j)), the formula of :func:`paraformer_asr.models.cif.frame_token_weights`
    shifted by the tokens fired before; token 0 also receives the carried weighted sum.
    """
    if hidden.dim() != 2 or alphas.shape != hidden.shape[:1]:
        raise ValueError(f"integrate_chunk expects hidden [T, D] and alphas [T], got {tuple(hidden.shape)} and "
                         f"{tuple(alphas.shape)}")
    if hidden.shape[0] == 0:
        return hidden.new_zeros((0, hidden.shape[1])), torch.zeros(0, dtype=torch.long, device=hidden.device), carry
    cumsum = carry.weight + torch.cumsum(alphas.double(), dim=0)  # [T]  c_t
    previous = cumsum - alphas.double()  # [T]  c_{t-1}
    fired = int(math.floor(float(cumsum[-1])))  # tokens completed in this chunk; token `fired` stays open
    touched = int(math.ceil(float(alphas.max()))) + 1  # tokens one frame can reach
    first = torch.floor(previous).long().clamp(min=0)  # [T]
    candidates = first.unsqueeze(1) + torch.arange(touched, device=hidden.device)  # [T, K]
    keep = candidates <= fired
    weights = token_share(previous.unsqueeze(1), cumsum.unsqueeze(1), candidates.double()) * keep  # [T, K] float64
    slots = torch.where(keep, candidates, torch.full_like(candidates, fired + 1))  # overflow slot fired + 1
    contributions = weights.to(hidden.dtype).unsqueeze(-1) * hidden.unsqueeze(1)  # [T, K, D]
    sums = scatter_to_tokens(contributions.unsqueeze(0), slots.unsqueeze(0), fired + 1, "sum", 0.0)[0]  # [fired+1, D]
    sums[0] += carry.embedding
    levels = torch.arange(1, fired + 1, device=hidden.device, dtype=torch.float64)  # [K]  j + 1
    fires = torch.searchsorted(cumsum, levels) + carry.frames  # [K] first frame with c_t >= j + 1
    active = torch.nonzero(alphas > 0).flatten()
    last_active = carry.frames + int(active[-1]) if active.numel() > 0 else carry.last_active
    after = CifCarry(weight=float(cumsum[-1]) - fired, embedding=sums[fired], frames=carry.frames + hidden.shape[0],
                     last_active=last_active)
    return sums[:fired], fires, after


def finish_carry(carry: CifCarry, tail_threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The end of the utterance: the tail rule of :func:`paraformer_asr.models.cif.inference_token_count`. ->
    (embeddings [1, D], fire frames [1] long) for a carried weight >= ``tail_threshold`` (threshold units), the
    weighted sum divided by that weight and firing at the last frame with alpha > 0; else [0, D] and [0]."""
    if carry.weight < tail_threshold:
        return carry.embedding.new_zeros((0, carry.embedding.shape[0])), torch.zeros(
            0, dtype=torch.long, device=carry.embedding.device)
    embedding = carry.embedding / max(carry.weight, MIN_MASS)  # [D]
    return embedding.unsqueeze(0), torch.tensor([carry.last_active], device=carry.embedding.device)


class CifStream:
    """The CIF of one utterance over its encoder frames as they come: :meth:`push` (frames [T, D], final) -> the
    embeddings [K, D] and fire frames [K] of the tokens that fire.

    The predictor's convolution (``model.cif_kernel_size`` k) reads k // 2 frames on either side of a frame, so a
    frame's alpha is computed once the k // 2 frames after it are there (at the end of the utterance, the zero
    padding stands for them, as in the whole pass); the window keeps the k // 2 frames before the first frame not
    yet scored. The alphas are those inference integrates (``Paraformer.cif_alphas``: calibrated, threshold units).
    """

    def __init__(self, model: Paraformer):
        self.model = model
        self.reach = model.predictor.conv.kernel_size[0] // 2
        self.tail_threshold = model.cfg.cif_tail_threshold / model.cfg.cif_threshold
        like = next(model.parameters())
        self.window = like.new_zeros((0, model.cfg.d_model))  # [L, D] context frames, then frames not yet scored
        self.context = 0  # frames at the window's start already integrated (the convolution's left context)
        self.carry = CifCarry.start(model.cfg.d_model, like)
        self.scored: list[torch.Tensor] = []  # the integrated alphas [t] of every frame scored so far, piece by piece

    @property
    def alphas(self) -> torch.Tensor:
        """The integrated alphas [T] of the frames scored so far (every frame once the stream is final): the
        calibrated alphas of ``Paraformer.cif_alphas`` over the whole utterance, what token times are read from."""
        return torch.cat(self.scored) if self.scored else self.window.new_zeros(0)

    def push(self, frames: torch.Tensor, final: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """frames [T, D] (the next encoder frames); ``final``: the utterance ends after them (the tail rule applies)
        -> (embeddings [K, D], fire frames [K] long counted from the utterance's start)."""
        window = torch.cat([self.window, frames.float()])  # [L, D]
        end = window.shape[0] if final else window.shape[0] - self.reach  # frames [context, end) can be scored
        embeddings, fires = window.new_zeros((0, window.shape[1])), torch.zeros(0, dtype=torch.long,
                                                                                device=window.device)
        if end > self.context:
            mask = torch.ones(1, window.shape[0], dtype=torch.bool, device=window.device)
            _, alphas = self.model.cif_alphas(window.unsqueeze(0), mask)  # [1, L] calibrated, threshold units
            embeddings, fires, self.carry = integrate_chunk(self.carry, window[self.context:end],
                                                            alphas[0, self.context:end])
            self.scored.append(alphas[0, self.context:end])
            start = max(0, end - self.reach)
            window, self.context = window[start:], end - start
        self.window = window
        if final:
            tail, tail_fire = finish_carry(self.carry, self.tail_threshold)
            embeddings, fires = torch.cat([embeddings, tail]), torch.cat([fires, tail_fire])
        return embeddings, fires


class ParaformerStream:
    """One utterance streamed through a CIF Paraformer (in eval mode): :meth:`push` features [T, F] as they come,
    :meth:`finish` at the end, :meth:`logits` for the decoder's output over the tokens fired so far.

    It carries the :class:`EncoderStream` (``chunk_size``, ``left_chunks``, ``right_frames`` as there), the
    :class:`CifStream`, each decoder block's cross-attention keys and values of the encoder frames so far (projected
    once per frame) and the tokens fired so far (``embeddings`` [N, D], ``fire_frames`` [N]). With ``finished``, these
    are the whole pass's: ``fire_frames`` and ``logits`` equal those of the model's inference pass with the encoder at
    that chunk size (the last fire being the <eos> one with ``model.predictor_bias`` 1, as there).
    """

    def __init__(self, model: Paraformer, chunk_size: int, left_chunks: int | None = None, right_frames: int = 0):
        if model.cfg.predictor != "cif":
            raise ValueError(f"a stream integrates with the CIF; this model's predictor is {model.cfg.predictor!r}")
        self.model = model
        self.encoder = EncoderStream(model.encoder, chunk_size, left_chunks, right_frames)
        self.cif = CifStream(model)
        attention = model.decoder.blocks[0].cross_attn
        like = next(model.parameters())
        self.memory_kv = [_empty_key_value(attention.num_heads, attention.head_dim, like)
                          for _ in model.decoder.blocks]  # per decoder block (k, v) [1, H, T, Dh]
        self.embeddings = like.new_zeros((0, model.cfg.d_model))  # [N, D]
        self.fire_frames = torch.zeros(0, dtype=torch.long, device=like.device)  # [N]
        self.finished = False

    @property
    def encoded_frames(self) -> int:
        """Encoder frames so far (the decoder's memory)."""
        return self.memory_kv[0][0].shape[2]

    def push(self, features: torch.Tensor) -> int:
        """features [T, F] -> how many encoder frames they completed (0: the decoder's view is unchanged)."""
        if self.finished:
            raise ValueError("this stream is finished; start a new one for the next utterance")
        frames = self.encoder.push(features)  # [T_out, D]
        self._absorb(frames, final=False)
        return frames.shape[0]

    def finish(self) -> None:
        """The end of the utterance: the last chunk, the predictor's last frames and the CIF's tail."""
        if self.finished:
            raise ValueError("this stream is already finished")
        self._absorb(self.encoder.finish(), final=True)
        self.finished = True

    def _absorb(self, frames: torch.Tensor, final: bool) -> None:
        """New encoder frames [T_out, D]: into the decoder's memory and through the CIF."""
        if frames.shape[0] > 0:
            projected = self.model.decoder.project_memory(frames.unsqueeze(0))  # per block (k, v) [1, H, T_out, Dh]
            self.memory_kv = [(torch.cat([k, k_new], dim=2), torch.cat([v, v_new], dim=2))
                              for (k, v), (k_new, v_new) in zip(self.memory_kv, projected)]
        embeddings, fires = self.cif.push(frames, final)  # [K, D], [K]
        self.embeddings = torch.cat([self.embeddings, embeddings.to(self.embeddings)])
        self.fire_frames = torch.cat([self.fire_frames, fires])

    def logits(self) -> torch.Tensor:
        """The decoder over the N tokens fired so far, with the encoder frames so far as its memory -> [N, V]
        ([0, V] before the first fire)."""
        tokens, frames = self.embeddings.shape[0], self.encoded_frames
        if tokens == 0 or frames == 0:
            return self.embeddings.new_zeros((0, self.model.vocab_size))
        device = self.embeddings.device
        token_mask = torch.ones(1, tokens, dtype=torch.bool, device=device)
        memory_mask = torch.ones(1, frames, dtype=torch.bool, device=device)
        return self.model.decoder.forward_projected(self.embeddings.unsqueeze(0), token_mask, self.memory_kv,
                                                    memory_mask)[0]  # [N, V]
