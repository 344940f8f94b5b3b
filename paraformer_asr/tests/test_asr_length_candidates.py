"""Length candidates (models/paraformer.py, decode_length_candidates) and the config's default decoding
(config/schema.py DecodeConfig, decode/options.py): the batched search against a plain loop for both token extractors
(with and without the CTC score), the CTC log-likelihood against a sum over every alignment, padding invariance,
and the options' resolution and errors."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import pytest
import torch

from asr_helpers import load_script, tiny_raw_config
from asr_reference import loop_ctc_log_likelihood, loop_greedy_frame_tokens
from paraformer_asr.config import ModelConfig, config_from_dict
from paraformer_asr.decode.lm_fusion import build_token_lm
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.decode import paraformer_search
from paraformer_asr.decode.paraformer_search import ParaformerDecoding, candidate_counts
from paraformer_asr.decode.phrases import (PHRASE_REACH, PhraseCandidates, phrase_counts_in_reach,
                                           phrase_decoder_scores)
from paraformer_asr.errors import ConfigError
from paraformer_asr.models.ctc import ctc_log_likelihood
from paraformer_asr.models.ctc_extractor import BLANK_OFFSET_STEP

CTC_BLANK_BIAS = 0.0  # an untrained CTC head's blank bias: the tiny model's greedy paths hold 1-4 tokens


def _tiny_paraformer(predictor_bias: int = 0, ctc_weight: float = 0.0, predictor: str = "cif"):
    from paraformer_asr.data.batching import Collator
    from paraformer_asr.data.setup import build_data
    from paraformer_asr.factory import build_model

    raw = tiny_raw_config()
    raw["model"].update(predictor_bias=predictor_bias, ctc_weight=ctc_weight, predictor=predictor)
    cfg = config_from_dict(raw)
    data = build_data(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, data.input_dim, data.tokenizer).eval()
    if predictor == "ctc":
        with torch.no_grad():
            model.ctc.proj.bias[model.blank_id] = CTC_BLANK_BIAS
    batch = Collator(data.tokenizer.pad_id)([data.val[i] for i in range(8)])
    return model, batch, data


def test_candidate_counts_spread_around_the_count_and_never_below_the_minimum():
    counts = torch.tensor([0, 1, 5])
    assert candidate_counts(counts, 2).tolist() == [[0, 0, 0, 0, 0], [1, 1, 1, 2, 3], [3, 4, 5, 6, 7]]
    assert candidate_counts(counts, 1, minimum=2).tolist() == [[0, 0, 0], [1, 1, 1], [4, 5, 6]]


def test_ctc_log_likelihood_sums_every_alignment():
    """Against the sum over every label path of the frames that collapses to the tokens (brute force), and the loop
    above; -inf where no path exists (too few frames, or a blank among the tokens)."""
    generator = torch.Generator().manual_seed(0)
    blank, frames, vocab = 0, 5, 3
    log_probs = torch.randn(1, frames, vocab, generator=generator).log_softmax(dim=-1)  # [1, T, V]
    for tokens in ([1], [1, 2], [2, 2], [1, 1, 2], [2, 1, 2]):
        paths = [path for path in itertools.product(range(vocab), repeat=frames)
                 if [label for label, _ in itertools.groupby(path) if label != blank] == tokens]
        brute = math.log(sum(math.exp(sum(float(log_probs[0, t, label]) for t, label in enumerate(path)))
                             for path in paths))
        got = float(ctc_log_likelihood(log_probs, torch.tensor([frames]), torch.tensor([tokens]),
                                       torch.tensor([len(tokens)]), blank)[0])
        assert got == pytest.approx(brute, abs=1e-5) and got == pytest.approx(
            loop_ctc_log_likelihood(log_probs[0], tokens, blank), abs=1e-5)
    impossible = ctc_log_likelihood(log_probs.expand(2, -1, -1), torch.tensor([2, frames]),
                                    torch.tensor([[1, 1, 1], [1, blank, 2]]), torch.tensor([3, 3]), blank)
    assert impossible.tolist() == [float("-inf"), float("-inf")]


def _loop_reference(model, features, lengths, spread: int, count_prior: float = 0.0, ctc_score_weight: float = 0.0,
                    length_penalty: float = 1.0, phrases: list[list[int]] = (),
                    reach: float = 0.0) -> tuple[list[list[int]], list[float]]:
    """One utterance and one candidate count at a time, each through the model's training-style forward (the CIF
    scaled to the count): greedy tokens, score = (their log-prob sum + ctc_score_weight x their CTC log-likelihood)
    / count ** length_penalty - count_prior x |count - the sum of the calibrated alphas| (both with the <eos> fire
    when predictor_bias is 1: the real tokens' distance from the sum less the bias); after the candidates' greedy
    hypotheses, each of the ``phrases`` whose length is a candidate's real count, scored the same way from that
    candidate's log-probs (with phrases, the lengths of those farther than ``spread`` from the real count N but within
    ``reach`` x N are candidates too); the first best wins; the CTC term is left out where no hypothesis has a CTC
    alignment.
    -> (its tokens, its score) per utterance."""
    bias = model.cfg.predictor_bias
    hypotheses, scores = [], []
    for row in range(features.shape[0]):
        feats = features[row:row + 1, :lengths[row]]
        mask = torch.ones(1, feats.shape[1], dtype=torch.bool)
        with torch.no_grad():
            encoder_out, enc_mask = model.encode(feats, mask)
            expected = float(model.predictor(encoder_out, enc_mask).integrated_alphas.sum())
            count = model.predictor(encoder_out, enc_mask).num_tokens
            ctc_log_probs = model.ctc(encoder_out)[0] if ctc_score_weight else None  # [T', V]
        found = []  # (listed, tokens, decoder log-prob sum, CTC log-likelihood, count, prior term) per hypothesis
        real_count = int(count) - bias
        beyond = sorted({len(phrase) for phrase in phrases
                         if spread < abs(len(phrase) - real_count) <= math.floor(reach * real_count)})
        for candidate in candidate_counts(count, spread, 1 + bias)[0].tolist() + [length + bias for length in beyond]:
            tokens = torch.zeros(1, candidate - bias, dtype=torch.long)  # forward appends the <eos> for bias 1
            with torch.no_grad():
                log_probs, extraction = model._log_posteriors(
                    *model.forward(feats, mask, tokens, torch.tensor([candidate - bias])))
            real = int(extraction.num_tokens[0])
            top = log_probs[0, :real].max(dim=-1)
            listed = [phrase for phrase in phrases if len(phrase) == real]
            for is_listed, tokens, decoder_sum in [(False, top.indices.tolist(), float(top.values.sum()))] + [
                    (True, phrase, sum(float(log_probs[0, k, token]) for k, token in enumerate(phrase)))
                    for phrase in listed]:
                ctc = loop_ctc_log_likelihood(ctc_log_probs, tokens, model.blank_id) if ctc_score_weight else 0.0
                found.append((is_listed, tokens, decoder_sum, ctc, max(real, 1),
                              count_prior * abs(candidate - expected)))
        found.sort(key=lambda hypothesis: hypothesis[0])  # the searched ones first, as in the batched search
        use_ctc = any(ctc > float("-inf") for _, _, _, ctc, _, _ in found)
        best, best_score = None, None
        for _, tokens, decoder_sum, ctc, count_term, prior_term in found:
            score = ((decoder_sum + (ctc_score_weight * ctc if use_ctc else 0.0)) / count_term ** length_penalty
                     - prior_term)
            if best_score is None or score > best_score:
                best, best_score = tokens, score
        hypotheses.append(best)
        scores.append(best_score)
    return hypotheses, scores


def _ctc_loop_reference(model, features, lengths, spread: int, count_prior: float = 0.0,
                        ctc_score_weight: float = 0.0) -> tuple[list[list[int]], list[float]]:
    """The CTC extractor's candidates one utterance and one blank offset at a time: the greedy path merged frame by
    frame (loop_greedy_frame_tokens) under offset spread x step .. -spread x step (an empty one replaced by the plain
    path when that has tokens), each token's query the mean of its frames, the decoder's greedy tokens; score =
    (their log-prob sum + ctc_score_weight x their CTC log-likelihood) / count - count_prior x |count - the plain
    path's count|, the first best wins. -> (tokens, score) per utterance."""
    blank = model.blank_id
    hypotheses, scores = [], []
    for row in range(features.shape[0]):
        feats = features[row:row + 1, :lengths[row]]
        with torch.no_grad():
            encoder_out, enc_mask = model.encode(feats, torch.ones(1, feats.shape[1], dtype=torch.bool))
            ctc_log_probs = model.ctc(encoder_out)[0]  # [T', V]
        frames = ctc_log_probs.shape[0]
        paths = []
        for k in range(2 * spread + 1):
            shifted = ctc_log_probs.clone()
            shifted[:, blank] += (spread - k) * BLANK_OFFSET_STEP
            paths.append(loop_greedy_frame_tokens(shifted, frames, blank))
        found = []  # (tokens, decoder log-prob sum, CTC log-likelihood, count) per offset
        for frame_tokens in paths:
            if max(frame_tokens) < 0:
                frame_tokens = paths[spread]
            count = max(frame_tokens) + 1
            tokens, decoder_sum = [], 0.0
            if count > 0:
                queries = torch.stack([encoder_out[0, [t for t in range(frames) if frame_tokens[t] == n]].mean(dim=0)
                                       for n in range(count)]).unsqueeze(0)  # [1, N, D]
                with torch.no_grad():
                    logits = model.decoder(queries, torch.ones(1, count, dtype=torch.bool), encoder_out, enc_mask)
                log_probs = torch.log_softmax(logits[0], dim=-1)
                log_probs[:, model.never_emitted] = float("-inf")
                top = log_probs.max(dim=-1)
                tokens, decoder_sum = top.indices.tolist(), float(top.values.sum())
            ctc = loop_ctc_log_likelihood(ctc_log_probs, tokens, blank) if ctc_score_weight else 0.0
            found.append((tokens, decoder_sum, ctc, count))
        plain = found[spread][3]
        use_ctc = any(ctc > float("-inf") for _, _, ctc, _ in found)
        best, best_score = None, None
        for tokens, decoder_sum, ctc, count in found:
            score = ((decoder_sum + (ctc_score_weight * ctc if use_ctc else 0.0)) / max(count, 1)
                     - count_prior * abs(count - plain))
            if best_score is None or score > best_score:
                best, best_score = tokens, score
        hypotheses.append(best)
        scores.append(best_score)
    return hypotheses, scores


