"""What every model of the package offers the training loop, the decoders and the scripts.

    compute_loss(batch) -> LossOutput
    greedy_decode(features, feat_mask) -> (tokens [B, T_out] long, lengths [B] long)
    beam_search(features, feat_mask, beam_size, lm=None, lm_weight=0.0)
        -> (tokens [B, beam, T_out], scores [B, beam], lengths [B, beam]); ``lm`` a CharNgramLM
        (decode/ngram_lm.py) joined by shallow fusion with weight ``lm_weight``
    gives_timestamps: bool class attribute, True when the model also offers
        decode_aligned(features, feat_mask, beam_size, lm, lm_weight) -> (tokens, lengths, cif)
        (token times from its CIF predictor: decode/timestamps.py)
    calibrates_cif: bool class attribute, True when the model also offers
        calibrate_alpha_scale(batches, device) -> float (refits the CIF's inference scale on held-out
        utterances; models/cif.py)
    encoder: the shared speech encoder (models/encoder.py); decoder: the model's decoder stack
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paraformer_asr.models.cif import CifOutput


@dataclass
class LossOutput:
    """total: scalar tensor to backpropagate; terms: every loss term as a detached scalar tensor
    (keys 'ce', 'quantity', 'ctc' for the Paraformer; 'ce', 'ctc' for the autoregressive baseline);
    logits [B, N, V] of the trained pass; cif: the predictor output (None for models without one)."""

    total: torch.Tensor
    terms: dict[str, torch.Tensor]
    logits: torch.Tensor
    cif: CifOutput | None
