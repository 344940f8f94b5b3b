"""Batched greedy and beam search for an autoregressive model with a key/value-cached ``decode_step``.

The model must offer ``decode_step(encoder_out, prev_tokens, step, cache, enc_mask) -> (log_probs [B, V],
cache)``, a cache with ``reorder_rows(rows)``, and the attributes ``bos_id``, ``eos_id``, ``pad_id`` and
``never_emitted`` (ids the search never outputs: pad, bos, blank). All utterances (x beams) advance
together through one batched ``decode_step`` per output position; the only Python loop is over
output positions.

Search rules shared by both searches:
* max length: utterance b emits at most ``ceil(max_length_ratio * T'_b)`` tokens before eos, T'_b
  being its encoder output length; at that length only eos is allowed.
* shallow fusion (optional): next-token score = model log-prob + ``lm_weight`` * LM log-prob, the LM
  (e.g. :class:`paraformer_asr.decode.ngram_lm.TokenNgramLM`) being anything with
  ``log_probs(histories [N, t] long) -> [N, V]``; histories are the emitted tokens without bos.
* hotword biasing (optional, beam search): next-token score + the bonus of a HotwordTrie (decode/hotwords.py), each
  hypothesis's trie node carried through the beam's reordering; eos gives back an unfinished match.
* beam scores are normalised by length: sum of scores (eos included) / (tokens + 1) ** length_penalty; the beam
  search stops only when no live hypothesis can still beat the best finished one under that normalisation.

``ArDecoding`` gives a model these searches as its ``greedy_decode`` / ``beam_search`` (with the CTC head's
rescoring); ``ArRecognizer`` is the PyTorch baseline (models/ar_model.py) with them.
"""

from __future__ import annotations

import torch

from paraformer_asr.checks import assert_shape, check_padding_mask
from paraformer_asr.decode.hotwords import HotwordTrie, biasing
from paraformer_asr.models.ar_model import TransformerAR
from paraformer_asr.models.ctc import ctc_rescored


def max_output_lengths(enc_mask: torch.Tensor, max_length_ratio: float) -> torch.Tensor:
    """enc_mask [B, T'] -> the most tokens (eos excluded) each utterance may emit, [B] long (>= 1)."""
    if max_length_ratio <= 0:
        raise ValueError(f"max_length_ratio must be > 0, got {max_length_ratio}")
    frames = enc_mask.sum(dim=1).double()
    return torch.ceil(frames * max_length_ratio).long().clamp(min=1)


def next_token_scores(model, log_probs: torch.Tensor, history: torch.Tensor, max_lengths: torch.Tensor,
                      lm=None, lm_weight: float = 0.0) -> torch.Tensor:
    """Scores of every next token for N running hypotheses.

    log_probs [N, V] from the model; history [N, t] long (emitted tokens, no bos); max_lengths [N]
    -> [N, V]: never-emitted ids get -inf, LM log-probs are added with ``lm_weight``, and rows that
    reached their max length may only emit eos.
    """
    dims = assert_shape(log_probs, "N,V", "search log_probs")
    assert_shape(history, "N,t", "search history", dims)
    scores = log_probs.clone()
    scores[:, model.never_emitted] = float("-inf")
    if lm is not None and lm_weight != 0.0:
        scores = scores + lm_weight * lm.log_probs(history.cpu()).to(scores.device)
    at_limit = (max_lengths <= history.shape[1]).unsqueeze(1)  # [N, 1]
    not_eos = torch.ones_like(scores, dtype=torch.bool)
    not_eos[:, model.eos_id] = False
    return scores.masked_fill(at_limit & not_eos, float("-inf"))


def _check_inputs(encoder_out: torch.Tensor, enc_mask: torch.Tensor, lm_weight: float) -> None:
    dims = assert_shape(encoder_out, "B,T,D", "search encoder_out")
    check_padding_mask(enc_mask, "search enc_mask", (dims["B"], dims["T"]))
    if lm_weight < 0:
        raise ValueError(f"lm_weight must be >= 0, got {lm_weight}")


