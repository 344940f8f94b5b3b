"""Streaming recognition: the greedy search over a Paraformer stream (models/streaming.py) and the audio front end
fed piece by piece.

    StreamingRecognizer(model, chunk_size=None, two_pass=None)
        accept(features [T, F]) -> the partial transcript's token ids so far
        finish() -> the final transcript's token ids
        token_times(clock, duration_s) -> the final tokens' (start_ms, end_ms), after finish()
    StreamingFeatures(frontend, normalizer=None)
        accept(samples [n]) -> the feature frames [t, F] they complete; finish() -> the rest [0 or 1, F]
    chunk_frames(chunk_ms, clock) -> encoder frames per chunk (0: full context)
    use_decode_chunk(model, chunk_size): later batched passes use the encoder at that chunk (eval.py --chunk-ms)

Fed the pieces of an utterance, a recognizer without two-pass gives the final transcript of the model's greedy
decoding with its encoder at the same chunk size (``decode_aligned`` / ``greedy_decode`` of decode/paraformer_search.py
when the chunk is ``model.streaming.decode_chunk_size``), and the features of :class:`StreamingFeatures` are those of
the front end over the whole recording. The token times are those offline greedy decoding gives
(``decoded_token_times``), and :func:`use_decode_chunk` makes the batched offline passes the ones a recognizer at
that chunk streams (what ``eval.py --chunk-ms`` scores, many utterances at a time).
"""

from __future__ import annotations

import logging
from dataclasses import replace

import torch

from paraformer_asr.config import MIN_INPUT_FRAMES
from paraformer_asr.data.frontend import FeatureNormalizer, LogMelFrontend
from paraformer_asr.decode.paraformer_search import ParaformerRecognizer
from paraformer_asr.decode.timestamps import (FrameClock, cif_fire_spans, extend_ends_through_speech, spans_to_ms,
                                              speech_frames)
from paraformer_asr.errors import ConfigError
from paraformer_asr.models.streaming import ParaformerStream

logger = logging.getLogger("paraformer_asr")