@pytest.mark.parametrize("count_prior, ctc_score_weight", [(0.0, 0.0), (0.3, 0.0), (0.0, 0.5), (0.3, 2.0)])
def test_ctc_extractor_length_candidates_match_a_plain_loop(count_prior, ctc_score_weight):
    model, batch, _ = _tiny_paraformer(ctc_weight=0.3, predictor="ctc")
    spread = 2
    tokens, lengths, chosen, scores = model.decode_length_candidates(batch.features, batch.feat_mask, spread=spread,
                                                                     count_prior=count_prior,
                                                                     ctc_score_weight=ctc_score_weight)
    expected, expected_scores = _ctc_loop_reference(model, batch.features, batch.feat_mask.sum(dim=1).tolist(),
                                                    spread, count_prior, ctc_score_weight)
    got = [tokens[row, :lengths[row]].tolist() for row in range(tokens.shape[0])]
    assert got == expected
    assert scores.tolist() == pytest.approx(expected_scores, abs=1e-5)
    assert torch.equal(chosen.num_tokens, lengths) and chosen.embeddings.shape[:2] == chosen.token_mask.shape
    plain = model.greedy_decode(batch.features, batch.feat_mask)[1]
    assert int(lengths.min()) > 0 and not torch.equal(lengths, plain)  # the candidates changed some counts


