"""The full Paraformer: loss terms, gradients, glancing, decoding contracts; every model type overfits one batch."""

import itertools

import pytest
import torch

from paraformer_asr.config import config_from_dict
from paraformer_asr.data.batching import Collator
from paraformer_asr.decode import factorized_beam_search
from paraformer_asr.factory import build_model
from paraformer_asr.models.glancing import glancing_mix

from asr_helpers import overfit, tiny_raw_config


@pytest.mark.parametrize("fsmn_kernel", [0, 3], ids=["self-attention", "fsmn"])
def test_loss_terms_and_gradients_reach_every_parameter(tiny_data, tiny_batch, fsmn_kernel):
    raw = tiny_raw_config()
    raw["model"].update({"ctc_weight": 0.3, "glancing_ratio": 1.0, "dropout": 0.0,
                         "decoder_fsmn_kernel": fsmn_kernel})
    cfg = config_from_dict(raw)
    from paraformer_asr.data.setup import build_data

    data = build_data(cfg)
    assert data.tokenizer.blank_id is not None
    torch.manual_seed(0)
    model = build_model(cfg, data.input_dim, data.tokenizer).train()
    batch = Collator(data.tokenizer.pad_id)([data.train[i] for i in range(6)])
    out = model.compute_loss(batch)
    assert set(out.terms) == {"ce", "quantity", "ctc"}
    expected = out.terms["ce"] + cfg.model.quantity_weight * out.terms["quantity"] + 0.3 * out.terms["ctc"]
    assert torch.allclose(out.total.detach(), expected)
    assert out.logits.shape == (6, batch.tokens.shape[1], data.tokenizer.vocab_size)
    out.total.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or float(p.grad.abs().sum()) == 0.0]
    assert missing == []


def test_glancing_replaces_round_ratio_times_wrong_count():
    acoustic, target = torch.zeros(3, 6, 4), torch.ones(3, 6, 4)
    targets = torch.arange(18).view(3, 6)
    first = targets.clone()
    first[0, :4] = -1  # 4 wrong
    first[1, :] = -1  # 6 wrong but only 3 valid positions
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3, [True] * 6])
    torch.manual_seed(0)
    mixed, replaced = glancing_mix(acoustic, target, first, targets, mask, ratio=0.5)
    assert replaced.sum(1).tolist() == [2, 2, 0]  # round(0.5*4), round(0.5*3), 0
    assert not bool((replaced & ~mask).any())
    assert torch.equal(mixed[replaced], target[replaced]) and float(mixed[~replaced].abs().sum()) == 0.0


def test_decoding_contracts(tiny_cfg, tiny_data, tiny_batch):
    torch.manual_seed(0)
    model = build_model(tiny_cfg, tiny_data.input_dim, tiny_data.tokenizer).eval()
    tokens, lengths = model.greedy_decode(tiny_batch.features, tiny_batch.feat_mask)
    assert tokens.dtype == torch.long and tokens.shape == (6, int(lengths.max()))
    beams, scores, beam_lengths = model.beam_search(tiny_batch.features, tiny_batch.feat_mask, beam_size=3)
    assert beams.shape == (6, 3, tokens.shape[1]) and scores.shape == (6, 3) and beam_lengths.shape == (6, 3)
    assert bool((scores <= 0).all()) and bool((scores[:, :-1] >= scores[:, 1:]).all())
    assert torch.equal(beams[:, 0], tokens)  # the best beam of a factorised model is the argmax path
    one, _, _ = model.beam_search(tiny_batch.features, tiny_batch.feat_mask, beam_size=1)
    assert torch.equal(one[:, 0], tokens)


def test_factorised_beam_search_is_exact_k_best():
    torch.manual_seed(1)
    log_probs = torch.log_softmax(torch.randn(2, 3, 4), dim=-1)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    tokens, scores = factorized_beam_search(log_probs, mask, beam_size=5, pad_id=0)
    for row in range(2):
        length = int(mask[row].sum())
        every = sorted((sum(float(log_probs[row, i, s]) for i, s in enumerate(seq)), seq)
                       for seq in itertools.product(range(4), repeat=length))[::-1][:5]
        assert torch.allclose(scores[row], torch.tensor([s for s, _ in every]), atol=1e-5)
        assert [tuple(t[:length]) for t in tokens[row].tolist()] == [seq for _, seq in every]
        assert bool((tokens[row, :, length:] == 0).all())


@pytest.mark.slow
@pytest.mark.parametrize("model_type, steps, final_ratio", [("paraformer", 150, 0.1), ("transformer_ar", 120, 0.05)])
def test_overfitting_one_batch_drives_loss_down_and_decodes_it_exactly(tiny_data, model_type, steps, final_ratio):
    raw = tiny_raw_config()
    raw["model"].update({"type": model_type, "dropout": 0.0, "glancing_ratio": 0.0, "label_smoothing": 0.0})
    cfg = config_from_dict(raw)
    torch.manual_seed(0)
    model = build_model(cfg, tiny_data.input_dim, tiny_data.tokenizer)
    batch = Collator(tiny_data.tokenizer.pad_id)([tiny_data.train[i] for i in range(4)])
    losses = overfit(model, batch, steps=steps)
    assert losses[-1] < final_ratio * losses[0]
    model.eval()
    tokens, lengths = model.greedy_decode(batch.features, batch.feat_mask)
    assert lengths.tolist() == batch.token_lengths.tolist()
    hyps = [tiny_data.tokenizer.decode(t[:n]) for t, n in zip(tokens, lengths.tolist())]
    assert hyps == batch.texts


def test_decoding_does_not_depend_on_batch_padding(tiny_cfg, tiny_data):
    torch.manual_seed(0)
    model = build_model(tiny_cfg, tiny_data.input_dim, tiny_data.tokenizer).eval()
    collate = Collator(tiny_data.tokenizer.pad_id)
    items = [tiny_data.train[i] for i in range(5)]
    batch = collate(items)
    tokens, lengths = model.greedy_decode(batch.features, batch.feat_mask)
    log_probs, _ = model.posteriors(batch.features, batch.feat_mask)
    for row, item in enumerate(items):
        alone = collate([item])
        one_tokens, one_length = model.greedy_decode(alone.features, alone.feat_mask)
        one_log_probs, _ = model.posteriors(alone.features, alone.feat_mask)
        n = int(lengths[row])
        assert int(one_length[0]) == n and torch.equal(one_tokens[0, :n], tokens[row, :n])
        assert torch.allclose(one_log_probs[0, :n], log_probs[row, :n], atol=1e-4)


def test_decoding_handles_utterances_with_no_predicted_token(tiny_cfg, tiny_data, tiny_batch):
    torch.manual_seed(0)
    model = build_model(tiny_cfg, tiny_data.input_dim, tiny_data.tokenizer).eval()
    with torch.no_grad():
        model.predictor.proj.bias.fill_(-30.0)  # alphas ~0: nothing fires
    tokens, lengths = model.greedy_decode(tiny_batch.features, tiny_batch.feat_mask)
    assert tokens.shape == (6, 0) and lengths.tolist() == [0] * 6
    beams, scores, _ = model.beam_search(tiny_batch.features, tiny_batch.feat_mask, beam_size=2)
    assert beams.shape == (6, 2, 0) and scores[:, 0].eq(0).all() and torch.isinf(scores[:, 1]).all()
