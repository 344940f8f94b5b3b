"""Batched greedy and beam search of the autoregressive baseline: contracts, loop references,
eos / max-length handling, length normalisation and n-gram LM shallow fusion."""

import math
import zlib

import pytest
import torch

from paraformer_asr.checks import lengths_to_mask
from paraformer_asr.config import config_from_dict
from paraformer_asr.data.batching import Collator
from paraformer_asr.data.setup import build_data
from paraformer_asr.decode.ar_search import ar_beam_search, ar_greedy_search, max_output_lengths
from paraformer_asr.decode.ngram_lm import TokenNgramLM
from paraformer_asr.factory import build_model

from asr_helpers import overfit, tiny_raw_config
from asr_reference import exhaustive_ar_search, loop_ctc_log_likelihood

PAD, BOS, EOS, A, B = 0, 1, 2, 4, 5  # scripted vocabulary of 6 ids (3 = unk)


@pytest.fixture(scope="module")
def ar_model_and_batch():
    raw = tiny_raw_config()
    raw["model"].update({"type": "transformer_ar", "dropout": 0.0, "ctc_weight": 0.3})
    cfg = config_from_dict(raw)
    data = build_data(cfg)
    torch.manual_seed(3)
    model = build_model(cfg, data.input_dim, data.tokenizer)
    batch = Collator(data.tokenizer.pad_id)([data.train[i] for i in range(5)])
    overfit(model, batch, steps=12, lr=6e-3)  # partly trained: hypotheses of different lengths, several plausible beams
    return model.eval(), batch


def loop_greedy_reference(model, encoder_out, enc_mask, max_length_ratio):
    """One utterance at a time, the whole prefix re-decoded (no cache) at every step."""
    results = []
    for b in range(encoder_out.shape[0]):
        frames = int(enc_mask[b].sum())
        memory, memory_mask = encoder_out[b:b + 1, :frames], enc_mask[b:b + 1, :frames]
        limit = max(1, math.ceil(frames * max_length_ratio))
        prefix = [model.bos_id]
        while True:
            tokens = torch.tensor([prefix])
            logits = model.decoder(tokens, torch.ones_like(tokens, dtype=torch.bool), memory, memory_mask)[0, -1]
            logits[model.never_emitted] = float("-inf")
            token = model.eos_id if len(prefix) - 1 >= limit else int(logits.argmax())
            if token == model.eos_id:
                break
            prefix.append(token)
        results.append(prefix[1:])
    return results


def test_batched_greedy_equals_the_loop_reference(ar_model_and_batch):
    model, batch = ar_model_and_batch
    with torch.no_grad():
        encoder_out, enc_mask = model.encode(batch.features, batch.feat_mask)
        for ratio in (1.0, 0.4):
            tokens, lengths = ar_greedy_search(model, encoder_out, enc_mask, max_length_ratio=ratio)
            reference = loop_greedy_reference(model, encoder_out, enc_mask, ratio)
            assert lengths.tolist() == [len(r) for r in reference]
            assert tokens.shape == (5, max(len(r) for r in reference)) and tokens.dtype == torch.long
            assert [tokens[b, : lengths[b]].tolist() for b in range(5)] == reference
            assert bool((tokens[~lengths_to_mask(lengths, tokens.shape[1])] == model.pad_id).all())


def test_greedy_equals_beam_search_with_beam_size_one(ar_model_and_batch):
    model, batch = ar_model_and_batch
    tokens, lengths = model.greedy_decode(batch.features, batch.feat_mask)
    assert len(set(lengths.tolist())) > 1  # the case covers hypotheses of different lengths
    beams, scores, beam_lengths = model.beam_search(batch.features, batch.feat_mask, beam_size=1,
                                                    length_penalty=0.0)  # greedy's first eos: nothing longer beats it
    assert beams.shape == (5, 1, tokens.shape[1]) and scores.shape == (5, 1)
    assert torch.equal(beams[:, 0], tokens) and torch.equal(beam_lengths[:, 0], lengths)


