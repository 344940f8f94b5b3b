"""The Paraformer's search over its one-pass outputs: greedy and beam search, LM fusion (decode/lm_fusion.py),
length candidates ranked with a count prior and the CTC head's score, the oracle-length diagnostic, and the token
spans that timestamps are read from (decode/timestamps.py).

:class:`ParaformerDecoding` is shared by the PyTorch model (:class:`ParaformerRecognizer`, what
``build_model`` returns) and the exported one (deploy/runtime.py); the network passes it calls are the model's
(models/paraformer.py).
"""

from __future__ import annotations

import torch

from paraformer_asr.checks import check_finite
from paraformer_asr.decode.beam import factorized_beam_search
from paraformer_asr.decode.hotwords import HotwordScorer, HotwordTrie, biasing
from paraformer_asr.decode.lexicon import LexiconAutomaton, LexiconScorer, SummedScorer
from paraformer_asr.decode.lm_fusion import fused_posterior_beam_search
from paraformer_asr.decode.phrases import (PHRASE_REACH, PhraseCandidates, phrase_counts_in_reach,
                                          phrase_decoder_scores)
from paraformer_asr.decode.timestamps import cif_fire_spans
from paraformer_asr.models.cif import CifOutput, cif_integrate, inference_token_count, scale_to_counts
from paraformer_asr.models.ctc import ctc_rescored, length_norm
from paraformer_asr.models.ctc_extractor import (CtcExtraction, blank_offsets, candidate_frame_tokens,
                                                 frames_to_extraction)
from paraformer_asr.models.paraformer import Paraformer, TokenExtraction


def candidate_counts(counts: torch.Tensor, spread: int, minimum: int = 1) -> torch.Tensor:
    """The token counts tried by length-candidate decoding: counts [B] long -> [B, 2 * spread + 1], the count
    itself and count +- 1..spread; a candidate below ``minimum`` is replaced by the count itself (so an utterance
    counted below the minimum, e.g. empty, keeps that count in every candidate)."""
    offsets = torch.arange(-spread, spread + 1, device=counts.device)  # [K]
    candidates = counts.unsqueeze(1) + offsets  # [B, K]
    keep = (candidates >= minimum) & (counts >= minimum).unsqueeze(1)  # [B, K]
    return torch.where(keep, candidates, counts.unsqueeze(1))