@pytest.mark.parametrize("predictor_bias, count_prior, ctc_score_weight, length_penalty", [
    (0, 0.0, 0.0, 1.0), (1, 0.0, 0.0, 1.0), (0, 0.3, 0.0, 1.0), (0, 0.3, 0.5, 1.0), (1, 0.0, 2.0, 1.0),
    (1, 0.3, 0.0, 1.0), (1, 1.0, 0.5, 1.0), (0, 0.0, 0.0, 0.0), (0, 0.3, 0.5, 0.5), (1, 0.0, 2.0, 0.5)])
def test_batched_length_candidates_match_a_plain_loop(predictor_bias, count_prior, ctc_score_weight, length_penalty):
    model, batch, _ = _tiny_paraformer(predictor_bias, ctc_weight=0.3 if ctc_score_weight else 0.0)
    tokens, lengths, chosen, scores = model.decode_length_candidates(batch.features, batch.feat_mask, spread=2,
                                                                     count_prior=count_prior,
                                                                     ctc_score_weight=ctc_score_weight,
                                                                     length_penalty=length_penalty)
    expected, expected_scores = _loop_reference(model, batch.features, batch.feat_mask.sum(dim=1).tolist(), 2,
                                                count_prior, ctc_score_weight, length_penalty)
    got = [tokens[row, :lengths[row]].tolist() for row in range(tokens.shape[0])]
    assert got == expected
    assert scores.tolist() == pytest.approx(expected_scores, abs=1e-5)
    assert torch.equal(chosen.num_tokens, lengths) and chosen.embeddings.shape[:2] == chosen.token_mask.shape
    assert bool((tokens[~chosen.token_mask] == model.pad_id).all())


def _phrase_list(token_lists: list[list[int]], lm_scores: torch.Tensor | None = None, lm=None) -> PhraseCandidates:
    """PhraseCandidates of these unit sequences, in this order (LM scores 0 unless given)."""
    lengths = torch.tensor([len(ids) for ids in token_lists])
    tokens = torch.zeros(len(token_lists), int(lengths.max()), dtype=torch.long)
    for row, ids in enumerate(token_lists):
        tokens[row, :len(ids)] = torch.tensor(ids)
    scores = torch.zeros(len(token_lists)) if lm_scores is None else lm_scores
    return PhraseCandidates(tokens, lengths, scores, [str(ids) for ids in token_lists], lm)