def test_beam_search_contract_sorted_finite_scores_and_valid_tokens(ar_model_and_batch):
    model, batch = ar_model_and_batch
    beams, scores, lengths = model.beam_search(batch.features, batch.feat_mask, beam_size=4)
    assert beams.shape[:2] == (5, 4) and scores.shape == (5, 4) and lengths.shape == (5, 4)
    assert beams.shape[2] == int(lengths.max())
    assert bool(torch.isfinite(scores).all()) and bool((scores <= 0).all())
    assert bool((scores[:, :-1] >= scores[:, 1:]).all())
    with torch.no_grad():
        _, enc_mask = model.encode(batch.features, batch.feat_mask)
    assert bool((lengths <= max_output_lengths(enc_mask, 1.0).unsqueeze(1)).all())
    valid = torch.arange(beams.shape[2]).view(1, 1, -1) < lengths.unsqueeze(-1)
    assert bool((beams[~valid] == model.pad_id).all())
    assert not bool(torch.isin(beams[valid], torch.tensor(model.never_emitted + [model.eos_id])).any())
    for b in range(5):  # the beams of one utterance are distinct hypotheses
        hyps = {tuple(beams[b, k, : lengths[b, k]].tolist()) for k in range(4)}
        assert len(hyps) == 4


def test_batched_beam_search_equals_one_utterance_at_a_time(ar_model_and_batch):
    model, batch = ar_model_and_batch
    beams, scores, lengths = model.beam_search(batch.features, batch.feat_mask, beam_size=3)
    for b in range(5):
        frames = int(batch.feat_lengths[b])
        one = model.beam_search(batch.features[b:b + 1, :frames], batch.feat_mask[b:b + 1, :frames], beam_size=3)
        assert torch.equal(one[2][0], lengths[b])
        assert torch.allclose(one[1][0], scores[b], atol=1e-5)
        assert torch.equal(one[0][0], beams[b, :, : one[0].shape[2]])


class ScriptedCache:
    def __init__(self, length):
        self.length = length

    def reorder_rows(self, rows):
        return self


class ScriptedModel:
    """Next-token log-probs depend only on the step: table [steps, V] (the last row repeats)."""

    bos_id, eos_id, pad_id, never_emitted = BOS, EOS, PAD, [PAD, BOS]

    def __init__(self, probs):
        self.table = torch.tensor(probs, dtype=torch.float32).clamp(min=1e-9).log()

    def decode_step(self, encoder_out, prev_tokens, step, cache, enc_mask):
        assert prev_tokens.shape[1] == step + 1 and (cache is None or cache.length == step)
        row = self.table[min(step, self.table.shape[0] - 1)]
        return row.expand(prev_tokens.shape[0], -1), ScriptedCache(step + 1)


def scripted_inputs(frames):
    encoder_out = torch.zeros(len(frames), max(frames), 4)
    return encoder_out, lengths_to_mask(torch.tensor(frames), max(frames))


class PrefixScriptedModel:
    """Next-token log-probs that depend on the utterance (encoder_out[b, 0, 0]) and the whole prefix: a fixed random
    softmax over eos, unk, a and b per (utterance, prefix), drawn from a generator seeded by both, so that every
    search reads the same table whatever order it asks in; pad and bos -inf."""

    bos_id, eos_id, pad_id, never_emitted = BOS, EOS, PAD, [PAD, BOS]

    def __init__(self, seed: int, sharpness: float = 1.5):
        self.seed, self.sharpness = seed, sharpness

    def next_log_probs(self, utterance: int, prefix: list[int]) -> torch.Tensor:
        generator = torch.Generator().manual_seed(zlib.crc32(repr((self.seed, utterance, prefix)).encode()))
        logits = torch.full((6,), float("-inf"))
        logits[[EOS, 3, A, B]] = torch.randn(4, generator=generator) * self.sharpness
        return logits.log_softmax(dim=0)

    def decode_step(self, encoder_out, prev_tokens, step, cache, enc_mask):
        rows = [self.next_log_probs(int(encoder_out[row, 0, 0]), prev_tokens[row, 1:].tolist())
                for row in range(prev_tokens.shape[0])]
        return torch.stack(rows), ScriptedCache(step + 1)


