"""The modules that are exported as ONNX graphs: each wraps part of a trained model with plain tensor inputs and
outputs (names and shapes in docs/tensor_contracts.md, "Exported graphs").

Paraformer: ``encoder`` -> ``predictor`` -> ``decoder``, plus ``ctc`` (the CTC head: the CTC score of length
candidates, and the CTC extractor's own candidates) for a model trained with one. The predictor (the token
extractor, ``model.predictor``) is its own graph: ``predictor_cif`` or ``predictor_ctc``, the entries of
:data:`PREDICTOR_GRAPHS`, both taking (encoder_out, enc_mask) and giving token embeddings over a fixed number of
slots with the token counts. AR
baseline: ``encoder``, ``cross_kv`` (the cross-attention keys/values, projected once per utterance) and
``decoder_step`` (one token with the self-attention key/value cache as inputs and outputs), plus ``ctc`` with a CTC
head (it ranks the finished beams again); the search loops stay in Python (decode/ar_search.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from paraformer_asr.models.ar_model import DecoderCache, TransformerAR
from paraformer_asr.models.cif import CifPredictor, dense_cif_integrate, inference_token_count
from paraformer_asr.models.ctc_extractor import CtcTokenExtractor
from paraformer_asr.models.paraformer import Paraformer


@dataclass(frozen=True)
class GraphSpec:
    """One exported graph: its file stem, module, example inputs (for tracing) and input/output names, with
    the axes of each that are dynamic (axis -> name); ``quantize``: whether --quantize int8 quantizes it."""

    name: str
    module: nn.Module
    example: tuple[torch.Tensor, ...]
    inputs: dict[str, dict[int, str]]
    outputs: dict[str, dict[int, str]]
    quantize: bool = True


class EncoderGraph(nn.Module):
    """features [B, T, F] float, feat_mask [B, T] bool -> encoder_out [B, T', D], enc_mask [B, T'] bool."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, features: torch.Tensor, feat_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model.encode(features, feat_mask)


class CifPredictorGraph(nn.Module):
    """The CIF at inference (models/cif.py): encoder_out [B, T', D], enc_mask [B, T'] bool -> alphas [B, T'] (raw),
    integrated_alphas [B, T'] (x alpha_scale, threshold units), embeddings [B, S, D], num_tokens [B] long,
    fire_frames [B, S] long; S = T' x ceil(alpha_scale / threshold) token slots, enough for any count (each
    alpha < 1), so no shape depends on the data. The caller keeps the first max(num_tokens) slots."""

    outputs = ("alphas", "integrated_alphas", "embeddings", "num_tokens", "fire_frames")

    def __init__(self, model: Paraformer):
        super().__init__()
        self.predictor: CifPredictor = model.predictor
        self.slots_per_frame = max(1, math.ceil(float(self.predictor.alpha_scale) / self.predictor.threshold))

    def forward(self, encoder_out: torch.Tensor, enc_mask: torch.Tensor):
        alphas = self.predictor.predict_alphas(encoder_out, enc_mask)  # [B, T']
        integrated = alphas / self.predictor.threshold * self.predictor.alpha_scale  # [B, T']
        num_tokens = inference_token_count(integrated, self.predictor.tail_threshold / self.predictor.threshold)
        slots = encoder_out.shape[1] * self.slots_per_frame
        embeddings, _, fire_frames = dense_cif_integrate(encoder_out, integrated, num_tokens, slots)
        return alphas, integrated, embeddings, num_tokens, fire_frames


class CtcPredictorGraph(nn.Module):
    """The CTC token extraction at inference (models/ctc_extractor.py, the merged greedy path of the model's CTC
    head): encoder_out [B, T', D], enc_mask [B, T'] bool -> frame_weights [B, T'] (posterior of not-blank),
    frame_tokens [B, T'] long, embeddings [B, S, D], num_tokens [B] long, frame_starts / frame_ends [B, S] long;
    S = T' slots (a token holds at least one frame). The caller keeps the first max(num_tokens) slots."""

    outputs = ("frame_weights", "frame_tokens", "embeddings", "num_tokens", "frame_starts", "frame_ends")

    def __init__(self, model: Paraformer):
        super().__init__()
        self.ctc = model.ctc
        self.predictor: CtcTokenExtractor = model.predictor

    def forward(self, encoder_out: torch.Tensor, enc_mask: torch.Tensor):
        log_probs = self.ctc(encoder_out)  # [B, T', V]
        extraction = self.predictor.greedy(encoder_out, enc_mask, log_probs, width=encoder_out.shape[1])
        return (extraction.frame_weights, extraction.frame_tokens, extraction.embeddings, extraction.num_tokens,
                extraction.frame_starts, extraction.frame_ends)