def _random_phrases(model, lengths: range, per_length: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    units = [unit for unit in range(model.vocab_size) if unit not in model.never_emitted]
    return [[units[i] for i in torch.randint(len(units), (length,), generator=generator).tolist()]
            for length in lengths for _ in range(per_length)]


def test_phrase_decoder_scores_match_a_plain_loop():
    """Each phrase's log-prob sum at the first candidate row of its count, -inf (and the utterance's first row) where
    no candidate has that count."""
    generator = torch.Generator().manual_seed(0)
    batch, width, positions, vocab = 3, 3, 6, 7
    log_probs = torch.randn(batch * width, positions, vocab, generator=generator).log_softmax(dim=-1)
    counts = torch.tensor([2, 3, 4, 5, 5, 6, 1, 1, 1])  # utterance 1 has count 5 twice: its first row is read
    token_lists = [[1], [2, 3], [4, 5, 6], [6, 5, 4, 3, 2], [1, 2, 3, 4, 5, 6]]
    scores, rows = phrase_decoder_scores(_phrase_list(token_lists), log_probs, counts, width)
    for utterance in range(batch):
        for column, ids in enumerate(token_lists):
            own = counts[utterance * width:(utterance + 1) * width].tolist()
            if len(ids) not in own:
                assert scores[utterance, column] == float("-inf") and rows[utterance, column] == utterance * width
                continue
            row = utterance * width + own.index(len(ids))
            assert int(rows[utterance, column]) == row
            assert float(scores[utterance, column]) == pytest.approx(
                sum(float(log_probs[row, k, token]) for k, token in enumerate(ids)), abs=1e-5)


def test_phrase_counts_in_reach_are_the_listed_lengths_beyond_the_spread_within_the_share():
    """Per utterance: the distinct phrase lengths farther than the spread from its count N and at most reach x N
    away, ascending, each row padded with its own N; none at all gives [B, 0]."""
    phrases = _phrase_list([[1] * length for length in (1, 2, 8, 8, 12, 20, 26, 30, 31, 40)])
    counts = torch.tensor([1, 10, 25, 34, 100])
    spread, reach = 2, 0.2
    got = phrase_counts_in_reach(phrases, counts, spread, reach)
    listed = sorted(set(phrases.lengths.tolist()))
    wanted = [[length for length in listed if spread < abs(length - count) <= math.floor(reach * count)]
              for count in counts.tolist()]
    assert wanted[2] == [20, 30] and wanted[3] == [30, 31, 40] and wanted[0] == wanted[4] == []  # the case covers these
    width = max(len(row) for row in wanted)
    assert got.tolist() == [row + [count] * (width - len(row)) for row, count in zip(wanted, counts.tolist())]
    assert phrase_counts_in_reach(phrases, torch.tensor([3, 9]), spread, reach).shape == (2, 0)


@pytest.mark.parametrize("predictor_bias, count_prior, length_penalty, spread, reach", [
    (0, 0.0, 1.0, 2, PHRASE_REACH), (1, 0.3, 0.5, 2, PHRASE_REACH), (0, 1.0, 0.5, 2, PHRASE_REACH),
    (0, 0.3, 0.5, 1, 1.0), (1, 0.0, 1.0, 1, 1.0)])
def test_phrase_candidates_match_a_plain_loop_and_win_where_they_score_best(predictor_bias, count_prior,
                                                                           length_penalty, spread, reach, monkeypatch):
    """Random phrases of 1-6 units beside the greedy hypotheses of every candidate: the batched search picks what the
    loop picks, hypothesis and score; the CTC score makes listed phrases win on some utterances. Reach 1 with spread
    1 puts phrase counts beyond the spread among the candidates of the tiny model's short counts."""
    monkeypatch.setattr(paraformer_search, "PHRASE_REACH", reach)
    model, batch, _ = _tiny_paraformer(predictor_bias, ctc_weight=0.3)
    token_lists = _random_phrases(model, range(1, 7), 8, seed=predictor_bias)
    options = dict(count_prior=count_prior, ctc_score_weight=2.0, length_penalty=length_penalty)
    tokens, lengths, chosen, scores = model.decode_length_candidates(batch.features, batch.feat_mask, spread,
                                                                     phrases=_phrase_list(token_lists), **options)
    expected, expected_scores = _loop_reference(model, batch.features, batch.feat_mask.sum(dim=1).tolist(), spread,
                                                phrases=token_lists, reach=reach, **options)
    got = [tokens[row, :lengths[row]].tolist() for row in range(tokens.shape[0])]
    assert got == expected and scores.tolist() == pytest.approx(expected_scores, abs=1e-5)
    assert torch.equal(chosen.num_tokens, lengths) and bool((tokens[~chosen.token_mask] == model.pad_id).all())
    plain = model.decode_length_candidates(batch.features, batch.feat_mask, spread, **options)
    won = [row for row in range(len(got)) if got[row] != plain[0][row, :plain[1][row]].tolist()]
    assert won and all(got[row] in token_lists for row in won)


def test_a_phrase_s_lm_term_is_the_search_s_and_its_weight_applies():
    """An utterance's own best hypothesis listed as a phrase scored by the same LM ties with the search (which keeps
    its own); one unit more of LM log-prob lifts its score by lm_weight / count ** length_penalty."""
    model, batch, data = _tiny_paraformer(ctc_weight=0.3)
    lm = build_token_lm(["abc", "bcd", "cafe", "fade", "bead"], data.tokenizer, order=3)
    search = dict(beam_size=3, lm=lm, lm_weight=0.5, ctc_score_weight=0.5, length_penalty=0.5)
    frames = batch.feat_mask.sum(dim=1)
    for row in range(batch.features.shape[0]):
        alone = batch.features[row:row + 1, :frames[row]]
        mask = torch.ones(alone.shape[:2], dtype=torch.bool)
        tokens, lengths, _, scores = model.decode_length_candidates(alone, mask, 1, **search)
        best = tokens[0, :lengths[0]].tolist()
        listed = PhraseCandidates.build([data.tokenizer.decode(best)], data.tokenizer, lm)
        assert listed.tokens[0].tolist() == best
        tied = model.decode_length_candidates(alone, mask, 1, phrases=listed, **search)
        assert torch.equal(tied[0], tokens) and float(tied[3][0]) == pytest.approx(float(scores[0]), abs=1e-5)
        lifted = dataclasses.replace(listed, lm_scores=listed.lm_scores + 1.0)
        raised = model.decode_length_candidates(alone, mask, 1, phrases=lifted, **search)
        assert raised[0][0, :raised[1][0]].tolist() == best
        assert float(raised[3][0]) == pytest.approx(float(scores[0]) + 0.5 / len(best) ** 0.5, abs=1e-5)
    with pytest.raises(ValueError, match="another LM"):
        model.decode_length_candidates(batch.features, batch.feat_mask, 1, phrases=_phrase_list([[2]]), **search)
    with pytest.raises(ValueError, match="length_candidates must be > 0"):
        model.decode_scored(batch.features, batch.feat_mask, phrases=_phrase_list([[2]]))


def test_phrase_candidates_come_from_the_training_transcripts_where_the_options_allow_them():
    from paraformer_asr.data.setup import training_transcripts
    from paraformer_asr.decode.hotwords import Hotword

    _, _, data = _tiny_paraformer()
    on = config_from_dict(tiny_raw_config(), ["decode.method=beam", "decode.lm_order=3", "decode.length_candidates=2",
                                              "decode.phrase_candidates=true"])
    loaded = type("Loaded", (), {"cfg": on, "tokenizer": data.tokenizer})()
    search = DecodingOptions().search_arguments(loaded)
    phrases = search["phrases"]
    assert phrases.texts == sorted(set(training_transcripts(on))) and phrases.lm is search["lm"]
    assert phrases.lm_scores[0] == pytest.approx(search["lm"].score_sequence(data.tokenizer.encode(phrases.texts[0])))
    assert DecodingOptions(phrase_candidates=False).search_arguments(loaded)["phrases"] is None
    assert DecodingOptions(length_candidates=0).search_arguments(loaded)["phrases"] is None  # inert without candidates
    hotwords = (Hotword("cafe", 2.0),)
    assert DecodingOptions(hotwords=hotwords).search_arguments(loaded)["phrases"] is None  # the list takes their place
    with pytest.raises(ConfigError, match="--phrase-candidates does not combine with --hotwords"):
        DecodingOptions(hotwords=hotwords, phrase_candidates=True).search_arguments(loaded)
    with pytest.raises(ConfigError, match="--phrase-candidates needs a Paraformer decoding length candidates"):
        DecodingOptions(length_candidates=0, phrase_candidates=True).search_arguments(loaded)
    loaded.cfg = config_from_dict(tiny_raw_config(), ["model.type=transformer_ar"])
    with pytest.raises(ConfigError, match="--phrase-candidates needs a Paraformer"):
        DecodingOptions(phrase_candidates=True).search_arguments(loaded)
    with pytest.raises(ConfigError, match="decode.phrase_candidates"):
        config_from_dict(tiny_raw_config(), ["model.type=transformer_ar", "decode.phrase_candidates=true"])


def test_a_text_corpus_is_no_phrase_list(monkeypatch, capsys):
    """Past MAX_PHRASES distinct transcripts the config's phrase candidates are left out with a warning, and the
    flag asking for them stops naming it."""
    import paraformer_asr.decode.phrases as phrases_module

    _, _, data = _tiny_paraformer()
    texts = ["abc", "bcd", "abc", "fade"]
    monkeypatch.setattr(phrases_module, "MAX_PHRASES", 3)
    assert phrases_module.training_phrases(texts, data.tokenizer, None, asked=False).texts == ["abc", "bcd", "fade"]
    monkeypatch.setattr(phrases_module, "MAX_PHRASES", 2)
    assert phrases_module.training_phrases(texts, data.tokenizer, None, asked=False) is None
    assert "decode.phrase_candidates left out: the training transcripts hold 3 distinct" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--phrase-candidates: the training transcripts hold 3 distinct"):
        phrases_module.training_phrases(texts, data.tokenizer, None, asked=True)


@pytest.mark.parametrize("predictor", ["cif", "ctc"])
def test_length_candidates_with_beam_lm_and_ctc_do_not_depend_on_the_batch(predictor):
    """Padding invariance: each utterance decoded alone gives what it gives in the padded batch."""
    model, batch, data = _tiny_paraformer(ctc_weight=0.3, predictor=predictor)
    lm = build_token_lm(["abc", "bcd", "cafe", "fade", "bead"], data.tokenizer, order=3)
    tokens, lengths, _, scores = model.decode_length_candidates(batch.features, batch.feat_mask, 1, beam_size=3, lm=lm,
                                                                lm_weight=0.5, ctc_score_weight=0.5)
    frames = batch.feat_mask.sum(dim=1)
    for row in range(tokens.shape[0]):
        alone = batch.features[row:row + 1, :frames[row]]
        one, one_length, _, one_score = model.decode_length_candidates(
            alone, torch.ones(alone.shape[:2], dtype=torch.bool), 1, beam_size=3, lm=lm, lm_weight=0.5,
            ctc_score_weight=0.5)
        assert one[0, :one_length[0]].tolist() == tokens[row, :lengths[row]].tolist()
        assert float(one_score[0]) == pytest.approx(float(scores[row]), abs=1e-4)


def test_no_search_puts_an_eos_inside_a_hypothesis():
    """The ids a Paraformer never outputs (padding, <eos>, the blank) are ruled out at every position, even where the
    decoder favours them and an LM that ends sentences early is fused: a hypothesis's text would end at an <eos>
    (found on two commands read in one window: the LM ended the sentence after the first)."""
    model, batch, data = _tiny_paraformer(ctc_weight=0.3)
    with torch.no_grad():
        model.decoder.output.bias[[model.eos_id, model.pad_id, model.blank_id]] = 50.0
    assert sorted(model.never_emitted) == sorted([model.pad_id, model.eos_id, model.blank_id])
    lm = build_token_lm(["a", "b", "c"], data.tokenizer, order=2)  # one-letter sentences: <eos> after every token
    results = [model.greedy_decode(batch.features, batch.feat_mask),
               model.beam_search(batch.features, batch.feat_mask, 3, lm=lm, lm_weight=5.0)[::2],
               model.decode_length_candidates(batch.features, batch.feat_mask, 1, 3, lm, 5.0, 0.0, 0.5)[:2]]
    for tokens, lengths in results:
        kept = tokens.flatten(0, tokens.dim() - 2)[:, :int(lengths.max())]  # [rows, N]
        assert int(lengths.min()) > 0 and not any(token in model.never_emitted for token in
                                                  kept[kept != model.pad_id].tolist())
        assert data.tokenizer.until_eos(tokens.flatten().tolist()) == tokens.flatten().tolist()


def test_length_candidates_refuse_a_zero_spread_and_the_autoregressive_baseline():
    model, batch, _ = _tiny_paraformer()
    with pytest.raises(ValueError, match="spread"):
        model.decode_length_candidates(batch.features, batch.feat_mask, 0)
    with pytest.raises(ConfigError, match="decode.length_candidates"):
        config_from_dict(tiny_raw_config(), ["model.type=transformer_ar", "decode.length_candidates=1"])
    raw = tiny_raw_config()
    raw["model"].update(predictor="ctc", ctc_weight=0.5)
    assert config_from_dict(raw, ["decode.length_candidates=1", "decode.tune=true"]).decode.length_candidates == 1


def test_a_ctc_score_needs_a_ctc_head_and_hypotheses_to_rank():
    model, batch, _ = _tiny_paraformer()  # no CTC head
    with pytest.raises(ValueError, match="CTC head"):
        model.decode_length_candidates(batch.features, batch.feat_mask, 1, ctc_score_weight=0.5)
    for overrides in (["decode.length_candidates=2", "decode.ctc_score_weight=0.5"],  # no CTC head
                      ["model.ctc_weight=0.3", "decode.ctc_score_weight=0.5"],  # no length candidates
                      ["model.ctc_weight=0.3", "decode.length_candidates=2", "decode.ctc_score_weight=-1"]):
        with pytest.raises(ConfigError, match="decode.ctc_score_weight"):
            config_from_dict(tiny_raw_config(), overrides)
    with pytest.raises(ConfigError, match="--ctc-score-weight"):
        DecodingOptions(ctc_score_weight=-0.5)
    loaded = type("Loaded", (), {"cfg": config_from_dict(tiny_raw_config()), "tokenizer": None})()
    with pytest.raises(ConfigError, match="--ctc-score-weight needs .* CTC head"):
        DecodingOptions(length_candidates=2, ctc_score_weight=0.5).search_arguments(loaded)
    with_head = config_from_dict(tiny_raw_config(), ["model.ctc_weight=0.3"])
    loaded.cfg = with_head
    with pytest.raises(ConfigError, match="--length-candidates > 0"):
        DecodingOptions(ctc_score_weight=0.5).search_arguments(loaded)
    # the autoregressive baseline ranks its beams: beam search, not length candidates
    loaded.cfg = config_from_dict(tiny_raw_config(), ["model.type=transformer_ar", "model.ctc_weight=0.3"])
    assert DecodingOptions(method="beam", ctc_score_weight=0.5).search_arguments(loaded)["ctc_score_weight"] == 0.5
    with pytest.raises(ConfigError, match="--decode beam"):
        DecodingOptions(method="greedy", ctc_score_weight=0.5).search_arguments(loaded)
    with pytest.raises(ConfigError, match="decode.ctc_score_weight"):
        config_from_dict(tiny_raw_config(), ["model.type=transformer_ar", "model.ctc_weight=0.3",
                                             "decode.ctc_score_weight=0.5"])  # greedy
    assert config_from_dict(tiny_raw_config(), ["model.type=transformer_ar", "model.ctc_weight=0.3",
                                                "decode.method=beam", "decode.ctc_score_weight=0.5"])


@pytest.mark.parametrize("override, key", [
    ("decode.lm_order=3", "decode.lm_order"),  # an LM with greedy decoding
    ("decode.beam_size=0", "decode.beam_size"),
    ("decode.length_candidates=-1", "decode.length_candidates"),
    ("decode.count_prior=-0.5", "decode.count_prior"),
    ("decode.length_penalty=-1", "decode.length_penalty"),
    ("decode.length_penalty=inf", "decode.length_penalty"),
    ("decode.method=sample", "decode.method"),
    ("decode.temperature=1", "decode.temperature"),
])
def test_bad_decode_sections_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key):
        config_from_dict(tiny_raw_config(), [override])