def test_max_length_comes_from_the_encoder_length():
    model = ScriptedModel([[0, 0, 1e-6, 0, 0.6, 0.4]])  # eos is (almost) never chosen
    encoder_out, enc_mask = scripted_inputs([3, 5])
    for ratio, expected in ((1.0, [3, 5]), (0.5, [2, 3])):
        tokens, lengths = ar_greedy_search(model, encoder_out, enc_mask, max_length_ratio=ratio)
        assert lengths.tolist() == expected and tokens[0, : expected[0]].tolist() == [A] * expected[0]
        _, _, beam_lengths = ar_beam_search(model, encoder_out, enc_mask, beam_size=2, max_length_ratio=ratio)
        assert beam_lengths[:, 0].tolist() == expected


def test_length_normalisation_changes_the_ranking_by_the_documented_formula():
    # step 0: eos 0.45, a 0.55; step 1 (after 'a'): eos 0.5, a 0.3, b 0.2
    model = ScriptedModel([[0, 0, 0.45, 0, 0.55, 0], [0, 0, 0.5, 0, 0.3, 0.2]])
    encoder_out, enc_mask = scripted_inputs([4])
    empty, one_a = math.log(0.45), math.log(0.55) + math.log(0.5)
    tokens, scores, lengths = ar_beam_search(model, encoder_out, enc_mask, beam_size=2, length_penalty=0.0)
    assert lengths[0].tolist() == [0, 1] and tokens[0, 1, 0] == A
    assert torch.allclose(scores[0], torch.tensor([empty, one_a]), atol=1e-5)
    tokens, scores, lengths = ar_beam_search(model, encoder_out, enc_mask, beam_size=2, length_penalty=1.0)
    assert lengths[0].tolist() == [1, 0] and tokens[0, 0, 0] == A
    assert torch.allclose(scores[0], torch.tensor([one_a / 2, empty]), atol=1e-5)


def test_lm_fusion_weight_zero_is_plain_search_and_a_positive_weight_follows_the_lm():
    # the acoustic side slightly prefers 'a' then eos; the LM has mostly seen 'b'
    model = ScriptedModel([[0, 0, 0.02, 0, 0.5, 0.48], [0, 0, 0.9, 0, 0.05, 0.05]])
    lm = TokenNgramLM(order=2, vocab_size=6, bos_id=BOS, eos_id=EOS, pad_id=PAD, exclude_ids=[3])
    lm.fit([[B]] * 10 + [[A]])
    encoder_out, enc_mask = scripted_inputs([4, 4])
    plain = ar_beam_search(model, encoder_out, enc_mask, beam_size=3)
    zero = ar_beam_search(model, encoder_out, enc_mask, beam_size=3, lm=lm, lm_weight=0.0)
    for got, expected in zip(zero, plain):
        assert torch.equal(got, expected)
    assert plain[0][:, 0, 0].tolist() == [A, A]
    fused = ar_beam_search(model, encoder_out, enc_mask, beam_size=3, lm=lm, lm_weight=0.5)
    assert fused[0][:, 0].tolist() == [[B], [B]] and fused[2][:, 0].tolist() == [1, 1]
    greedy_plain, _ = ar_greedy_search(model, encoder_out, enc_mask)
    greedy_fused, _ = ar_greedy_search(model, encoder_out, enc_mask, lm=lm, lm_weight=0.5)
    assert greedy_plain.tolist() == [[A], [A]] and greedy_fused.tolist() == [[B], [B]]
    with pytest.raises(ValueError, match="lm_weight"):
        ar_beam_search(model, encoder_out, enc_mask, beam_size=2, lm=lm, lm_weight=-1.0)