# model.predictor (the token extractor) -> its graph module; every one takes (encoder_out, enc_mask) and returns its
# ``outputs``, among them embeddings [B, S, D] and num_tokens [B] (deploy/runtime.py reads them back)
PREDICTOR_GRAPHS = {"cif": CifPredictorGraph, "ctc": CtcPredictorGraph}


class CtcHeadGraph(nn.Module):
    """encoder_out [B, T', D] -> log_probs [B, T', V] float32: the CTC head (the CTC score of length candidates or
    of the AR baseline's beams)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.ctc = model.ctc

    def forward(self, encoder_out: torch.Tensor) -> torch.Tensor:
        return self.ctc(encoder_out)


class NarDecoderGraph(nn.Module):
    """embeddings [B, N, D], token_mask [B, N] bool, encoder_out [B, T', D], enc_mask [B, T'] -> logits [B, N, V]."""

    def __init__(self, model: Paraformer):
        super().__init__()
        self.decoder = model.decoder

    def forward(self, embeddings, token_mask, encoder_out, enc_mask) -> torch.Tensor:
        return self.decoder(embeddings, token_mask, encoder_out, enc_mask)


class CrossKeyValueGraph(nn.Module):
    """encoder_out [B, T', D] -> cross_k, cross_v [layers, B, H, T', Dh] (every decoder layer's cross-attention)."""

    def __init__(self, model: TransformerAR):
        super().__init__()
        self.decoder = model.decoder

    def forward(self, encoder_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = torch.ones(encoder_out.shape[:2], dtype=torch.bool, device=encoder_out.device)  # [B, T']
        cache = self.decoder.start_cache(encoder_out, mask)
        return torch.stack([k for k, _ in cache.cross_kv]), torch.stack([v for _, v in cache.cross_kv])


class DecoderStepGraph(nn.Module):
    """One cached decoding step (TransformerAR.decode_step): token [B, 1] long at position L, self_k / self_v
    [layers, B, H, L, Dh], cross_k / cross_v [layers, B, H, T', Dh], enc_mask [B, T'] bool -> log_probs [B, V]
    float32, new_self_k / new_self_v [layers, B, H, L + 1, Dh]."""

    def __init__(self, model: TransformerAR):
        super().__init__()
        self.decoder = model.decoder

    def forward(self, token, self_k, self_v, cross_k, cross_v, enc_mask):
        cache = DecoderCache(enc_mask, list(zip(cross_k.unbind(0), cross_v.unbind(0))),
                             list(zip(self_k.unbind(0), self_v.unbind(0))))
        logits, cache = self.decoder.step(token, cache)  # [B, V]
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        return (log_probs, torch.stack([k for k, _ in cache.self_kv]), torch.stack([v for _, v in cache.self_kv]))


BATCH, FRAMES, ENC_FRAMES, TOKENS, CACHE = "batch", "frames", "encoder_frames", "tokens", "cached_tokens"


def _encoder_spec(model: nn.Module, input_dim: int) -> tuple[GraphSpec, torch.Tensor, torch.Tensor]:
    """The encoder graph and example encoder outputs for tracing the graphs after it."""
    features = torch.randn(2, 64, input_dim)  # [B, T, F]
    feat_mask = torch.ones(2, 64, dtype=torch.bool)
    feat_mask[1, 48:] = False
    with torch.no_grad():
        encoder_out, enc_mask = model.encode(features, feat_mask)
    spec = GraphSpec("encoder", EncoderGraph(model), (features, feat_mask),
                     {"features": {0: BATCH, 1: FRAMES}, "feat_mask": {0: BATCH, 1: FRAMES}},
                     {"encoder_out": {0: BATCH, 1: ENC_FRAMES}, "enc_mask": {0: BATCH, 1: ENC_FRAMES}})
    return spec, encoder_out, enc_mask


def paraformer_graphs(model: Paraformer, input_dim: int, predictor: str = "cif") -> list[GraphSpec]:
    """encoder, predictor_<predictor> (:data:`PREDICTOR_GRAPHS`), decoder, and ctc for a CIF model with a CTC
    head."""
    encoder, encoder_out, enc_mask = _encoder_spec(model, input_dim)
    enc_axes = {"encoder_out": {0: BATCH, 1: ENC_FRAMES}, "enc_mask": {0: BATCH, 1: ENC_FRAMES}}
    graph = PREDICTOR_GRAPHS[predictor](model)
    per_frame, per_slot = {0: BATCH, 1: ENC_FRAMES}, {0: BATCH, 1: "token_slots"}
    axes = {"num_tokens": {0: BATCH}, "embeddings": per_slot, "fire_frames": per_slot, "frame_starts": per_slot,
            "frame_ends": per_slot}
    predictor_spec = GraphSpec(f"predictor_{predictor}", graph, (encoder_out, enc_mask), enc_axes,
                               {name: axes.get(name, per_frame) for name in graph.outputs}, quantize=False)
    tokens = 5
    embeddings = torch.randn(2, tokens, encoder_out.shape[2])  # [B, N, D]
    token_mask = torch.ones(2, tokens, dtype=torch.bool)
    token_mask[1, 3:] = False
    decoder = GraphSpec("decoder", NarDecoderGraph(model), (embeddings, token_mask, encoder_out, enc_mask),
                        {"embeddings": {0: BATCH, 1: TOKENS}, "token_mask": {0: BATCH, 1: TOKENS}, **enc_axes},
                        {"logits": {0: BATCH, 1: TOKENS}})
    return [encoder, predictor_spec, decoder, *_ctc_spec(model, encoder_out)]


def _ctc_spec(model: nn.Module, encoder_out: torch.Tensor) -> list[GraphSpec]:
    """The ``ctc`` graph of a model with a CTC head (none without)."""
    if model.ctc is None:
        return []
    frames = {0: BATCH, 1: ENC_FRAMES}
    return [GraphSpec("ctc", CtcHeadGraph(model), (encoder_out,), {"encoder_out": frames}, {"log_probs": frames})]


def ar_graphs(model: TransformerAR, input_dim: int) -> list[GraphSpec]:
    """encoder, cross_kv, decoder_step, and ctc for a model with a CTC head."""
    encoder, encoder_out, enc_mask = _encoder_spec(model, input_dim)
    cross = CrossKeyValueGraph(model)
    with torch.no_grad():
        cross_k, cross_v = cross(encoder_out)  # [layers, B, H, T', Dh]
    layers, batch, heads, _, head_dim = cross_k.shape
    self_k = torch.randn(layers, batch, heads, 3, head_dim)  # [layers, B, H, L, Dh]
    kv = {1: BATCH, 3: ENC_FRAMES}
    cache = {1: BATCH, 3: CACHE}
    step = GraphSpec("decoder_step", DecoderStepGraph(model),
                     (torch.full((batch, 1), model.bos_id), self_k, self_k.clone(), cross_k, cross_v, enc_mask),
                     {"token": {0: BATCH}, "self_k": cache, "self_v": cache, "cross_k": kv, "cross_v": kv,
                      "enc_mask": {0: BATCH, 1: ENC_FRAMES}},
                     {"log_probs": {0: BATCH}, "new_self_k": {1: BATCH, 3: "grown_tokens"},
                      "new_self_v": {1: BATCH, 3: "grown_tokens"}})
    cross_spec = GraphSpec("cross_kv", cross, (encoder_out,), {"encoder_out": {0: BATCH, 1: ENC_FRAMES}},
                           {"cross_k": kv, "cross_v": kv})
    return [encoder, cross_spec, step, *_ctc_spec(model, encoder_out)]