def test_unset_options_come_from_the_checkpoint_config_and_flags_override_them():
    shipped = config_from_dict(tiny_raw_config(), ["decode.method=beam", "decode.beam_size=8", "decode.lm_order=6",
                                                   "decode.lm_weight=1.0", "decode.length_candidates=3",
                                                   "decode.count_prior=0.3", "decode.ctc_score_weight=0.5",
                                                   "decode.length_penalty=0.5", "model.ctc_weight=0.3"]).decode
    assert DecodingOptions().resolve(shipped) == DecodingOptions("beam", 8, 6, 1.0, 3, 0.3, 0.5, False, 0.5, False)
    assert DecodingOptions(beam_size=2, ctc_score_weight=0, length_penalty=1).resolve(shipped) == DecodingOptions(
        "beam", 2, 6, 1.0, 3, 0.3, 0, False, 1, False)
    # greedy decoding drops the config's LM (it belongs to the beam search) but keeps its length candidates
    assert DecodingOptions(method="greedy").resolve(shipped) == DecodingOptions("greedy", 8, 0, 1.0, 3, 0.3, 0.5, False,
                                                                                0.5, False)
    plain = config_from_dict(tiny_raw_config()).decode
    assert DecodingOptions().resolve(plain) == DecodingOptions("greedy", 4, 0, 0.3, 0, 0.0, 0.0, False, 1.0, False)
    with pytest.raises(ConfigError, match="an LM needs --decode beam"):
        DecodingOptions(lm_order=3).resolve(plain)