def ar_greedy_search(model, encoder_out: torch.Tensor, enc_mask: torch.Tensor, max_length_ratio: float = 1.0,
                     lm=None, lm_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched greedy decoding. encoder_out [B, T', D], enc_mask [B, T']
    -> tokens [B, T_out] long (pad_id past each length, eos not included), lengths [B] long."""
    _check_inputs(encoder_out, enc_mask, lm_weight)
    batch = encoder_out.shape[0]
    max_lengths = max_output_lengths(enc_mask, max_length_ratio)  # [B]
    tokens = encoder_out.new_full((batch, 1), model.bos_id, dtype=torch.long)  # [B, 1 + t]
    lengths = max_lengths.clone()
    finished = torch.zeros(batch, dtype=torch.bool, device=encoder_out.device)
    cache = None
    for step in range(int(max_lengths.max()) + 1):
        log_probs, cache = model.decode_step(encoder_out, tokens, step, cache, enc_mask)
        best = next_token_scores(model, log_probs, tokens[:, 1:], max_lengths, lm, lm_weight).argmax(dim=-1)  # [B]
        best = best.masked_fill(finished, model.pad_id)
        ended = (best == model.eos_id) & ~finished
        lengths = torch.where(ended, torch.full_like(lengths, step), lengths)
        finished = finished | ended
        tokens = torch.cat([tokens, best.unsqueeze(1)], dim=1)
        if bool(finished.all()):
            break
    out = tokens[:, 1:int(lengths.max()) + 1]  # [B, T_out]
    valid = torch.arange(out.shape[1], device=out.device).unsqueeze(0) < lengths.unsqueeze(1)
    return out.masked_fill(~valid, model.pad_id), lengths


def _add_finished(pool: tuple[torch.Tensor, torch.Tensor, torch.Tensor], scores: torch.Tensor,
                  origin: torch.Tensor, prefixes: torch.Tensor,
                  pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Merge hypotheses finishing now into the pool of the best finished ones.

    pool: (scores [B, K], tokens [B, K, W], lengths [B, K]); scores [B, M] normalised (-inf = none);
    origin [B, M] live beam each one extends; prefixes [B, K, t] the live beams' tokens.
    """
    pool_scores, pool_tokens, pool_lengths = pool
    batch, beam, width = pool_tokens.shape
    step = prefixes.shape[2]
    new_tokens = torch.full((batch, scores.shape[1], width), pad_id, dtype=torch.long, device=scores.device)
    new_tokens[:, :, :step] = prefixes.gather(1, origin.unsqueeze(-1).expand(-1, -1, step))
    merged_scores, picked = torch.cat([pool_scores, scores], dim=1).topk(beam, dim=1)
    merged_tokens = torch.cat([pool_tokens, new_tokens], dim=1).gather(1, picked.unsqueeze(-1).expand(-1, -1, width))
    merged_lengths = torch.cat([pool_lengths, torch.full_like(origin, step)], dim=1).gather(1, picked)
    return merged_scores, merged_tokens, merged_lengths


def best_reachable(live: torch.Tensor, tokens: int, max_lengths: torch.Tensor, length_penalty: float,
                   max_gain: float = 0.0) -> torch.Tensor:
    """The best normalised score a live hypothesis can still finish with: live [B, K] summed scores of hypotheses of
    ``tokens`` tokens, max_lengths [B] -> [B, K]. It finishes with n tokens, ``tokens`` <= n <= its max length,
    divided by (n + 1) ** length_penalty. Without hotwords every later step score is <= 0 (log-probs, and the LM's
    with a weight >= 0), so the sum can only fall: a sum <= 0 is best divided by the largest of those, at one end of
    the range. With hotwords a step can earn up to ``max_gain`` (the trie's largest unit bonus; the eos step gives
    back, never earns), so the sum may rise by ``max_gain`` a token: every reachable n is tried."""
    if max_gain > 0:
        return _best_reachable_with_gain(live, tokens, max_lengths, length_penalty, max_gain)
    shortest = torch.full_like(max_lengths, tokens + 1, dtype=torch.float64) ** length_penalty  # [B]
    longest = (max_lengths.double() + 1) ** length_penalty  # [B]
    return live / torch.maximum(shortest, longest).to(live.dtype).unsqueeze(1)


def _best_reachable_with_gain(live: torch.Tensor, tokens: int, max_lengths: torch.Tensor, length_penalty: float,
                              max_gain: float) -> torch.Tensor:
    """:func:`best_reachable` when each token still to come may add up to ``max_gain``: the largest of
    (live + max_gain x (n - tokens)) / (n + 1) ** length_penalty over tokens <= n <= max_lengths[b]."""
    longest = max(int(max_lengths.max()), tokens)  # past every max length (the last step): nothing is reachable
    lengths = torch.arange(tokens, longest + 1, device=live.device)  # [L] every n still reachable
    gains = max_gain * (lengths - tokens).to(live.dtype)  # [L]
    norms = (lengths.double() + 1).pow(length_penalty).to(live.dtype)  # [L]
    finished = (live.unsqueeze(-1) + gains) / norms  # [B, K, L]
    reachable = lengths.view(1, 1, -1) <= max_lengths.view(-1, 1, 1)  # [B, 1, L]
    return finished.masked_fill(~reachable, float("-inf")).max(dim=-1).values


def ar_beam_search(model, encoder_out: torch.Tensor, enc_mask: torch.Tensor, beam_size: int,
                   length_penalty: float = 1.0, max_length_ratio: float = 1.0, lm=None, lm_weight: float = 0.0,
                   hotwords: HotwordTrie | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Batched beam search. encoder_out [B, T', D], enc_mask [B, T'] ->
    tokens [B, beam, T_out] long (pad_id past each length, no eos), scores [B, beam] (length-normalised,
    best first; -inf where fewer than ``beam`` hypotheses exist), lengths [B, beam] long.

    Per step the 2*beam best extensions of each utterance are ranked (by summed score); an eos
    extension ranked within the first ``beam`` finishes its hypothesis, which goes to a pool of the
    ``beam`` best finished ones (by normalised score); the ``beam`` best non-eos extensions stay live.
    An utterance stops when no live hypothesis can still beat its best finished one under the normalisation
    (:func:`best_reachable`: its sum as it is, divided by the largest length term it can reach), or when none is
    left (at the max length only eos is allowed): its live hypotheses are then finished with their eos extensions
    too. A longer hypothesis that wins once divided by its length is not cut off by a shorter one that ends first:
    with a beam wide enough to keep every prefix and every eos extension the best hypothesis is exhaustive
    search's. With ``beam_size`` 1 and ``length_penalty`` 0 this is exactly greedy search (greedy's first eos ends
    a hypothesis no longer one can beat); with a length penalty > 0, beam 1 goes on past greedy's eos while a
    longer hypothesis may still score better.

    ``hotwords`` (a HotwordTrie): every step score adds the trie's bonus for the hypothesis's node (decode/hotwords.py;
    the eos step gives back an unfinished match, so a finished hypothesis holds the bonuses of the phrases it
    completed; with the trie's margin only units the decoder finds plausible earn); the stopping rule then allows
    for the bonus still to be earned (:func:`best_reachable`).
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    _check_inputs(encoder_out, enc_mask, lm_weight)
    batch, beam, device = encoder_out.shape[0], beam_size, encoder_out.device
    rows = batch * beam
    max_lengths = max_output_lengths(enc_mask, max_length_ratio)  # [B]
    width = int(max_lengths.max())
    row_max_lengths = max_lengths.repeat_interleave(beam)  # [B*beam]
    memory, memory_mask = encoder_out.repeat_interleave(beam, 0), enc_mask.repeat_interleave(beam, 0)
    tokens = torch.full((rows, 1), model.bos_id, dtype=torch.long, device=device)  # [B*beam, 1 + t]
    live = torch.full((batch, beam), float("-inf"), device=device)
    live[:, 0] = 0.0  # one start hypothesis per utterance
    pool = (torch.full((batch, beam), float("-inf"), device=device),
            torch.full((batch, beam, width), model.pad_id, dtype=torch.long, device=device),
            torch.zeros(batch, beam, dtype=torch.long, device=device))
    biased = biasing(hotwords)
    if biased:
        hotwords = hotwords.to(device)
        nodes = hotwords.initial_state(rows)  # [B*beam] each hypothesis's trie node
    max_gain = hotwords.max_unit_bonus if biased else 0.0
    utterance_rows = (torch.arange(batch, device=device) * beam).unsqueeze(1)  # [B, 1]
    beam_index = torch.arange(beam, device=device).expand(batch, beam)  # [B, beam]
    rank = torch.arange(2 * beam, device=device).unsqueeze(0)  # [1, 2*beam]
    cache = None
    for step in range(width + 1):
        log_probs, cache = model.decode_step(memory, tokens, step, cache, memory_mask)
        scores = next_token_scores(model, log_probs, tokens[:, 1:], row_max_lengths, lm, lm_weight)  # [B*beam, V]
        if biased:
            plausible = hotwords.plausible(log_probs)  # [B*beam, V] or None: the decoder's own word on each unit
            scores = scores + hotwords.step_bonus(nodes, plausible=plausible)
        vocab = scores.shape[1]
        extended = live.unsqueeze(-1) + scores.view(batch, beam, vocab)  # [B, beam, V]
        top, flat = extended.view(batch, beam * vocab).topk(2 * beam, dim=1)  # [B, 2*beam], best first
        origin, token = torch.div(flat, vocab, rounding_mode="floor"), flat % vocab
        is_eos = token == model.eos_id
        norm = float(step + 1) ** length_penalty  # every hypothesis finishing now has step tokens
        ranked_ends = top.masked_fill(~(is_eos & (rank < beam)), float("-inf")) / norm  # [B, 2*beam]
        keep = (rank + is_eos.long() * 2 * beam).argsort(dim=1)[:, :beam]  # the beam best non-eos extensions
        live = top.gather(1, keep)  # [B, beam] (at most beam of the 2*beam are eos)
        best_finished = torch.maximum(pool[0][:, 0], ranked_ends.max(dim=1).values)  # [B]
        can_win = best_reachable(live, step + 1, max_lengths, length_penalty, max_gain) > best_finished.unsqueeze(1)
        done = ~(can_win & torch.isfinite(live)).any(dim=1)  # [B]
        closing = extended[:, :, model.eos_id].masked_fill(~done.unsqueeze(1), float("-inf")) / norm  # [B, beam]
        ending = torch.cat([ranked_ends.masked_fill(done.unsqueeze(1), float("-inf")), closing], dim=1)  # [B, 3*beam]
        pool = _add_finished(pool, ending, torch.cat([origin, beam_index], dim=1),
                             tokens.view(batch, beam, step + 1)[:, :, 1:], model.pad_id)
        if bool(done.all()):
            break
        live = live.masked_fill(done.unsqueeze(1), float("-inf"))
        source = (utterance_rows + origin.gather(1, keep)).view(rows)  # [B*beam] rows the live beams extend
        chosen = token.gather(1, keep).view(rows)  # [B*beam]
        tokens = torch.cat([tokens.index_select(0, source), chosen.unsqueeze(1)], dim=1)
        if biased:
            chosen_plausible = None if plausible is None else plausible[source, chosen]  # [B*beam]
            nodes = hotwords.advance(nodes.index_select(0, source), chosen, chosen_plausible)
        cache = cache.reorder_rows(source)
    pool_scores, pool_tokens, pool_lengths = pool
    exists = torch.isfinite(pool_scores)  # [B, beam]
    pool_lengths = pool_lengths.masked_fill(~exists, 0)
    pool_tokens = pool_tokens.masked_fill(~exists.unsqueeze(-1), model.pad_id)
    return pool_tokens[:, :, :int(pool_lengths.max())], pool_scores, pool_lengths


class ArDecoding:
    """Greedy and beam search of the autoregressive baseline (the functions above), shared by the PyTorch model and
    the exported one (deploy/runtime.py): a class using it offers ``encode(features, feat_mask)``, ``decode_step``
    (see :meth:`TransformerAR.decode_step`), ``ctc_log_probs(encoder_out) -> [B, T', V]`` or None (the CTC head's,
    for rescoring the beams) and the ids ``bos_id``, ``eos_id``, ``pad_id``, ``blank_id``, ``never_emitted``."""

    gives_timestamps = False  # no CIF: its tokens carry no times

    @torch.no_grad()
    def greedy_decode(self, features: torch.Tensor, feat_mask: torch.Tensor, max_length_ratio: float = 1.0,
                      lm=None, lm_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """-> tokens [B, T_out] long (pad_id past each length, no eos), lengths [B] long."""
        encoder_out, enc_mask = self.encode(features, feat_mask)  # [B, T', D], [B, T']
        return ar_greedy_search(self, encoder_out, enc_mask, max_length_ratio, lm, lm_weight)

    @torch.no_grad()
    def beam_search(self, features: torch.Tensor, feat_mask: torch.Tensor, beam_size: int,
                    length_penalty: float = 1.0, max_length_ratio: float = 1.0, lm=None, lm_weight: float = 0.0,
                    ctc_score_weight: float = 0.0, hotwords: HotwordTrie | None = None,
                    lexicon=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> tokens [B, beam, T_out], scores [B, beam] (length-normalised log-probs, best first; -inf for
        beams that do not exist), lengths [B, beam] (tokens without eos). ``hotwords``: biased toward its phrases
        (:func:`ar_beam_search`). A ``lexicon`` is a ValueError: the lexicon constraint (decode/lexicon.py) is the
        Paraformer's, whose counted positions can spell words that do not exist; this decoder learns the words. ``ctc_score_weight`` w > 0 (a model with a CTC head): the finished beams are ranked
        again by score + w x their CTC log-likelihood divided by their token count to the power ``length_penalty``
        (models/ctc.py, ``ctc_rescored``), which the scores then are."""
        if lexicon is not None:
            raise ValueError("the autoregressive baseline does not decode with a lexicon (a Paraformer's option)")
        encoder_out, enc_mask = self.encode(features, feat_mask)  # [B, T', D], [B, T']
        tokens, scores, lengths = ar_beam_search(self, encoder_out, enc_mask, beam_size, length_penalty,
                                                 max_length_ratio, lm, lm_weight, hotwords)
        if ctc_score_weight <= 0:
            return tokens, scores, lengths
        ctc_log_probs = self.ctc_log_probs(encoder_out)  # [B, T', V]
        if ctc_log_probs is None:
            raise ValueError("a CTC score needs a model trained with a CTC head (model.ctc_weight > 0)")
        scores = ctc_rescored(scores, tokens, lengths, ctc_log_probs, enc_mask.sum(dim=1), self.blank_id,
                              ctc_score_weight, length_penalty)  # [B, beam]
        order = scores.argsort(dim=1, descending=True, stable=True)  # [B, beam]
        return (tokens.gather(1, order.unsqueeze(-1).expand_as(tokens)), scores.gather(1, order),
                lengths.gather(1, order))


class ArRecognizer(ArDecoding, TransformerAR):
    """The PyTorch autoregressive baseline with its searches: what ``build_model`` builds for ``model.type``
    transformer_ar (the parameters, and so the checkpoints, are the network's)."""