def test_early_weak_endings_do_not_stop_the_search_before_the_best_hypothesis_ends():
    # every step until the 4th: 'a' 0.9, eos 0.05, 'b' 0.05 (an eos ranks second each time); then eos 0.9
    confident_a, confident_eos = [0, 0, 0.05, 0, 0.9, 0.05], [0, 0, 0.9, 0, 0.05, 0.05]
    model = ScriptedModel([confident_a] * 3 + [confident_eos])
    encoder_out, enc_mask = scripted_inputs([8])
    tokens, scores, lengths = ar_beam_search(model, encoder_out, enc_mask, beam_size=2)
    assert lengths[0, 0] == 3 and tokens[0, 0].tolist() == [A, A, A]
    assert torch.allclose(scores[0, 0], torch.tensor(4 * math.log(0.9) / 4), atol=1e-5)
    greedy, greedy_lengths = ar_greedy_search(model, encoder_out, enc_mask)
    assert greedy.tolist() == [[A, A, A]] and greedy_lengths.tolist() == [3]


@pytest.mark.parametrize("length_penalty", [1.0, 0.5])
def test_the_ctc_head_ranks_the_beams_again_by_the_documented_formula(ar_model_and_batch, length_penalty):
    """ctc_score_weight w: each finished beam's score + w x its CTC log-likelihood (the forward algorithm written
    out, asr_reference.py) / its token count ** length_penalty, best first; the tokens follow their scores."""
    model, batch = ar_model_and_batch
    with torch.no_grad():
        tokens, scores, lengths = model.beam_search(batch.features, batch.feat_mask, 3, length_penalty=length_penalty)
        again, again_scores, again_lengths = model.beam_search(batch.features, batch.feat_mask, 3,
                                                               ctc_score_weight=0.5, length_penalty=length_penalty)
        encoder_out, enc_mask = model.encode(batch.features, batch.feat_mask)
        ctc_log_probs = model.ctc(encoder_out)
    for b in range(tokens.shape[0]):
        frames = int(enc_mask[b].sum())
        expected = []
        for k in range(tokens.shape[1]):
            if not math.isfinite(float(scores[b, k])):
                continue
            hypothesis = tokens[b, k, :lengths[b, k]].tolist()
            ctc = loop_ctc_log_likelihood(ctc_log_probs[b, :frames], hypothesis, model.blank_id)
            expected.append((float(scores[b, k]) + 0.5 * ctc / max(len(hypothesis), 1) ** length_penalty, hypothesis))
        expected.sort(key=lambda pair: -pair[0])
        got = [(float(again_scores[b, k]), again[b, k, :again_lengths[b, k]].tolist())
               for k in range(len(expected))]
        assert [hypothesis for _, hypothesis in got] == [hypothesis for _, hypothesis in expected]
        assert [score for score, _ in got] == pytest.approx([score for score, _ in expected], abs=1e-4)
    with pytest.raises(ValueError, match="CTC head"):
        cfg = config_from_dict({**tiny_raw_config(), "model": {"type": "transformer_ar"}})
        ar_model = build_model(cfg, batch.features.shape[-1], build_data(cfg).tokenizer).eval()
        ar_model.beam_search(batch.features, batch.feat_mask, 2, ctc_score_weight=0.5)