class StreamingRecognizer:
    """Greedy decoding of one utterance as its features arrive, with a CIF Paraformer (a ``ParaformerRecognizer``
    of decode/paraformer_search.py, in eval mode).

    ``chunk_size``: encoder frames per attention chunk (0: the whole utterance as one chunk, decoded at
    :meth:`finish`); None: the model's ``model.streaming.decode_chunk_size``, or 0 for a model trained without
    streaming. The look-back and look-ahead are the model's (``model.streaming.left_chunks`` / ``right_frames``).
    ``two_pass`` (None: ``model.streaming.two_pass``): the final transcript comes from one full-context pass over the
    whole utterance (its features are kept for it) instead of the stream's decoder pass.

    :meth:`accept` runs the decoder over the tokens fired so far whenever the encoder has completed new frames, with
    every encoder frame so far as its memory; nothing else is computed over the past again.
    """

    def __init__(self, model: ParaformerRecognizer, chunk_size: int | None = None, two_pass: bool | None = None):
        require_streamable(model)
        streaming = model.cfg.streaming
        if chunk_size is None:
            chunk_size = streaming.decode_chunk_size if streaming.enabled else 0
        check_chunk_size(model, chunk_size)
        self.model = model
        self.chunk_size = chunk_size
        self.two_pass = streaming.two_pass if two_pass is None else two_pass
        self.device = next(model.parameters()).device
        self.stream = ParaformerStream(model, chunk_size, model.encoder.left_chunks, model.encoder.right_frames)
        self.pieces: list[torch.Tensor] = []  # [T_i, F] each, kept for the two-pass final
        self.loudness: list[torch.Tensor] = []  # [T_i] each: the mean over the bins of every input frame (word ends)
        self.partial: list[int] = []
        self.final: list[int] | None = None  # set by finish()
        self.final_alphas: torch.Tensor | None = None  # [T'] the integrated alphas the final was read from

    @torch.no_grad()
    def accept(self, features: torch.Tensor) -> list[int]:
        """features [T, F] (the next frames, through the model's front end and normaliser) -> the partial transcript
        (token ids): the decoder's greedy choice at every token fired so far."""
        features = features.to(self.device)
        if self.two_pass:
            self.pieces.append(features)
        self.loudness.append(features.float().mean(dim=1))  # [T]
        if self.stream.push(features) > 0:
            self.partial = self._greedy(self.stream.logits())
        return self.partial

    @torch.no_grad()
    def finish(self) -> list[int]:
        """The end of the utterance -> the final transcript (token ids); with ``model.predictor_bias`` 1 the last fire
        (<eos>) is decoded with the others and dropped, as offline."""
        self.stream.finish()
        if self.two_pass:
            self.final, self.final_alphas = self._full_context_tokens()
        else:
            self.final = self._greedy(self._without_eos_fire(self.stream.logits()))
            self.final_alphas = self.stream.cif.alphas
        return self.final

    def token_times(self, clock: FrameClock, duration_s: float) -> list[tuple[float, float]]:
        """The final transcript's token times, (start_ms, end_ms) per token, once :meth:`finish` has run: the spans
        of the CIF alphas the final came from (the stream's, or the two-pass's full-context ones), ends carried
        through the speech after them, as ``decoded_token_times`` reads them offline (decode/timestamps.py);
        ``duration_s``: the audio's length, where the last encoder frame's time ends."""
        if self.final is None:
            raise ValueError("token times belong to the final transcript: call finish() first")
        if not self.final:
            return []
        alphas = self.final_alphas.detach().cpu().unsqueeze(0)  # [1, T']
        num_tokens = torch.tensor([len(self.final)])
        starts, ends = cif_fire_spans(alphas, num_tokens, self.model.cfg.predictor_bias)  # [1, N] frame positions
        durations_ms = torch.tensor([duration_s * 1000.0], dtype=torch.float64)
        start_ms, end_ms = spans_to_ms(starts, ends, num_tokens, torch.tensor([alphas.shape[1]]), clock, durations_ms)
        loudness = torch.cat(self.loudness).cpu().view(1, -1, 1)  # [1, T, 1]: speech_frames averages over the bins
        speech = speech_frames(loudness, torch.tensor([loudness.shape[1]]))  # [1, T]
        end_ms = extend_ends_through_speech(start_ms, end_ms, num_tokens, speech, clock, durations_ms)  # [1, N]
        return list(zip(start_ms[0].tolist(), end_ms[0].tolist()))

    def _full_context_tokens(self) -> tuple[list[int], torch.Tensor]:
        """The second pass: the whole utterance through the encoder with full context, the CIF and the decoder ->
        (token ids, the integrated alphas [T'] they were read from)."""
        features = torch.cat(self.pieces) if self.pieces else torch.zeros(0, self.model.encoder.input_dim)
        if features.shape[0] < MIN_INPUT_FRAMES[self.model.encoder.subsampling_factor]:
            return [], features.new_zeros(0)  # too short for the subsampling: an empty transcript, as offline
        mask = torch.ones(1, features.shape[0], dtype=torch.bool, device=self.device)
        encoder_out, enc_mask = self.model.encoder(features.unsqueeze(0), mask, chunk_size=0)  # [1, T', D], [1, T']
        extraction, _ = self.model.extract_tokens(encoder_out, enc_mask, with_ctc=False)
        logits = self.model.decode_queries(extraction.embeddings, extraction.token_mask, encoder_out,
                                           enc_mask)[0]  # [N, V]
        return self._greedy(self._without_eos_fire(logits)), extraction.integrated_alphas[0]

    def _without_eos_fire(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [N, V] -> [N - 1, V] with ``model.predictor_bias`` 1 (the last fire is the <eos> one), else as given."""
        return logits[:-1] if self.model.cfg.predictor_bias == 1 else logits

    def _greedy(self, logits: torch.Tensor) -> list[int]:
        """logits [N, V] -> the best id at each position, never one of the model's ``never_emitted`` ids."""
        allowed = logits.float().clone()  # [N, V]
        allowed[:, self.model.never_emitted] = float("-inf")
        return allowed.argmax(dim=-1).tolist()


def require_streamable(model) -> None:
    """ConfigError unless ``model`` is a PyTorch Paraformer with the CIF predictor, the model a stream can run."""
    if not isinstance(model, ParaformerRecognizer) or model.cfg.predictor != "cif":
        raise ConfigError("streaming needs a PyTorch Paraformer with the CIF predictor (model.predictor 'cif'; "
                          "not the autoregressive baseline, not an ONNX export)")


def check_chunk_size(model: ParaformerRecognizer, chunk_size: int) -> None:
    """ConfigError for a negative chunk; a warning for chunks on a model trained with full context."""
    if chunk_size < 0:
        raise ConfigError(f"the streaming chunk size must be >= 0 encoder frames (0: full context), got {chunk_size}")
    if chunk_size > 0 and not model.cfg.streaming.enabled:
        logger.warning("this model was trained with full context (model.streaming.enabled false): chunks of %d "
                       "encoder frames restrict its attention as it never was in training", chunk_size)


def chunk_frames(chunk_ms: float, clock: FrameClock) -> int:
    """A chunk in milliseconds -> encoder frames (``clock.encoder_frame_ms`` each, rounded, at least one); 0 stays 0
    (full context). ConfigError for a negative or non-finite chunk."""
    if not 0 <= chunk_ms < float("inf"):
        raise ConfigError(f"the chunk must be a finite number of ms >= 0 (0: full context), got {chunk_ms!r}")
    return 0 if chunk_ms == 0 else max(1, round(chunk_ms / clock.encoder_frame_ms))


def use_decode_chunk(model: ParaformerRecognizer, chunk_size: int) -> None:
    """From now on, every pass of ``model`` outside training runs its encoder in chunks of ``chunk_size`` encoder
    frames (0: full context) with the model's look-back and look-ahead: the masked pass whose greedy transcripts a
    :class:`StreamingRecognizer` at that chunk gives one utterance at a time, here for whole batches
    (``eval.py --chunk-ms``). ConfigError for a model that cannot stream or a negative chunk."""
    require_streamable(model)
    check_chunk_size(model, chunk_size)
    model.encoder.streaming = replace(model.cfg.streaming, enabled=True, decode_chunk_size=chunk_size)


class StreamingFeatures:
    """The front end of a recording that arrives in pieces: :meth:`accept` (samples [n]) -> the feature frames
    [t, F] the samples so far complete, through ``normalizer`` when given.

    A log-mel frame covers ``win_length`` samples every ``hop_length`` (no centring padding, data/frontend.py), so
    frame t is complete once samples up to t * hop + win have arrived; the samples from the next frame's start on are
    kept. :meth:`finish` gives the one zero-padded frame of a recording shorter than a window (nothing otherwise),
    so that the frames equal ``normalizer(frontend(whole recording))``. A normaliser that subtracts each utterance's
    mean (``data.utterance_mean``) needs the whole utterance: ConfigError.
    """

    def __init__(self, frontend: LogMelFrontend, normalizer: FeatureNormalizer | None = None):
        if normalizer is not None and normalizer.utterance_mean:
            raise ConfigError("a stream cannot subtract each utterance's mean (data.utterance_mean true): the mean "
                              "needs the whole utterance")
        self.frontend = frontend
        self.normalizer = normalizer
        self.samples = torch.zeros(0)  # [n] from the next frame's first sample on
        self.frames = 0  # frames given so far

    def accept(self, samples: torch.Tensor) -> torch.Tensor:
        """samples [n] (mono, at the front end's sample rate) -> the frames [t, F] they complete."""
        if samples.dim() != 1:
            raise ValueError(f"StreamingFeatures expects mono samples [n], got shape {tuple(samples.shape)}")
        buffer = torch.cat([self.samples, samples.float().cpu()])  # [n']
        win, hop = self.frontend.win_length, self.frontend.hop_length
        count = 0 if buffer.numel() < win else 1 + (buffer.numel() - win) // hop
        if count == 0:
            self.samples = buffer
            return torch.zeros(0, self.frontend.n_mels)
        features = self.frontend(buffer[:(count - 1) * hop + win])  # [count, F]
        self.samples = buffer[count * hop:]
        self.frames += count
        return self._normalized(features)

    def finish(self) -> torch.Tensor:
        """The end of the recording -> [1, F] for a recording shorter than one window (zero-padded), else [0, F]."""
        if self.frames > 0 or self.samples.numel() == 0:
            return torch.zeros(0, self.frontend.n_mels)
        self.frames = 1
        return self._normalized(self.frontend(self.samples))

    def _normalized(self, features: torch.Tensor) -> torch.Tensor:
        return self.normalizer(features) if self.normalizer is not None else features