class ParaformerDecoding:
    """The Paraformer's decoding, shared by the PyTorch model and the exported one (deploy/runtime.py): a class
    using it offers ``forward(features, feat_mask) -> (logits [B, N, V], extraction)`` (the inference pass),
    ``encode``, ``cif_alphas(encoder_out, enc_mask) -> (alphas, calibrated alphas)`` ([B, T'] each, threshold units) and
    ``decode_queries(embeddings, token_mask, encoder_out, enc_mask) -> logits [B, N, V]`` (the CIF and the decoder
    alone, for length candidates), ``ctc_log_probs(encoder_out) -> [B, T', V]`` or None (the CTC head's, for the
    CTC score of length candidates and the CTC extractor's candidates), ``ctc_frame_queries(encoder_out, log_probs)
    -> [B, T', D]`` (the CTC extractor's per-frame queries, for its candidates), ``cfg`` (its ModelConfig), ``pad_id``,
    ``eos_id`` and ``blank_id``."""

    gives_timestamps = True  # token times from the extractor: decode_aligned + token_spans + decode/timestamps.py

    @torch.no_grad()
    def posteriors(self, features: torch.Tensor, feat_mask: torch.Tensor) -> tuple[torch.Tensor, TokenExtraction]:
        """Inference pass: -> (log_probs [B, N, V], extraction) over the N output tokens (N from the alphas and
        the tail rule, or from the merged CTC path)."""
        return self._log_posteriors(*self.forward(features, feat_mask))

    @property
    def never_emitted(self) -> list[int]:
        """The ids no output position may hold: padding, <eos> (a Paraformer's sentence ends at its token count, and
        with ``predictor_bias`` 1 the <eos> position is dropped) and the CTC blank."""
        return [self.pad_id, self.eos_id] + ([self.blank_id] if self.blank_id is not None else [])

    def _log_posteriors(self, logits: torch.Tensor, extraction: TokenExtraction) -> tuple[torch.Tensor,
                                                                                          TokenExtraction]:
        """logits [B, N, V] -> log_probs, -inf for the ids in :attr:`never_emitted` (so that no search, the LM's
        included, can put an <eos> inside a hypothesis: its text would end there). With ``model.predictor_bias`` 1
        the last fired token (<eos>) is decoded with the others, then dropped from both."""
        if self.cfg.predictor_bias == 1:
            extraction = extraction.without_last_token()
            logits = logits[:, :extraction.token_mask.shape[1]]  # [B, N - 1, V]
        log_probs = torch.log_softmax(logits.float(), dim=-1)  # [B, N, V]
        check_finite(log_probs, "decoder log_probs")
        log_probs[..., self.never_emitted] = float("-inf")
        return log_probs, extraction

    @torch.no_grad()
    def decode_aligned(self, features: torch.Tensor, feat_mask: torch.Tensor, beam_size: int = 1, lm=None,
                       lm_weight: float = 0.0, length_candidates: int = 0, count_prior: float = 0.0,
                       ctc_score_weight: float = 0.0, hotwords: HotwordTrie | None = None,
                       lexicon: LexiconAutomaton | None = None, length_penalty: float = 1.0,
                       phrases: PhraseCandidates | None = None) -> tuple[torch.Tensor, torch.Tensor, TokenExtraction]:
        """The best hypothesis and the extraction it came from (for :meth:`token_spans`): :meth:`decode_scored`
        without the scores. -> (tokens [B, T_out] long, pad past each length; lengths [B]; extraction)."""
        return self.decode_scored(features, feat_mask, beam_size, lm, lm_weight, length_candidates, count_prior,
                                  ctc_score_weight, hotwords, lexicon, length_penalty, phrases)[:3]

    @torch.no_grad()
    def decode_scored(self, features: torch.Tensor, feat_mask: torch.Tensor, beam_size: int = 1, lm=None,
                      lm_weight: float = 0.0, length_candidates: int = 0, count_prior: float = 0.0,
                      ctc_score_weight: float = 0.0, hotwords: HotwordTrie | None = None,
                      lexicon: LexiconAutomaton | None = None, length_penalty: float = 1.0,
                      phrases: PhraseCandidates | None = None) -> tuple[torch.Tensor, torch.Tensor, TokenExtraction,
                                                                        torch.Tensor]:
        """The best hypothesis, the extraction it came from, and its normalised score.

        beam_size 1 without an LM, hotwords or a lexicon is greedy; otherwise :meth:`beam_search`'s best beam (with
        ``hotwords``, a non-empty HotwordTrie, biased toward its phrases: decode/hotwords.py; greedy with hotwords is
        beam 1 with biasing; with a ``lexicon``, only sentences of its words: decode/lexicon.py, greedy being beam 1
        constrained). ``length_candidates`` k > 0:
        :meth:`decode_length_candidates` with spread k, ``count_prior``, ``ctc_score_weight`` and ``length_penalty``.
        The score is the hypothesis's decoder log-prob (plus ``lm_weight`` x its LM sentence log-prob) divided by its
        token count (at least 1) to the power ``length_penalty`` (1: per token), with candidates less the count prior's
        term and plus the CTC term: what the length candidates are
        chosen by, and what long-form decoding compares when it judges a pause (decode/longform/pauses.py); the
        hotword bonuses of the phrases a hypothesis completes are part of it.
        -> (tokens [B, T_out] long, pad past each length; lengths [B]; extraction; scores [B] float)."""
        if length_candidates > 0:
            return self.decode_length_candidates(features, feat_mask, length_candidates, beam_size, lm, lm_weight,
                                                 count_prior, ctc_score_weight, hotwords, lexicon, length_penalty,
                                                 phrases)
        if phrases is not None:
            raise ValueError("phrase candidates are scored at the length candidates: length_candidates must be > 0")
        log_probs, extraction = self.posteriors(features, feat_mask)
        if beam_size == 1 and lm is None and not biasing(hotwords) and lexicon is None:
            best, tokens = log_probs.max(dim=-1)  # [B, N] each
            scores = best.masked_fill(~extraction.token_mask, 0.0).sum(dim=1)  # [B]
            tokens = tokens.masked_fill(~extraction.token_mask, self.pad_id)
        else:
            beams, beam_scores = self._search_posteriors(log_probs, extraction, beam_size, lm, lm_weight, hotwords,
                                                         lexicon)
            tokens, scores = beams[:, 0], beam_scores[:, 0]
        return tokens, extraction.num_tokens, extraction, scores / length_norm(extraction.num_tokens, length_penalty)

    @torch.no_grad()
    def decode_length_candidates(self, features: torch.Tensor, feat_mask: torch.Tensor, spread: int,
                                 beam_size: int = 1, lm=None, lm_weight: float = 0.0, count_prior: float = 0.0,
                                 ctc_score_weight: float = 0.0, hotwords: HotwordTrie | None = None,
                                 lexicon: LexiconAutomaton | None = None, length_penalty: float = 1.0,
                                 phrases: PhraseCandidates | None = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                                   TokenExtraction, torch.Tensor]:
        """Length candidates: 2 x ``spread`` + 1 token extractions per utterance, decoded in one batched pass. CIF:
        its own count N and N +- 1..``spread`` (:func:`candidate_counts`), the alphas scaled to sum to each as in
        training. CTC: the greedy path with the blank's log-prob offset by -``spread``..``spread`` steps
        (models/ctc_extractor.py, :func:`blank_offsets`), one count each.
        Every hypothesis (``beam_size`` per candidate) is scored by its decoder log-prob, plus ``lm_weight``
        x the LM's sentence log-prob with an ``lm``, plus the bonuses of the ``hotwords`` phrases it completes (only
        sentences of the ``lexicon``'s words when one is given; an utterance none of whose candidates has one is
        decoded without it), plus
        ``ctc_score_weight`` x its CTC log-likelihood over the encoder frames (``ctc_log_likelihood``; models with a
        CTC head), all divided by its token count to the power ``length_penalty`` (1: the mean per token; below 1 a
        token more costs more, so shorter candidates gain); less
        ``count_prior`` x the candidate's distance to the extractor's own expected count of real tokens (CIF: the sum
        of its calibrated alphas less ``model.predictor_bias``, whose <eos> fire the candidates' lengths leave out;
        CTC: the plain greedy path's count). With ``phrases`` (decode/phrases.py), the listed phrases whose count is a
        candidate's are scored the same way from that candidate's posteriors and compete with the searched hypotheses
        (the LM term is their ``lm_scores``: ``lm`` must be the LM they were built with; with ``hotwords`` they are
        left out, carrying no bonuses: a request's hotword list takes their place); with the CIF, the counts of listed
        phrases beyond the spread but within ``PHRASE_REACH`` of N are candidates too (the extraction then has K > 2 x
        ``spread`` + 1 rows per utterance, padded with N: a long sentence's count is off by more). The best per
        utterance wins. A count one off spells a word with a letter too many or too few: the candidates let the
        decoder's, the LM's and the CTC head's confidence pick the count instead, and the prior says how far to trust
        the extractor over them (data where it counts well want a prior). The CTC head scores every frame of the
        utterance, so it tells a doubled or dropped letter from a right one where the decoder, which sees the
        candidate's count as given, cannot.
        -> (tokens [B, T_out] long, pad past each length; lengths [B]; the chosen candidates' extraction; their
        normalised scores [B], the prior's and the CTC's terms included)."""
        if spread < 1:
            raise ValueError(f"length candidates need a spread >= 1, got {spread}")
        encoder_out, enc_mask = self.encode(features, feat_mask)  # [B, T', D], [B, T']
        reads_ctc = ctc_score_weight > 0 or self.cfg.predictor == "ctc"
        ctc_log_probs = self.ctc_log_probs(encoder_out) if reads_ctc else None  # [B, T', V]
        if reads_ctc and ctc_log_probs is None:
            raise ValueError("a CTC score and the CTC extractor's length candidates need a model trained with a CTC "
                             "head (model.ctc_weight > 0; exported: its ctc graph)")
        batch, frames = encoder_out.shape[0], enc_mask.sum(dim=1)  # B, [B]
        phrases = phrases if not biasing(hotwords) else None  # hotwords take their place: phrases carry no bonuses
        if self.cfg.predictor == "ctc":
            width = 2 * spread + 1
            repeated, repeated_mask = self._repeated(encoder_out, enc_mask, width)
            extraction, expected = self._ctc_candidates(repeated, repeated_mask, ctc_log_probs, spread)
        else:
            alphas, calibrated = self.cif_alphas(encoder_out, enc_mask)  # [B, T'] each, threshold units
            counts = self._cif_candidate_counts(calibrated, spread, phrases)  # [B, K]
            width = counts.shape[1]
            repeated, repeated_mask = self._repeated(encoder_out, enc_mask, width)
            extraction, expected = self._cif_candidates(alphas, calibrated, repeated, counts)
        logits = self.decode_queries(extraction.embeddings, extraction.token_mask, repeated,
                                     repeated_mask)  # [B*K, N, V]
        log_probs, extraction = self._log_posteriors(logits, extraction)
        beams, scores = self._search_posteriors(log_probs, extraction, beam_size, lm, lm_weight, hotwords, lexicon,
                                                rows_per_utterance=width)  # [B*K, beam, N]
        hypotheses = beams.shape[1] * width  # per utterance: every beam of every candidate
        tokens = beams.reshape(batch, hypotheses, -1)  # [B, H, N]
        lengths = extraction.num_tokens.repeat_interleave(beams.shape[1]).view(batch, hypotheses)  # [B, H]
        sources = torch.arange(batch * width, device=beams.device).repeat_interleave(beams.shape[1]).view(
            batch, hypotheses)  # [B, H] each hypothesis's row of the extraction
        sums = scores.view(batch, hypotheses)  # [B, H]
        if phrases is not None:
            if lm_weight > 0 and phrases.lm is not lm:
                raise ValueError("the phrase candidates were scored by another LM than the search's")
            tokens, lengths, sources, sums = self._add_phrases(phrases, log_probs, extraction.num_tokens, width,
                                                               lm_weight, tokens, lengths, sources, sums)
        normalised = sums / length_norm(lengths, length_penalty)  # [B, H]
        normalised = normalised - count_prior * (lengths - expected.view(batch, width)[:, :1]).abs()
        if ctc_score_weight > 0:
            normalised = ctc_rescored(normalised, tokens, lengths, ctc_log_probs, frames, self.blank_id,
                                      ctc_score_weight, length_penalty)
        best = normalised.argmax(dim=1)  # [B]
        utterances = torch.arange(batch, device=best.device)
        chosen = extraction.select(sources[utterances, best])
        return (tokens[utterances, best, :chosen.token_mask.shape[1]], chosen.num_tokens, chosen,
                normalised[utterances, best])

    def _add_phrases(self, phrases: PhraseCandidates, log_probs: torch.Tensor, counts: torch.Tensor, width: int,
                     lm_weight: float, tokens: torch.Tensor, lengths: torch.Tensor, sources: torch.Tensor,
                     sums: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The searched hypotheses (tokens [B, H, N], lengths, sources (extraction rows), summed scores [B, H]) and
        after them the ``phrases`` whose count is one of the utterance's candidates (decode/phrases.py), as many
        columns as the utterance with the most; the columns an utterance has no phrase for score -inf, length 0."""
        decoder, rows = phrase_decoder_scores(phrases, log_probs, counts, width)  # [B, P] each
        phrase_sums = decoder + lm_weight * phrases.lm_scores  # [B, P]
        found = phrase_sums.isfinite()  # [B, P]
        columns = max(int(found.sum(dim=1).max()), 1)
        order = found.to(torch.int8).argsort(dim=1, descending=True, stable=True)[:, :columns]  # [B, P'] found first
        phrase_tokens = phrases.tokens[:, :tokens.shape[2]]  # [P, <= N]: a found phrase fits its candidate's N
        phrase_tokens = torch.nn.functional.pad(phrase_tokens, (0, tokens.shape[2] - phrase_tokens.shape[1]))
        past_end = torch.arange(tokens.shape[2], device=tokens.device) >= phrases.lengths.unsqueeze(1)  # [P, N]
        phrase_tokens = phrase_tokens.masked_fill(past_end, self.pad_id)
        phrase_lengths = phrases.lengths[order].masked_fill(~found.gather(1, order), 0)  # [B, P']
        return (torch.cat([tokens, phrase_tokens[order]], dim=1),
                torch.cat([lengths, phrase_lengths], dim=1),
                torch.cat([sources, rows.gather(1, order)], dim=1),
                torch.cat([sums, phrase_sums.gather(1, order)], dim=1))

    @staticmethod
    def _repeated(encoder_out: torch.Tensor, enc_mask: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """encoder_out [B, T', D], enc_mask [B, T'] -> each utterance ``width`` times: [B*K, T', D], [B*K, T']."""
        return encoder_out.float().repeat_interleave(width, dim=0), enc_mask.repeat_interleave(width, dim=0)

    def _cif_candidate_counts(self, calibrated: torch.Tensor, spread: int,
                              phrases: PhraseCandidates | None) -> torch.Tensor:
        """calibrated alphas [B, T'] -> the CIF counts to decode [B, K]: the inference count N and N +- 1..``spread``
        (:func:`candidate_counts`), then with ``phrases`` the counts of listed phrases farther off but in reach
        (decode/phrases.py, :func:`phrase_counts_in_reach`). Counts include the <eos> fire with
        ``model.predictor_bias`` 1."""
        bias = self.cfg.predictor_bias
        counts = inference_token_count(calibrated, self.cfg.cif_tail_threshold / self.cfg.cif_threshold)  # [B]
        candidates = candidate_counts(counts, spread, 1 + bias)  # [B, 2 * spread + 1]
        if phrases is None:
            return candidates
        beyond = phrase_counts_in_reach(phrases, counts - bias, spread, PHRASE_REACH)  # [B, E] real tokens
        return torch.cat([candidates, beyond + bias], dim=1)

    def _cif_candidates(self, alphas: torch.Tensor, calibrated: torch.Tensor, repeated: torch.Tensor,
                        counts: torch.Tensor) -> tuple[CifOutput, torch.Tensor]:
        """alphas, calibrated [B, T'] (threshold units), repeated [B*K, T', D] (each utterance K times), counts [B, K]
        -> (the CIF integrated to each count, row b*K + k the k-th of utterance b; the CIF's expected count of real
        tokens [B*K]: the sum of its calibrated alphas less ``model.predictor_bias``, as the candidates' lengths are
        counted once the <eos> fire is dropped)."""
        width = counts.shape[1]
        num_tokens = counts.flatten()  # [B*K]
        alphas = alphas.repeat_interleave(width, dim=0)  # [B*K, T']
        alpha_sum = alphas.sum(dim=1)  # [B*K]
        integrated = scale_to_counts(alphas, num_tokens, alpha_sum)  # [B*K, T']
        embeddings, token_mask, fires = cif_integrate(repeated, integrated, num_tokens)  # [B*K, N, D] ...
        extraction = CifOutput(alphas=alphas * self.cfg.cif_threshold, alpha_sum=alpha_sum,
                               integrated_alphas=integrated, embeddings=embeddings, token_mask=token_mask,
                               num_tokens=num_tokens, fire_frames=fires)
        expected = calibrated.sum(dim=1) - self.cfg.predictor_bias  # [B] the <eos> fire is no token
        return extraction, expected.repeat_interleave(width)

    def _ctc_candidates(self, repeated: torch.Tensor, repeated_mask: torch.Tensor, ctc_log_probs: torch.Tensor,
                        spread: int) -> tuple[CtcExtraction, torch.Tensor]:
        """repeated [B*K, T', D], repeated_mask [B*K, T'] (each utterance K = 2 x spread + 1 times), ctc_log_probs
        [B, T', V] -> (the merged greedy paths under the blank offsets of :func:`blank_offsets`, row b*K + k the k-th
        of utterance b; the plain greedy path's count [B*K], the expected count)."""
        width = 2 * spread + 1
        offsets = blank_offsets(spread, ctc_log_probs.device)  # [K]
        frame_tokens, num_tokens = candidate_frame_tokens(ctc_log_probs, repeated_mask, offsets,
                                                          self.blank_id)  # [B*K, T'], [B*K]
        repeated_log_probs = ctc_log_probs.repeat_interleave(width, dim=0)  # [B*K, T', V]
        extraction = frames_to_extraction(self.ctc_frame_queries(repeated, repeated_log_probs), repeated_mask,
                                          repeated_log_probs, frame_tokens, num_tokens, self.blank_id)
        plain = num_tokens.view(-1, width)[:, spread]  # [B] offset 0
        return extraction, plain.to(torch.float32).repeat_interleave(width)

    @torch.no_grad()
    def greedy_decode(self, features: torch.Tensor, feat_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """-> tokens [B, T_out] long (pad_id past each length), lengths [B] long. One decoder pass."""
        tokens, lengths, _ = self.decode_aligned(features, feat_mask)
        return tokens, lengths

    def token_spans(self, extraction: TokenExtraction) -> tuple[torch.Tensor, torch.Tensor]:
        """Each output token's stretch of encoder frames: (starts [B, N], ends [B, N]) float64 positions (frame t
        spans [t, t + 1)), 0 on padding. CIF: where its running sum crosses the token's levels
        (decode/timestamps.py); CTC: its merged frames [first, last + 1)."""
        if isinstance(extraction, CtcExtraction):
            return extraction.frame_starts.double(), extraction.frame_ends.double()
        return cif_fire_spans(extraction.integrated_alphas, extraction.num_tokens, self.cfg.predictor_bias)

    @torch.no_grad()
    def beam_search(self, features: torch.Tensor, feat_mask: torch.Tensor, beam_size: int, lm=None,
                    lm_weight: float = 0.0, ctc_score_weight: float = 0.0,
                    hotwords: HotwordTrie | None = None,
                    lexicon: LexiconAutomaton | None = None,
                    length_penalty: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> tokens [B, beam, T_out], scores [B, beam] (log-probs, best first), lengths [B, beam].

        With ``lm`` (a TokenNgramLM) the scores add lm_weight x its sentence log-prob (decode/lm_fusion.py); with
        ``hotwords`` (a HotwordTrie) the bonuses of the phrases each hypothesis completes (decode/hotwords.py); with
        a ``lexicon`` (a LexiconAutomaton) only sentences of its words (decode/lexicon.py). The
        Paraformer's CTC score ranks length candidates (:meth:`decode_length_candidates`): ``ctc_score_weight`` > 0
        here is a ValueError. Every beam has the extractor's count, so ``length_penalty`` (the interface's, for the
        autoregressive baseline's beams) changes no ranking; the scores are sums."""
        if ctc_score_weight > 0:
            raise ValueError("the Paraformer's CTC score ranks length candidates: use decode_length_candidates")
        log_probs, extraction = self.posteriors(features, feat_mask)
        tokens, scores = self._search_posteriors(log_probs, extraction, beam_size, lm, lm_weight, hotwords, lexicon)
        lengths = extraction.num_tokens.unsqueeze(1).expand(-1, beam_size).contiguous()  # [B, beam]
        return tokens, scores, lengths

    def _search_posteriors(self, log_probs: torch.Tensor, extraction: TokenExtraction, beam_size: int, lm,
                           lm_weight: float, hotwords: HotwordTrie | None = None,
                           lexicon: LexiconAutomaton | None = None,
                           rows_per_utterance: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """log_probs [B, N, V] -> (tokens [B, beam, N], scores [B, beam]), fused with ``lm`` when given, biased
        toward the ``hotwords`` phrases and held to sentences of the ``lexicon``'s words (each row's trie and automaton
        states carried through the beam's reordering). With a lexicon, an utterance (``rows_per_utterance``
        consecutive rows: its length candidates) none of whose rows has a lexicon sentence of its N units (best score
        -inf) keeps the unconstrained search's beams on every row."""
        beams, scores = self._run_search(log_probs, extraction, beam_size, lm, lm_weight, hotwords, lexicon)
        if lexicon is None:
            return beams, scores
        found = torch.isfinite(scores[:, 0]).view(-1, rows_per_utterance).any(dim=1)  # [B / rows_per_utterance]
        if bool(found.all()):
            return beams, scores
        free_beams, free_scores = self._run_search(log_probs, extraction, beam_size, lm, lm_weight, hotwords)
        unconstrained = (~found).repeat_interleave(rows_per_utterance)  # [B]
        return (torch.where(unconstrained.view(-1, 1, 1), free_beams, beams),
                torch.where(unconstrained.view(-1, 1), free_scores, scores))

    def _run_search(self, log_probs: torch.Tensor, extraction: TokenExtraction, beam_size: int, lm,
                    lm_weight: float, hotwords: HotwordTrie | None = None,
                    lexicon: LexiconAutomaton | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One factorised search of :meth:`_search_posteriors`, without the lexicon's fallback."""
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        lengths = extraction.num_tokens.repeat_interleave(beam_size)  # [B*beam] rows
        scorer = HotwordScorer(hotwords, lengths, log_probs) if biasing(hotwords) else None
        if lexicon is not None:
            constraint = LexiconScorer(lexicon, lengths)
            scorer = constraint if scorer is None else SummedScorer(constraint, scorer)
        if lm is None:
            return factorized_beam_search(log_probs, extraction.token_mask, beam_size, self.pad_id,
                                          state_scorer=scorer)
        return fused_posterior_beam_search(log_probs, extraction.token_mask, beam_size, self.pad_id, lm, lm_weight,
                                           scorer)


class ParaformerRecognizer(ParaformerDecoding, Paraformer):
    """The PyTorch Paraformer with its search: what ``build_model`` builds for ``model.type`` paraformer (the
    parameters, and so the checkpoints, are the network's), plus the oracle-length diagnostic, which needs the
    network's pass with target lengths."""

    @torch.no_grad()
    def oracle_length_decode(self, features: torch.Tensor, feat_mask: torch.Tensor, tokens: torch.Tensor,
                             token_lengths: torch.Tensor, beam_size: int = 1, lm=None, lm_weight: float = 0.0,
                             hotwords: HotwordTrie | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Decoding given the true token count (a diagnostic: recognising without counting): the CIF is scaled to
        the reference length, the CTC queries come from the reference's forced alignment; then the search that is
        being evaluated (beam ``beam_size``, fused with ``lm`` and biased toward ``hotwords`` when given; greedy by
        default), its best hypothesis.
        tokens [B, S], token_lengths [B] -> (tokens [B, S] long, pad past each length; lengths [B])."""
        log_probs, extraction = self._log_posteriors(*self.forward(features, feat_mask, tokens, token_lengths))
        if beam_size == 1 and lm is None and not biasing(hotwords):
            return log_probs.argmax(dim=-1).masked_fill(~extraction.token_mask, self.pad_id), extraction.num_tokens
        best, _ = self._search_posteriors(log_probs, extraction, beam_size, lm, lm_weight, hotwords)  # [B, beam, S]
        return best[:, 0], extraction.num_tokens