def test_an_autoregressive_checkpoint_refuses_length_candidates():
    from types import SimpleNamespace

    raw = tiny_raw_config()
    raw["model"]["type"] = "transformer_ar"
    loaded = SimpleNamespace(cfg=config_from_dict(raw))
    with pytest.raises(ConfigError, match="--length-candidates needs a Paraformer"):
        DecodingOptions(length_candidates=2).search_arguments(loaded)


@pytest.mark.slow
def test_eval_decodes_as_the_checkpoint_config_says_unless_a_flag_overrides(tmp_path):
    from paraformer_asr.cli import run_main
    from paraformer_asr.training.launch import train

    raw = tiny_raw_config(str(tmp_path / "runs"))
    raw["decode"] = {"method": "beam", "beam_size": 3, "lm_order": 3, "lm_weight": 0.5, "length_candidates": 1,
                     "length_penalty": 0.5, "phrase_candidates": True}
    run = train(config_from_dict(raw))
    evaluate = load_script("eval").main
    results = {}
    for name, flags in {"config": [], "greedy": ["--decode", "greedy", "--length-candidates", "0",
                                                 "--length-penalty", "1"]}.items():
        out = tmp_path / f"{name}.json"
        assert run_main(evaluate, ["--checkpoint", str(run), "--out", str(out), *flags]) == 0
        results[name] = json.loads(out.read_text())
    keys = ("decode", "beam_size", "lm_order", "lm_weight", "length_candidates", "length_penalty", "phrase_candidates")
    assert {k: results["config"][k] for k in keys} == {"decode": "beam", "beam_size": 3, "lm_order": 3,
                                                       "lm_weight": 0.5, "length_candidates": 1, "length_penalty": 0.5,
                                                       "phrase_candidates": True}
    assert {k: results["greedy"][k] for k in keys} == {"decode": "greedy", "beam_size": 1, "lm_order": 0,
                                                       "lm_weight": 0.0, "length_candidates": 0, "length_penalty": 1,
                                                       "phrase_candidates": False}  # inert without candidates


