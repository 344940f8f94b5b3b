"""Character n-gram LM (interpolated Kneser-Ney): hand-computed values, a loop reference, normalisation, storage."""

import itertools
import math
from collections import Counter

import pytest
import torch

from paraformer_asr.decode.ngram_lm import TokenNgramLM
from paraformer_asr.errors import DataError

PAD, BOS, EOS, A, B, C = 0, 1, 2, 3, 4, 5
V = 6


def test_bigram_matches_hand_computed_values():
    # padded: [bos a b eos], [bos a a b eos] -> bigrams (bos,a):2 (a,b):2 (b,eos):2 (a,a):1
    lm = TokenNgramLM(order=2, vocab_size=V, bos_id=BOS, eos_id=EOS, pad_id=PAD).fit([[A, B], [A, A, B]])
    # unigram continuation counts: a has 2 left contexts (bos, a); b 1 (a); eos 1 (b); c 0 -> n1=2, n2=1
    d1 = 2 / (2 + 2 * 1)
    # bigram counts 2, 2, 2, 1 -> n1=1, n2=3
    d2 = 1 / (1 + 2 * 3)
    assert lm.discounts == pytest.approx([d1, d2])
    uniform = 1 / 4  # predictable: eos, a, b, c
    p1 = {A: (2 - d1) / 4 + d1 * 3 / 4 * uniform, B: (1 - d1) / 4 + d1 * 3 / 4 * uniform,
          EOS: (1 - d1) / 4 + d1 * 3 / 4 * uniform, C: d1 * 3 / 4 * uniform}
    expected_after_a = {B: (2 - d2) / 3 + d2 * 2 / 3 * p1[B], A: (1 - d2) / 3 + d2 * 2 / 3 * p1[A],
                        EOS: d2 * 2 / 3 * p1[EOS], C: d2 * 2 / 3 * p1[C]}
    after_a = lm.log_probs(torch.tensor([[A]])).exp()[0]
    for token, probability in expected_after_a.items():
        assert after_a[token].item() == pytest.approx(probability, rel=1e-6)
    after_c = lm.log_probs(torch.tensor([[C]])).exp()[0]  # never-seen history: the unigram distribution
    for token, probability in p1.items():
        assert after_c[token].item() == pytest.approx(probability, rel=1e-6)
    start = lm.log_probs(torch.zeros(1, 0, dtype=torch.long)).exp()[0]  # sentence start: only (bos, a) seen
    assert start[A].item() == pytest.approx((2 - d2) / 2 + d2 / 2 * p1[A], rel=1e-6)
    assert lm.score_sequence([A, B]) == pytest.approx(
        math.log(start[A].item()) + math.log(after_a[B].item())
        + math.log(lm.log_probs(torch.tensor([[B]])).exp()[0, EOS].item()), rel=1e-6)


def reference_kneser_ney(sequences, order, predictable):
    """Plain-dict interpolated Kneser-Ney, straight from the definition, one probability at a time."""
    counts = Counter()
    for sequence in sequences:
        padded = [BOS] * (order - 1) + list(sequence) + [EOS]
        for i in range(order - 1, len(padded)):
            for m in range(1, order + 1):
                counts[tuple(padded[i - m + 1 : i + 1])] += 1

    def adjusted(gram):
        if len(gram) == order or gram[0] == BOS:
            return counts[gram]
        return sum(1 for x in range(V) if counts[(x, *gram)] > 0)

    discounts = {}
    for m in range(1, order + 1):
        histogram = Counter(adjusted(g) for g in counts if len(g) == m)
        n1, n2 = histogram[1], histogram[2]
        discounts[m] = n1 / (n1 + 2 * n2) if n1 and n2 else 0.5

    def probability(token, context):
        if token not in predictable:
            return 0.0
        if context is None:
            return 1 / len(predictable)
        lower = probability(token, context[1:] if context else None)
        row = [adjusted((*context, w)) for w in range(V)]
        total = sum(row)
        if total == 0:
            return lower
        d = discounts[len(context) + 1]
        return max(row[token] - d, 0) / total + d * sum(1 for r in row if r > 0) / total * lower

    return probability