def test_a_longer_hypothesis_that_wins_under_length_normalisation_is_found():
    """The search went on after the best extension is an eos: [a] ends first (-0.602 per step), but [a, a] scores
    better once divided by its length (-0.436), as exhaustive search finds."""
    model = ScriptedModel([[0, 0, 0.05, 0, 0.9, 0.05], [0, 0, 1 / 3, 1 / 6, 0.32, 0.18], [0, 0, 0.94, 0, 0.03, 0.03]])
    encoder_out, enc_mask = scripted_inputs([2])  # at most 2 tokens: 3 steps, the last one eos
    brute = exhaustive_ar_search(lambda prefix: model.table[len(prefix)], 2, EOS, [3, A, B], 1.0)
    assert brute[0][1] == [A, A] and brute[0][0] == pytest.approx(-0.436, abs=1e-3)
    assert dict((tuple(t), s) for s, t in brute)[(A,)] == pytest.approx(-0.602, abs=1e-3)
    tokens, scores, lengths = ar_beam_search(model, encoder_out, enc_mask, beam_size=4)
    assert tokens[0, 0, :lengths[0, 0]].tolist() == [A, A]
    assert float(scores[0, 0]) == pytest.approx(brute[0][0], abs=1e-5)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("length_penalty", [0.0, 0.5, 1.0, 2.0])
def test_a_beam_wide_enough_finds_what_exhaustive_search_finds(seed, length_penalty):
    """Random prefix tables, two utterances of different max lengths (3 and 2 tokens), a beam of 4 ** 3 (4 ids to
    emit, eos included, over 3 steps: every prefix and every eos extension is kept): the best hypothesis and its
    score are exhaustive search's, and every beam returned is a real hypothesis with the score exhaustive search
    gives it, best first, none twice. A narrow beam's are scored right too."""
    model = PrefixScriptedModel(seed)
    frames = [3, 2]
    encoder_out, enc_mask = scripted_inputs(frames)
    encoder_out[:, :, 0] = torch.arange(len(frames)).unsqueeze(1)  # the utterance the model reads
    for beam_size in (64, 2):
        tokens, scores, lengths = ar_beam_search(model, encoder_out, enc_mask, beam_size,
                                                 length_penalty=length_penalty)
        for b, max_length in enumerate(frames):
            brute = exhaustive_ar_search(lambda prefix: model.next_log_probs(b, prefix), max_length, EOS, [3, A, B],
                                         length_penalty)
            if beam_size == 64:
                assert tokens[b, 0, :lengths[b, 0]].tolist() == brute[0][1]
                assert float(scores[b, 0]) == pytest.approx(brute[0][0], abs=1e-5)
            by_tokens = {tuple(hypothesis): score for score, hypothesis in brute}
            found = [tuple(tokens[b, k, :lengths[b, k]].tolist()) for k in range(beam_size)
                     if math.isfinite(float(scores[b, k]))]
            assert len(found) == len(set(found)) >= 1 and scores[b].tolist() == sorted(scores[b].tolist(), reverse=True)
            assert scores[b, :len(found)].tolist() == pytest.approx([by_tokens[found_tokens] for found_tokens in found],
                                                                   abs=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_beam_one_is_greedy_without_a_length_penalty_and_never_scores_below_it_with_one(seed):
    model = PrefixScriptedModel(seed)
    encoder_out, enc_mask = scripted_inputs([4])
    greedy, greedy_lengths = ar_greedy_search(model, encoder_out, enc_mask)
    hypothesis = greedy[0, :greedy_lengths[0]].tolist()
    greedy_sum = sum(float(model.next_log_probs(0, hypothesis[:k])[token])
                     for k, token in enumerate(hypothesis + [EOS]))
    tokens, scores, lengths = ar_beam_search(model, encoder_out, enc_mask, beam_size=1, length_penalty=0.0)
    assert tokens[0, 0, :lengths[0, 0]].tolist() == hypothesis
    assert float(scores[0, 0]) == pytest.approx(greedy_sum, abs=1e-5)
    _, scores, _ = ar_beam_search(model, encoder_out, enc_mask, beam_size=1, length_penalty=1.0)
    assert float(scores[0, 0]) >= greedy_sum / (len(hypothesis) + 1) - 1e-6