def test_the_tuning_grid_order_and_the_section_beam_size():
    from paraformer_asr.training.tuning import COUNT_PRIORS, CTC_SCORE_WEIGHT, DEFAULT_SPREAD, LM_WEIGHTS, decoding_grid

    section = config_from_dict(tiny_raw_config(), ["decode.beam_size=5", "decode.length_penalty=0.5"]).decode
    grid = decoding_grid(section)
    assert {s.length_penalty for s in grid} == {0.5}  # the section's, not a choice of the grid
    assert len(grid) == 1 + len(COUNT_PRIORS) * (1 + len(LM_WEIGHTS))
    assert (grid[0].method, grid[0].lm_order, grid[0].length_candidates) == ("greedy", 0, 0)
    assert all(s.length_candidates == DEFAULT_SPREAD and s.lm_order == 6 and s.beam_size == 5
               for s in grid[1 + len(COUNT_PRIORS):])
    assert {(s.lm_weight, s.count_prior) for s in grid if s.method == "beam"} == {
        (w, p) for w in LM_WEIGHTS for p in COUNT_PRIORS}
    weights = [s.lm_weight for s in grid if s.method == "beam"]
    assert weights == sorted(weights) and len(set(weights)) > 1
    assert {s.ctc_score_weight for s in grid} == {0.0}
    with_ctc = decoding_grid(section, ctc_head=True)
    assert with_ctc[0] == grid[0]  # one decoder pass first: another setting must beat it by more than the tolerance
    assert {s.ctc_score_weight for s in with_ctc[1:] if s.method == "greedy"} == {CTC_SCORE_WEIGHT}
    fused = [s for s in with_ctc if s.method == "beam"]  # with an LM the CTC score weighs at least as much
    assert all(s.ctc_score_weight == max(CTC_SCORE_WEIGHT, s.lm_weight) for s in fused)
    assert {(s.lm_weight, s.ctc_score_weight) for s in fused if s.lm_weight == 1.0} == {(1.0, 1.0)}
    assert [dataclasses.replace(s, ctc_score_weight=0.0) for s in with_ctc] == grid  # otherwise the same


def test_tune_decoding_tries_the_spread_and_penalty_it_is_given_and_refuses_bad_ones(tmp_path, tone_checkpoint, capsys):
    from paraformer_asr.cli import run_main
    from paraformer_asr.inference import load_model

    tune = load_script("tune_decoding")
    out, table = tmp_path / "tuned.pt", tmp_path / "grid.md"
    common = ["--checkpoint", str(tone_checkpoint), "--out", str(out), "--table", str(table)]
    assert run_main(tune.main, common + ["--length-candidates", "2", "--length-penalty", "0.5",
                                         "--phrase-candidates"]) == 0
    spreads = [int(line.split("|")[5]) for line in table.read_text().splitlines()[2:]]
    assert spreads[0] == 0 and set(spreads[1:]) == {2}  # one-pass greedy first, every other setting +- 2
    tuned = load_model(out, "torch", "cpu", 1)[0].cfg.decode
    assert tuned.length_candidates in (0, 2) and tuned.length_penalty == 0.5  # the penalty it was tuned with
    assert tuned.phrase_candidates  # and the phrase candidates
    capsys.readouterr()
    assert run_main(tune.main, common + ["--length-candidates", "0"]) == 2
    assert "--length-candidates) must be >= 1, got 0" in capsys.readouterr().err
    assert run_main(tune.main, common + ["--length-penalty", "-1"]) == 2
    assert "--length-penalty must be a finite number >= 0, got -1" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("predictor", ["cif", "ctc"])
def test_training_with_decode_tune_stores_the_validation_choice_in_best_pt(tmp_path, predictor):
    from paraformer_asr.training.tuning import choose, decoding_grid
    from paraformer_asr.inference import load_model
    from paraformer_asr.training.launch import train

    raw = tiny_raw_config(str(tmp_path / "runs"))
    raw["decode"] = {"tune": True, "method": "beam", "lm_order": 2, "length_candidates": 1}
    if predictor == "ctc":  # the CTC extractor's candidates: its greedy path under blank offsets
        raw["model"].update(predictor="ctc", ctc_weight=0.5)
        raw["train"]["epochs"] = 12  # the CTC head needs a few epochs to emit
    run = train(config_from_dict(raw))
    table = (run / "decoding.md").read_text().splitlines()
    grid = decoding_grid(config_from_dict(raw).decode, ctc_head=predictor == "ctc")
    assert len(table) == 2 + len(grid) and sum("**" in line for line in table) == 1
    chosen = load_model(run, "torch", "cpu", 1)[0].cfg.decode
    assert chosen in grid and "**" in table[2 + grid.index(chosen)]
    header = [cell.strip() for cell in table[0].split("|")]
    cers, wers = ([float(line.split("|")[header.index(name)].strip(" %")) / 100 for line in table[2:]]
                  for name in ("CER", "WER"))
    assert grid.index(chosen) == choose(cers, wers)  # the rule, read back from the table (rounded to 0.01 points)
    assert min(cers) < 50.0  # the model decodes: a tie of empty outputs would choose nothing


def test_one_pass_wins_unless_more_passes_remove_the_margin_else_the_lowest_wer_of_the_near_ties():
    from paraformer_asr.training.tuning import ONE_PASS_MARGIN, choose

    assert choose([0.0205, 0.10, 0.02], [0.9, 0.9, 0.1]) == 0  # one decoder pass, within the tolerance
    assert choose([0.0922, 0.0816, 0.0858], [0.1155, 0.1018, 0.1037]) == 0  # 11 % fewer errors do not buy 11 passes
    assert choose([0.0842, 0.0582], [0.2550, 0.1800]) == 1  # 31 % fewer do
    below = 0.10 * (1 - ONE_PASS_MARGIN)
    assert choose([0.10, below + 1e-4], [0.5, 0.0]) == 0 and choose([0.10, below - 1e-4], [0.5, 0.0]) == 1
    assert choose([0.002, 0.0011], [0.5, 0.0]) == 0  # below the margin, but within the tolerance
    assert choose([0.05, 0.02], [0.0, 0.5]) == 1  # one pass clearly worse
    assert choose([0.10, 0.0205, 0.05, 0.02], [0.5, 0.03, 0.01, 0.04]) == 1  # of the near-ties, the lower WER
    assert choose([0.10, 0.02, 0.0205], [0.5, 0.03, 0.03]) == 1  # a WER tie keeps the earlier
    assert choose([0.3], [0.5]) == 0


