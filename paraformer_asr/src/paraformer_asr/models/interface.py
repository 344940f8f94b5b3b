"""What every model of the package offers the training loop, the decoders and the scripts.

    compute_loss(batch, decoder_scale=1.0) -> LossOutput (decoder_scale weights the decoder's loss: 0 in a CTC
        warm-up)
    greedy_decode(features, feat_mask) -> (tokens [B, T_out] long, lengths [B] long)
    beam_search(features, feat_mask, beam_size, lm=None, lm_weight=0.0, ctc_score_weight=0.0, hotwords=None,
                lexicon=None, length_penalty=1.0)
        -> (tokens [B, beam, T_out], scores [B, beam], lengths [B, beam]); ``lm`` a TokenNgramLM
        (decode/ngram_lm.py) joined by shallow fusion with weight ``lm_weight``; ``ctc_score_weight`` > 0 ranks the
        autoregressive baseline's finished beams again by its CTC head (a ValueError for the Paraformer, whose CTC
        score ranks length candidates); ``hotwords`` a HotwordTrie (decode/hotwords.py) the search is biased toward;
        ``lexicon`` a LexiconAutomaton (decode/lexicon.py) the Paraformer's hypotheses are held to (a ValueError for
        the autoregressive baseline); ``length_penalty`` the power of the token count dividing each finished beam's
        summed score (the Paraformer's beams all have one count: no ranking changes)
    gives_timestamps: bool attribute, True when the model also offers
        decode_aligned(features, feat_mask, beam_size, lm, lm_weight, length_candidates, count_prior,
                       ctc_score_weight, hotwords, lexicon, length_penalty, phrases) -> (tokens, lengths, extraction)
                       (``phrases``: PhraseCandidates scored whole beside the length candidates' hypotheses,
                       decode/phrases.py),
        decode_scored(...) -> the same and each hypothesis's normalised score [B], and
        token_spans(extraction) -> (starts [B, N], ends [B, N]) encoder-frame positions (its token extractor's
        alignment, CIF fires or CTC frames; decode/timestamps.py turns them into milliseconds)
    calibrates_cif: bool attribute, True when the model also offers
        calibrate_alpha_scale(batches, device) -> float (refits the CIF's inference scale on held-out
        utterances; models/cif.py)
    encoder: the shared speech encoder (models/encoder.py); decoder: the model's decoder stack
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paraformer_asr.models.cif import CifOutput
from paraformer_asr.models.ctc_extractor import CtcExtraction


@dataclass
class LossOutput:
    """total: scalar tensor to backpropagate; terms: every loss term as a detached scalar tensor
    (keys 'ce', 'quantity' (CIF only), 'ctc' for the Paraformer; 'ce', 'ctc' for the autoregressive baseline);
    logits [B, N, V] of the trained pass; cif: the token extractor's output, a CifOutput or a CtcExtraction
    (None for models without one)."""

    total: torch.Tensor
    terms: dict[str, torch.Tensor]
    logits: torch.Tensor
    cif: CifOutput | CtcExtraction | None
