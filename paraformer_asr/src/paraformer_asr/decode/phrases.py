"""Phrase candidates: the training transcripts scored whole beside the Paraformer's searched hypotheses.

The beam search over the decoder's per-position posteriors (decode/lm_fusion.py) keeps a few prefixes at each
position; on a long sentence the right one can fall out of the beam early although its full score, the sum the
candidates are ranked by, is the best. A corpus of phrases (commands, a menu, read prompts) can be scored exactly
instead: each distinct training transcript whose token count is one of an utterance's length candidates gets the
decoder's log-prob of its tokens at that candidate, the LM's sentence log-prob and the same CTC, length and prior
terms as the searched hypotheses (decode/paraformer_search.py, ``decode_length_candidates``), and competes with
them, reading the posteriors the candidates already have. A long sentence's count is off by more than the spread,
so with the CIF the listed lengths within ``PHRASE_REACH`` of the count are decoded as candidates too
(:func:`phrase_counts_in_reach`). A sentence outside the list is still decoded by the search, and a listed phrase
wins only where the ranking score prefers it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Iterable

import torch

from paraformer_asr.data.tokenizer import Tokenizer
from paraformer_asr.errors import ConfigError

MAX_PHRASES = 5000  # a phrase list, not a text corpus: the CTC term is computed for every listed phrase in reach
PHRASE_REACH = 0.2  # a phrase is also scored when its count is within this share of the extractor's count


@dataclass
class PhraseCandidates:
    """tokens [P, L] long (0 past each length), lengths [P] long, lm_scores [P] float (the natural-log sentence
    probability of each phrase, end of sentence included, under ``lm``; 0 without one); texts: the P phrases; lm:
    the TokenNgramLM they were scored by (None: none), which a search fusing an LM must use too."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    lm_scores: torch.Tensor
    texts: list[str]
    lm: object = None

    @classmethod
    def build(cls, texts: Iterable[str], tokenizer: Tokenizer, lm=None) -> "PhraseCandidates":
        """The distinct non-empty ``texts`` (sorted), encoded by ``tokenizer``, scored by ``lm`` (a TokenNgramLM of
        the same units) when given."""
        phrases = sorted({text for text in texts if tokenizer.encode(text)})
        encoded = [tokenizer.encode(text) for text in phrases]
        lengths = torch.tensor([len(ids) for ids in encoded], dtype=torch.long)  # [P]
        tokens = torch.zeros(len(encoded), int(lengths.max()) if encoded else 0, dtype=torch.long)  # [P, L]
        for row, ids in enumerate(encoded):
            tokens[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        return cls(tokens, lengths, torch.zeros(len(encoded)), phrases).scored_by(lm)

    def scored_by(self, lm) -> "PhraseCandidates":
        """The same phrases with ``lm``'s sentence log-probs as their LM term (0 and no LM with None)."""
        units = [row[:length].tolist() for row, length in zip(self.tokens, self.lengths.tolist())]
        lm_scores = torch.tensor([lm.score_sequence(ids) if lm is not None else 0.0 for ids in units],
                                 dtype=torch.float32)  # [P]
        return PhraseCandidates(self.tokens, self.lengths, lm_scores, self.texts, lm)

    def __len__(self) -> int:
        return len(self.texts)

    def to(self, device: torch.device | str) -> "PhraseCandidates":
        return PhraseCandidates(self.tokens.to(device), self.lengths.to(device), self.lm_scores.to(device),
                                self.texts, self.lm)


def training_phrases(transcripts: list[str], tokenizer: Tokenizer, lm, asked: bool) -> PhraseCandidates | None:
    """The phrase candidates of a checkpoint's training ``transcripts``, or None past MAX_PHRASES distinct ones (a text
    corpus rather than a phrase list): a ConfigError when they were ``asked`` for by a flag, a warning on stderr when
    they come from the config's ``decode`` section (its decoding then goes on without them)."""
    distinct = len(set(transcripts))
    if distinct <= MAX_PHRASES:
        return PhraseCandidates.build(transcripts, tokenizer, lm)
    why = (f"the training transcripts hold {distinct} distinct sentences, phrase candidates are for phrase lists of "
           f"at most {MAX_PHRASES}")
    if asked:
        raise ConfigError(f"--phrase-candidates: {why}; use --no-phrase-candidates")
    print(f"warning: decode.phrase_candidates left out: {why}", file=sys.stderr)
    return None


def phrase_counts_in_reach(phrases: PhraseCandidates, counts: torch.Tensor, spread: int,
                           reach: float) -> torch.Tensor:
    """The phrase token counts an utterance reaches beyond its length candidates: counts [B] long (the extractor's
    count of real tokens) -> [B, E] long, the distinct phrase lengths L with ``spread`` < |L - N| <= ``reach`` x N,
    each row padded with its own N (E: the most any row has, 0 for none). A long sentence's count is off by more
    tokens than a short one's: these are the candidates its listed phrases need."""
    lengths = phrases.lengths.unique().to(counts.device)  # [U]
    distance = (lengths.unsqueeze(0) - counts.unsqueeze(1)).abs()  # [B, U]
    limit = (counts.to(torch.float32) * reach).floor().unsqueeze(1)  # [B, 1]
    wanted = (distance > spread) & (distance <= limit)  # [B, U]
    extra = int(wanted.sum(dim=1).max()) if wanted.numel() else 0
    order = wanted.to(torch.int8).argsort(dim=1, descending=True, stable=True)[:, :extra]  # [B, E] wanted first
    return torch.where(wanted.gather(1, order), lengths[order], counts.unsqueeze(1))


def phrase_decoder_scores(phrases: PhraseCandidates, log_probs: torch.Tensor, counts: torch.Tensor,
                          width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each phrase's decoder log-prob at the length candidate of its token count.

    log_probs [B*K, N, V] (K = ``width`` consecutive rows per utterance, the candidates' posteriors), counts [B*K]
    long (each row's token count) -> (scores [B, P]: the summed log-probs of the phrase's tokens at its positions,
    -inf where no candidate of the utterance has the phrase's count; rows [B, P] long: the row of [B*K] the score
    was read from, the utterance's first row where there is none)."""
    batch, positions = log_probs.shape[0] // width, log_probs.shape[1]
    matches = counts.view(batch, width, 1) == phrases.lengths.view(1, 1, -1)  # [B, K, P]
    found = matches.any(dim=1)  # [B, P]
    candidate = matches.to(torch.int8).argmax(dim=1)  # [B, P] the first candidate with that count
    rows = torch.arange(batch, device=counts.device).unsqueeze(1) * width + candidate  # [B, P]
    utterance, phrase = found.nonzero(as_tuple=True)  # [M] each: the pairs in reach, no others read
    span = min(positions, phrases.tokens.shape[1])  # a phrase in reach has at most N units
    tokens = phrases.tokens[phrase, :span]  # [M, S]
    picked = log_probs[rows[utterance, phrase].unsqueeze(1), torch.arange(span, device=counts.device), tokens]  # [M, S]
    inside = torch.arange(span, device=counts.device) < phrases.lengths[phrase].unsqueeze(1)  # [M, S]
    scores = torch.full(found.shape, float("-inf"), device=log_probs.device)  # [B, P]
    scores[utterance, phrase] = torch.where(inside, picked, torch.zeros_like(picked)).sum(dim=1)
    return scores, rows