@pytest.mark.parametrize("order", [1, 2, 3, 4, 6])
def test_matches_loop_reference_on_every_history(order):
    generator = torch.Generator().manual_seed(order)
    sequences = [torch.randint(A, C + 1, (int(n),), generator=generator).tolist() for n in (1, 2, 3, 5, 4, 2, 6, 1)]
    sequences[0] = [B]  # C stays rarer than the others
    lm = TokenNgramLM(order, V, BOS, EOS, PAD).fit(sequences)
    reference = reference_kneser_ney(sequences, order, predictable={EOS, A, B, C})
    real_tokens = [EOS, A, B, C]
    histories = [list(h) for h in itertools.product([BOS, A, B, C], repeat=max(order - 1, 0))]
    histories = [h for h in histories if h[: h.count(BOS)] == [BOS] * h.count(BOS)]  # bos only as a prefix
    got = lm.log_probs(torch.tensor(histories, dtype=torch.long).reshape(len(histories), max(order - 1, 0))).exp()
    for row, history in enumerate(histories):
        context = tuple(history)
        for token in range(V):
            expected = reference(token, context) if token in real_tokens else 0.0
            assert got[row, token].item() == pytest.approx(expected, rel=1e-5, abs=1e-7), (history, token)


@pytest.mark.parametrize("order", [2, 3, 5])
def test_distributions_normalise_over_predictable_tokens(order):
    generator = torch.Generator().manual_seed(0)
    vocab = 12
    exclude = [3]  # e.g. a CTC blank
    sequences = [torch.randint(4, vocab, (int(n),), generator=generator).tolist()
                 for n in torch.randint(1, 9, (40,), generator=generator)]
    lm = TokenNgramLM(order, vocab, bos_id=1, eos_id=2, pad_id=0, exclude_ids=exclude).fit(sequences)
    histories = torch.randint(4, vocab, (64, 7), generator=generator)
    histories[:8, :5] = 0  # left padding = sentence start
    histories[8:16, :3] = 1  # explicit bos = sentence start
    log_probs = lm.log_probs(histories)
    assert log_probs.shape == (64, vocab) and log_probs.dtype == torch.float32
    assert torch.isneginf(log_probs[:, [0, 1, 3]]).all()
    torch.testing.assert_close(torch.logsumexp(log_probs, dim=1), torch.zeros(64), atol=1e-5, rtol=0)
    padded = lm.log_probs(torch.tensor([[0, 0, 0, 0, 0, 5, 6]]))
    torch.testing.assert_close(padded, lm.log_probs(torch.tensor([[5, 6]])))
    torch.testing.assert_close(padded, lm.log_probs(torch.tensor([[1, 5, 6]])))


def test_frequent_continuation_is_preferred_and_sequences_score_accordingly():
    lm = TokenNgramLM(3, V, BOS, EOS, PAD).fit([[A, B, C]] * 20 + [[A, C, B]])
    assert lm.log_probs(torch.tensor([[A]])).argmax().item() == B
    assert lm.score_sequence([A, B, C]) > lm.score_sequence([A, C, B]) > lm.score_sequence([C, C, C])


def test_dict_round_trip_plain_types():
    lm = TokenNgramLM(3, V, BOS, EOS, PAD).fit([[A, B], [B, C, A, A], [C]])
    state = lm.to_dict()

    def plain(value):
        if isinstance(value, dict):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        if isinstance(value, list):
            return all(plain(v) for v in value)
        return isinstance(value, (int, float, str))

    assert plain(state)
    restored = TokenNgramLM.from_dict(state)
    histories = torch.tensor([[A, B], [C, C], [PAD, PAD], [B, A]])
    torch.testing.assert_close(restored.log_probs(histories), lm.log_probs(histories), atol=0, rtol=0)
    with pytest.raises(DataError, match="invalid n-gram"):
        TokenNgramLM.from_dict({**state, "ngram_counts": []})


def test_errors():
    with pytest.raises(DataError, match="zero sequences"):
        TokenNgramLM(2, V, BOS, EOS, PAD).fit([])
    with pytest.raises(ValueError, match="cannot occur"):
        TokenNgramLM(2, V, BOS, EOS, PAD).fit([[A, BOS]])
    with pytest.raises(RuntimeError, match="not fitted"):
        TokenNgramLM(2, V, BOS, EOS, PAD).log_probs(torch.tensor([[A]]))