def test_the_tuner_on_a_grid_of_a_commands_run_keeps_its_choice():
    from paraformer_asr.training.tuning import LM_WEIGHTS, TIE_TOLERANCE, choose, decoding_grid

    grid = decoding_grid(config_from_dict(tiny_raw_config()).decode, ctc_head=True)
    # the validation grid of the commands run of 2026-11-29 with phrase candidates (docs/history.md, "Phrase
    # candidates"), CER / WER % in the grid's order: one pass, greedy over the candidates with priors 0 / 0.3 / 1,
    # then beam + LM of weight 0.3, 1 and 2 with the same priors; weight 2 is 0.01 point better, within the
    # tolerance, and ties on WER: the earlier setting stays
    table = [(3.48, 10.16), (0.27, 0.89), (0.31, 1.05), (0.93, 2.90), (0.06, 0.16), (0.06, 0.16), (0.13, 0.40),
             (0.03, 0.08), (0.05, 0.16), (0.08, 0.24), (0.02, 0.08), (0.02, 0.08), (0.02, 0.08)]
    assert LM_WEIGHTS == (0.3, 1.0, 2.0) and TIE_TOLERANCE == 0.001 and len(grid) == len(table)
    chosen = grid[choose([cer / 100 for cer, _ in table], [wer / 100 for _, wer in table])]
    assert (chosen.method, chosen.lm_weight, chosen.count_prior) == ("beam", 1.0, 0.0)


def test_a_near_tie_keeps_one_pass_greedy():
    from paraformer_asr.training.tuning import TIE_TOLERANCE, choose, decoding_grid

    grid = decoding_grid(config_from_dict(tiny_raw_config()).decode, ctc_head=True)
    lowest = 0.01
    # the LM settings without a count prior have the lowest validation CER, one-pass greedy is within the tolerance
    cers = [lowest + TIE_TOLERANCE / 2 if s.length_candidates == 0 else
            lowest if s.method == "beam" and s.count_prior == 0 else 0.05 for s in grid]
    assert grid[choose(cers, [0.5] * len(grid))].length_candidates == 0
    cers[0] = 0.05
    chosen = grid[choose(cers, [0.5] * len(grid))]  # one pass clearly worse, a WER tie: the earlier, the weaker LM
    assert (chosen.method, chosen.lm_weight, chosen.ctc_score_weight) == ("beam", 0.3, 0.5)


class _ScriptedCifDecoding(ParaformerDecoding):
    """A Paraformer decoding with every learned part scripted: the encoder passes its input through, the CIF's alphas
    are fixed, and the decoder's logits come from a fixed table per count and position (``table[n][k]``: position k
    of a candidate with n fired tokens, the <eos> fire included with predictor_bias 1), whatever the queries."""

    def __init__(self, alphas: list[float], table: dict[int, torch.Tensor], predictor_bias: int):
        self.cfg = ModelConfig(predictor_bias=predictor_bias)
        self.pad_id, self.eos_id, self.blank_id = 0, 1, None
        self.alphas, self.table = torch.tensor([alphas]), table

    def encode(self, features, feat_mask):
        return features, feat_mask

    def cif_alphas(self, encoder_out, enc_mask):
        return self.alphas, self.alphas

    def ctc_log_probs(self, encoder_out):
        return None

    def decode_queries(self, embeddings, token_mask, encoder_out, enc_mask):
        logits = torch.zeros(*token_mask.shape, 5)  # [B*K, N, V]
        for row, count in enumerate(token_mask.sum(dim=1).tolist()):
            logits[row, :count] = self.table[count]
        return logits


@pytest.mark.parametrize("predictor_bias", [0, 1])
@pytest.mark.parametrize("count_prior", [0.0, 0.2, 0.5, 5.0])
def test_the_count_prior_is_centred_on_the_real_token_count_as_brute_force_says(predictor_bias, count_prior):
    """With ``model.predictor_bias`` 1 the CIF's expected count (the sum of its alphas) holds the <eos> fire, the
    candidates' lengths do not: the prior is centred on the sum less the bias. Against every candidate count scored
    by hand: greedy log-prob sum / real tokens - count_prior x |real tokens - (sum of alphas - bias)|."""
    generator = torch.Generator().manual_seed(predictor_bias)
    alphas = [0.9, 0.8, 0.7, 0.6, 0.6, 0.5]  # sum 4.1: 4 fires (with bias 1: 3 tokens and the <eos>)
    spread, expected = 1, sum(alphas) - predictor_bias
    table = {count: torch.randn(count, 5, generator=generator) * 2 for count in range(1, 7)}
    model = _ScriptedCifDecoding(alphas, table, predictor_bias)
    brute = {}  # real token count -> (greedy tokens, score per token)
    for count in (3, 4, 5):
        log_probs = torch.log_softmax(table[count][:count - predictor_bias], dim=-1)
        log_probs[:, [model.pad_id, model.eos_id]] = float("-inf")
        best = log_probs.max(dim=-1)
        real = count - predictor_bias
        brute[real] = (best.indices.tolist(), float(best.values.sum()) / real - count_prior * abs(real - expected))
    want = max(brute, key=lambda real: brute[real][1])
    features, feat_mask = torch.zeros(1, len(alphas), 4), torch.ones(1, len(alphas), dtype=torch.bool)
    tokens, lengths, _, scores = model.decode_length_candidates(features, feat_mask, spread, count_prior=count_prior)
    assert int(lengths[0]) == want and tokens[0, :want].tolist() == brute[want][0]
    assert float(scores[0]) == pytest.approx(brute[want][1], abs=1e-5)
    if count_prior == 5.0:  # a strong prior keeps the CIF's own count of real tokens
        assert want == 4 - predictor_bias
