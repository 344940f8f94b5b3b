"""Shallow fusion of the token n-gram LM (decode/ngram_lm.py) into beam search.

The LM is estimated over the model's own token ids (:func:`build_token_lm`): characters, or subword units when the
checkpoint was trained with ``data.tokenizer: bpe | unigram``; nothing else changes.

Every model reaches it the same way: ``model.beam_search(features, feat_mask, beam_size, lm=, lm_weight=)``.
The Paraformer runs :func:`fused_posterior_beam_search` over its per-position posteriors; the
autoregressive baseline adds the LM at every step of its own search (decode/ar_search.py).

Score of a hypothesis y_1..y_N of the Paraformer:
    sum_i log P_am(y_i | position i) + lm_weight * (sum_i log P_lm(y_i | y_<i) + log P_lm(eos | y_1..y_N))
The token count N is fixed by the CIF predictor, so the LM's end-of-sentence term is added with the
last token of each utterance (before pruning), and the fused search ranks whole sentences.
"""

from __future__ import annotations

from typing import Iterable

import torch

from paraformer_asr.checks import assert_shape
from paraformer_asr.data.tokenizer import Tokenizer
from paraformer_asr.decode.beam import StateScorer, factorized_beam_search
from paraformer_asr.decode.ngram_lm import TokenNgramLM


def build_token_lm(texts: Iterable[str], tokenizer: Tokenizer, order: int = 4) -> TokenNgramLM:
    """An n-gram LM over the tokenizer's ids (characters or subword units) estimated from (training)
    transcripts; unk and blank are never predicted."""
    exclude = [tokenizer.unk_id] + ([tokenizer.blank_id] if tokenizer.blank_id is not None else [])
    lm = TokenNgramLM(order, tokenizer.vocab_size, tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id, exclude)
    return lm.fit(tokenizer.encode(text) for text in texts)


class SentenceLmScorer:
    """Prefix scorer for :func:`factorized_beam_search`: history [R, k] -> LM log-probs [R, V] of the
    token at position k, plus log P_lm(eos | history + token) for the rows whose utterance ends there.

    ``lengths`` [R] holds the token count of each row's utterance (R = B * beam, row r belongs to
    utterance r // beam); the scores come back on the device of ``lengths``.
    """

    def __init__(self, lm: TokenNgramLM, lengths: torch.Tensor):
        self.lm = lm
        self.device = lengths.device
        self.lengths = lengths.cpu()

    def __call__(self, history: torch.Tensor) -> torch.Tensor:
        rows, position = history.shape
        history = history.cpu()
        scores = self.lm.log_probs(history)  # [R, V]
        ending = (self.lengths == position + 1).nonzero().flatten()  # rows whose last token is chosen now
        if ending.numel() == 0:
            return scores.to(self.device)
        vocab = scores.shape[1]
        candidates = torch.arange(vocab).repeat(ending.numel()).unsqueeze(1)  # [E*V, 1]
        extended = torch.cat([history[ending].repeat_interleave(vocab, dim=0), candidates], dim=1)  # [E*V, k+1]
        eos = self.lm.log_probs(extended)[:, self.lm.eos_id].view(-1, vocab)  # [E, V]
        scores[ending] = scores[ending] + eos
        return scores.to(self.device)


def fused_posterior_beam_search(log_probs: torch.Tensor, token_mask: torch.Tensor, beam_size: int, pad_id: int,
                                lm: TokenNgramLM, lm_weight: float = 0.0,
                                state_scorer: StateScorer | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Beam search over per-position posteriors with shallow LM fusion, batched over utterances and beams.

    log_probs [B, N, V], token_mask [B, N] bool -> tokens [B, beam, N] (pad_id past each length),
    scores [B, beam] (am + lm_weight * lm sentence log-prob, plus the ``state_scorer``'s terms when one is given,
    e.g. hotword biasing; best first; -inf for beams that cannot exist). ``lm_weight`` 0 gives exactly
    :func:`factorized_beam_search`.
    """
    dims = assert_shape(log_probs, "B,N,V", "fusion log_probs")
    assert_shape(token_mask, "B,N", "fusion token_mask", dims)
    if lm_weight < 0:
        raise ValueError(f"lm_weight must be >= 0, got {lm_weight}")
    if lm.vocab_size != dims["V"]:
        raise ValueError(f"the LM has {lm.vocab_size} tokens but the posteriors have {dims['V']}")
    scorer = SentenceLmScorer(lm, token_mask.sum(dim=1).repeat_interleave(beam_size))
    tokens, scores = factorized_beam_search(log_probs, token_mask, beam_size, pad_id, scorer, lm_weight, state_scorer)
    return tokens, scores
