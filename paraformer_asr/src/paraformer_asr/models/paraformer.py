"""The Paraformer: encoder -> token extractor -> non-autoregressive decoder (+ glancing, optional CTC).

The token extractor (``model.predictor``) places the decoder's queries: ``cif``, the CIF predictor
(models/cif.py), or ``ctc``, the merged CTC greedy path as Paraformer-v2 takes it (models/ctc_extractor.py), whose
queries are the mean encoder states of each token's frames (``model.ctc_queries: states``, this project's variant)
or, as in Paraformer-v2, the mean CTC posteriors mapped to D (``posteriors``). The network and its
losses only: its search (greedy, beam, LM fusion, length candidates, CTC rescoring) is decode/paraformer_search.py,
whose ``ParaformerRecognizer`` (this model with that search) offers the model interface of models/interface.py.
"""

from __future__ import annotations

from typing import Iterable

import torch
import torch.nn as nn

from paraformer_asr.checks import assert_shape
from paraformer_asr.config import ModelConfig
from paraformer_asr.data.batching import Batch
from paraformer_asr.losses import ctc_loss, hybrid_loss_weights, label_smoothed_cross_entropy, quantity_loss
from paraformer_asr.models.cif import CifOutput, CifPredictor, fit_alpha_scale
from paraformer_asr.models.ctc import optional_ctc_head
from paraformer_asr.models.ctc_extractor import CtcExtraction, CtcTokenExtractor
from paraformer_asr.models.decoder import NarDecoder
from paraformer_asr.models.encoder import Encoder
from paraformer_asr.models.glancing import glancing_mix
from paraformer_asr.models.interface import LossOutput
from paraformer_asr.models.targets import append_eos


TokenExtraction = CifOutput | CtcExtraction


