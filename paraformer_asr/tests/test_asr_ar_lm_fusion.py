"""Shallow fusion of the token n-gram LM into beam search (Paraformer posteriors and the AR model)."""

import itertools

import pytest
import torch

from paraformer_asr.data.tokenizer import CharTokenizer
from paraformer_asr.decode.lm_fusion import build_token_lm, fused_posterior_beam_search
from paraformer_asr.decode.ngram_lm import TokenNgramLM

from asr_helpers import tiny_model

PAD, BOS, EOS, UNK, A, B = 0, 1, 2, 3, 4, 5
V = 6


def small_lm(sequences, order=2):
    return TokenNgramLM(order, V, bos_id=BOS, eos_id=EOS, pad_id=PAD, exclude_ids=[UNK]).fit(sequences)


def brute_force_best(log_probs, length, lm, lm_weight, k):
    """Every token sequence of the given length, scored am + lm_weight * (LM log-prob with eos)."""
    scored = []
    for seq in itertools.product(range(V), repeat=length):
        am = sum(float(log_probs[i, t]) for i, t in enumerate(seq))
        lm_score = lm.score_sequence(seq, include_eos=True) if all(t in (EOS, A, B) for t in seq) else float("-inf")
        scored.append((am + lm_weight * lm_score, seq))
    scored.sort(key=lambda item: -item[0])
    return scored[:k]


def test_fused_beam_search_finds_the_exact_best_sentences_with_the_eos_term():
    torch.manual_seed(0)
    log_probs = torch.log_softmax(torch.randn(2, 3, V) * 2, dim=-1)
    token_mask = torch.tensor([[True, True, True], [True, True, False]])
    lm = small_lm([[A, B, A], [B, B], [A, A, B, B], [B, A]], order=3)
    beam = V ** 2  # wide enough that no pruning can lose a sentence of <= 3 tokens
    tokens, scores = fused_posterior_beam_search(log_probs, token_mask, beam, PAD, lm, lm_weight=0.8)
    assert tokens.shape == (2, beam, 3) and scores.shape == (2, beam)
    for b, length in enumerate((3, 2)):
        expected = brute_force_best(log_probs[b], length, lm, 0.8, k=4)
        assert [tuple(tokens[b, k, :length].tolist()) for k in range(4)] == [seq for _, seq in expected]
        assert torch.allclose(scores[b, :4], torch.tensor([s for s, _ in expected]), atol=1e-4)
    assert bool((tokens[1, torch.isfinite(scores[1]), 2] == PAD).all())


def test_a_positive_lm_weight_moves_the_result_toward_the_lm():
    # the acoustic posteriors slightly prefer 'a a'; the LM has mostly seen 'b b'
    probs = torch.full((1, 2, V), 1e-6)
    probs[0, :, A], probs[0, :, B] = 0.52, 0.47
    log_probs, token_mask = probs.log(), torch.ones(1, 2, dtype=torch.bool)
    lm = small_lm([[B, B]] * 10 + [[A, A]])
    plain, _ = fused_posterior_beam_search(log_probs, token_mask, 2, PAD, lm, lm_weight=0.0)
    fused, _ = fused_posterior_beam_search(log_probs, token_mask, 2, PAD, lm, lm_weight=0.5)
    assert plain[0, 0].tolist() == [A, A] and fused[0, 0].tolist() == [B, B]
    with pytest.raises(ValueError, match="lm_weight"):
        fused_posterior_beam_search(log_probs, token_mask, 2, PAD, lm, lm_weight=-0.1)


@pytest.mark.parametrize("model_type", ["paraformer", "transformer_ar"])
def test_fused_beam_search_with_weight_zero_equals_the_models_own_beam_search(model_type):
    _, data, model = tiny_model(model_type)
    from paraformer_asr.data.batching import Collator

    batch = Collator(data.tokenizer.pad_id)([data.val[i] for i in range(4)])
    lm = build_token_lm(data.train.texts(), data.tokenizer, order=3)
    plain = model.beam_search(batch.features, batch.feat_mask, 3)
    zero = model.beam_search(batch.features, batch.feat_mask, 3, lm=lm, lm_weight=0.0)
    for got, expected in zip(zero, plain):
        assert torch.equal(got, expected)
    fused = model.beam_search(batch.features, batch.feat_mask, 3, lm=lm, lm_weight=0.5)
    assert [t.shape[:2] for t in fused[::2]] == [(4, 3), (4, 3)] and fused[1].shape == (4, 3)
    assert bool(torch.isfinite(fused[1][:, 0]).all()) and bool((fused[1][:, :-1] >= fused[1][:, 1:]).all())


def test_build_token_lm_uses_tokenizer_ids_and_never_predicts_unk_or_blank():
    tokenizer = CharTokenizer.build(["abc", "cab"], with_blank=True)
    lm = build_token_lm(["abc", "abc", "cab"], tokenizer, order=3)
    history = torch.tensor([tokenizer.encode("ab")])
    log_probs = lm.log_probs(history)[0]
    assert int(log_probs.argmax()) == tokenizer.index["c"]
    for token in (tokenizer.unk_id, tokenizer.blank_id, tokenizer.pad_id, tokenizer.bos_id):
        assert log_probs[token] == float("-inf")


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_build_token_lm_works_over_subword_units(kind):
    from paraformer_asr.data.tokenizer import build_tokenizer

    texts = ["turn the lights on", "turn the lights off", "turn the music on", "play the music"] * 3
    tokenizer = build_tokenizer(kind, texts, 30, with_blank=True)
    lm = build_token_lm(texts, tokenizer, order=3)
    assert lm.vocab_size == tokenizer.vocab_size
    log_probs = lm.log_probs(torch.tensor([tokenizer.encode("turn the")]))[0]
    assert torch.logsumexp(log_probs, 0).item() == pytest.approx(0.0, abs=1e-5)
    for token in (tokenizer.unk_id, tokenizer.blank_id, tokenizer.pad_id, tokenizer.bos_id):
        assert log_probs[token] == float("-inf")
    seen, shuffled = tokenizer.encode("turn the music on"), tokenizer.encode("on music the turn")
    assert lm.score_sequence(seen) > lm.score_sequence(shuffled)