class Paraformer(nn.Module):

    def __init__(self, cfg: ModelConfig, input_dim: int, vocab_size: int, pad_id: int, eos_id: int,
                 blank_id: int | None, subsampling_factor: int):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.pad_id = pad_id
        self.eos_id = eos_id
        self.blank_id = blank_id
        self.encoder = Encoder.from_config(cfg, input_dim, subsampling_factor)
        if cfg.predictor == "ctc":
            self.predictor = CtcTokenExtractor(cfg.d_model, blank_id, cfg.ctc_queries, vocab_size)
        else:
            self.predictor = CifPredictor(cfg.d_model, cfg.cif_kernel_size, cfg.cif_threshold, cfg.cif_tail_threshold)
        self.decoder = NarDecoder(vocab_size, cfg.d_model, cfg.num_heads, cfg.decoder_layers, cfg.ffn_dim,
                                  cfg.dropout, cfg.decoder_fsmn_kernel, cfg.decoder_positions)
        self.ctc = optional_ctc_head(cfg.d_model, vocab_size, cfg.ctc_weight, blank_id)

    @property
    def calibrates_cif(self) -> bool:
        """calibrate_alpha_scale applies: the CIF's inference scale from held-out utterances (``cif`` only)."""
        return self.cfg.predictor == "cif"

    def encode(self, features: torch.Tensor, feat_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features [B, T, F], feat_mask [B, T] -> (encoder_out [B, T', D], enc_mask [B, T'])"""
        return self.encoder(features, feat_mask)

    def cif_alphas(self, encoder_out: torch.Tensor, enc_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """encoder_out [B, T', D], enc_mask [B, T'] -> (raw alphas [B, T'] in threshold units, the same times the
        ``alpha_scale`` calibration: what inference integrates); ``cif`` only."""
        alphas = self.predictor.predict_alphas(encoder_out.float(), enc_mask) / self.predictor.threshold  # [B, T']
        return alphas, alphas * self.predictor.alpha_scale

    def ctc_log_probs(self, encoder_out: torch.Tensor) -> torch.Tensor | None:
        """encoder_out [B, T', D] -> the CTC head's log-probs [B, T', V], or None without a CTC head."""
        return self.ctc(encoder_out) if self.ctc is not None else None

    def ctc_frame_queries(self, encoder_out: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
        """The CTC extractor's per-frame queries: encoder_out [B, T', D], log_probs [B, T', V] -> [B, T', D]."""
        return self.predictor.frame_queries(encoder_out, log_probs)

    def decode_queries(self, embeddings: torch.Tensor, token_mask: torch.Tensor, encoder_out: torch.Tensor,
                       enc_mask: torch.Tensor) -> torch.Tensor:
        """The decoder alone: queries [B, N, D], token_mask [B, N] over encoder_out [B, T', D] -> logits [B, N, V]."""
        return self.decoder(embeddings, token_mask, encoder_out, enc_mask)

    def decoder_targets(self, tokens: torch.Tensor, token_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the extractor places queries for and the decoder predicts: tokens [B, S], token_lengths [B] -> (targets
        [B, S + b], lengths [B] + b), b = ``model.predictor_bias`` (1: an <eos> after each transcript)."""
        if self.cfg.predictor_bias == 0:
            return tokens, token_lengths
        return append_eos(tokens, token_lengths, self.eos_id, self.pad_id)

    def extract_tokens(self, encoder_out: torch.Tensor, enc_mask: torch.Tensor, targets: torch.Tensor | None = None,
                       target_lengths: torch.Tensor | None = None,
                       with_ctc: bool = True) -> tuple[TokenExtraction, torch.Tensor | None]:
        """encoder_out [B, T', D], enc_mask [B, T'] -> (extraction with embeddings [B, N, D], CTC log-probs
        [B, T', V] or None when the model has no CTC head). With ``targets`` [B, N] / ``target_lengths`` [B]
        (training, oracle) N is the target length: the CIF is scaled to it, the CTC path is the forced alignment.
        ``with_ctc`` False (a pass that has no use for the CTC log-probs): the CTC head runs only where the
        extractor reads it (``ctc``), and a CIF model gives None."""
        needs_ctc = with_ctc or self.cfg.predictor == "ctc"
        log_probs = self.ctc(encoder_out) if self.ctc is not None and needs_ctc else None  # [B, T', V]
        if self.cfg.predictor == "ctc":
            return self.predictor(encoder_out, enc_mask, log_probs, targets, target_lengths), log_probs
        return self.predictor(encoder_out, enc_mask, target_lengths), log_probs

    def forward(self, features: torch.Tensor, feat_mask: torch.Tensor, tokens: torch.Tensor | None = None,
                token_lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, TokenExtraction]:
        """One decoder pass, no glancing: -> (logits [B, N, V], extraction).

        With ``tokens`` [B, S] / ``token_lengths`` [B] the queries follow the true lengths (N = S_max, + 1 with
        ``model.predictor_bias``: the <eos> position); without, N comes from the predicted alphas (the
        end-of-sentence fire included) or from the merged CTC path.
        """
        encoder_out, enc_mask = self.encode(features, feat_mask)  # [B, T', D], [B, T']
        targets, target_lengths = (None, None) if tokens is None else self.decoder_targets(tokens, token_lengths)
        extraction, _ = self.extract_tokens(encoder_out, enc_mask, targets, target_lengths, with_ctc=False)
        logits = self.decoder(extraction.embeddings, extraction.token_mask, encoder_out, enc_mask)  # [B, N, V]
        return logits, extraction

    def compute_loss(self, batch: Batch, decoder_scale: float = 1.0) -> LossOutput:
        """Label-smoothed CE over the valid target positions (a mean per token), quantity_weight x the
        quantity loss (``cif`` only), plus CTC combined by ``model.ctc_combination``; see losses/seq_losses.py.
        ``decoder_scale`` multiplies the CE's weight (0 during ``train.ctc_warmup_steps``; the graph stays whole, so
        every parameter still gets a gradient, zero for the decoder's)."""
        encoder_out, enc_mask = self.encode(batch.features, batch.feat_mask)  # [B, T', D], [B, T']
        targets, target_lengths = self.decoder_targets(batch.tokens, batch.token_lengths)  # [B, N], [B]
        extraction, ctc_log_probs = self.extract_tokens(encoder_out, enc_mask, targets, target_lengths)
        queries = extraction.embeddings  # [B, N, D]
        token_mask = extraction.token_mask  # [B, N]
        assert_shape(targets, f"{targets.shape[0]},{queries.shape[1]}", "target tokens")
        decoder_input, loss_mask = queries, token_mask  # [B, N, D], [B, N]
        if self.training and self.cfg.glancing_ratio > 0:
            with torch.no_grad():
                first_pass = self.decoder(queries, token_mask, encoder_out, enc_mask).argmax(dim=-1)  # [B, N]
            decoder_input, glanced = glancing_mix(queries, self.decoder.embed_tokens(targets), first_pass, targets,
                                                  token_mask, self.cfg.glancing_ratio)  # [B, N, D], [B, N]
            if self.cfg.glancing_loss == "unglanced":
                loss_mask = token_mask & ~glanced
        logits = self.decoder(decoder_input, token_mask, encoder_out, enc_mask)  # [B, N, V]
        ce = label_smoothed_cross_entropy(logits, targets, loss_mask, self.cfg.label_smoothing)  # scalar
        decoder_weight, ctc_weight = hybrid_loss_weights(self.cfg.ctc_weight if self.ctc is not None else 0.0,
                                                         self.cfg.ctc_combination)
        total = decoder_scale * decoder_weight * ce  # scalar
        terms = {"ce": ce.detach()}
        if isinstance(extraction, CifOutput):
            quantity = quantity_loss(extraction.alpha_sum, target_lengths, self.cfg.length_normalized_loss)  # scalar
            total = total + self.cfg.quantity_weight * quantity
            terms["quantity"] = quantity.detach()
        if ctc_log_probs is not None:
            ctc = ctc_loss(ctc_log_probs, enc_mask.sum(1), batch.tokens, batch.token_lengths, self.blank_id,
                           self.cfg.ctc_normalization)  # scalar
            total = total + ctc_weight * ctc
            terms["ctc"] = ctc.detach()
        return LossOutput(total=total, terms=terms, logits=logits, cif=extraction)

    @torch.no_grad()
    def calibrate_alpha_scale(self, batches: Iterable[Batch], device: torch.device) -> float:
        """Refit the predictor's inference ``alpha_scale`` on held-out utterances so that their predicted token
        counts are right on average (models/cif.py, :func:`fit_alpha_scale`) -> the new scale. The alphas are
        computed as at inference (eval mode); the training mode is restored afterwards."""
        was_training = self.training
        self.eval()
        alpha_sums, target_lengths = [], []
        for batch in batches:
            batch = batch.to(device)
            encoder_out, enc_mask = self.encode(batch.features, batch.feat_mask)  # [B, T', D], [B, T']
            alphas = self.predictor.predict_alphas(encoder_out.float(), enc_mask)  # [B, T'] raw
            alpha_sums.append(alphas.sum(dim=1) / self.predictor.threshold)  # [B]
            target_lengths.append(self.decoder_targets(batch.tokens, batch.token_lengths)[1])  # [B]
        scale = fit_alpha_scale(torch.cat(alpha_sums), torch.cat(target_lengths))
        self.predictor.alpha_scale.fill_(scale)
        self.train(was_training)
        return scale
