"""The autoregressive baseline: loss contract, causal masking, padding invariance, cached decode_step,
gradients (overfitting one batch: test_asr_model.py, for every model type)."""

import pytest
import torch

from paraformer_asr.config import config_from_dict
from paraformer_asr.data.batching import Collator
from paraformer_asr.data.setup import build_data
from paraformer_asr.factory import build_model
from paraformer_asr.models.ar_model import TransformerAR

from asr_helpers import tiny_raw_config


def ar_config(**model_overrides):
    raw = tiny_raw_config()
    raw["model"].update({"type": "transformer_ar", **model_overrides})
    return config_from_dict(raw)


@pytest.fixture
def ar_setup():
    """(model in eval mode, tokenizer, batch of 6 toy utterances) without dropout."""
    cfg = ar_config(dropout=0.0)
    data = build_data(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, data.input_dim, data.tokenizer).eval()
    batch = Collator(data.tokenizer.pad_id)([data.train[i] for i in range(6)])
    return model, data.tokenizer, batch


def test_factory_builds_the_ar_model_and_loss_contract(ar_setup):
    model, tokenizer, batch = ar_setup
    assert isinstance(model, TransformerAR)
    out = model.compute_loss(batch)
    assert set(out.terms) == {"ce"} and out.cif is None
    assert out.logits.shape == (6, batch.tokens.shape[1] + 1, tokenizer.vocab_size)
    assert out.total.dim() == 0 and bool(torch.isfinite(out.total))


def test_teacher_forcing_inputs_targets_and_mask(ar_setup):
    model, tokenizer, _ = ar_setup
    bos, eos, pad = tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id
    tokens = torch.tensor([[7, 8, 9], [7, pad, pad]])
    decoder_in, targets, mask = model.teacher_forcing_io(tokens, torch.tensor([3, 1]))
    assert decoder_in.tolist() == [[bos, 7, 8, 9], [bos, 7, pad, pad]]
    assert targets.tolist() == [[7, 8, 9, eos], [7, eos, pad, pad]]
    assert mask.tolist() == [[True] * 4, [True, True, False, False]]


def test_ctc_term_and_gradients_reach_every_parameter():
    cfg = ar_config(ctc_weight=0.3, dropout=0.0)
    data = build_data(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, data.input_dim, data.tokenizer).train()
    batch = Collator(data.tokenizer.pad_id)([data.train[i] for i in range(6)])
    out = model.compute_loss(batch)
    assert set(out.terms) == {"ce", "ctc"}
    assert torch.allclose(out.total.detach(), out.terms["ce"] + 0.3 * out.terms["ctc"])
    out.total.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or float(p.grad.abs().sum()) == 0.0]
    assert missing == []


def test_causal_mask_future_tokens_do_not_change_earlier_logits(ar_setup):
    model, _, batch = ar_setup
    memory, memory_mask = model.encode(batch.features, batch.feat_mask)
    torch.manual_seed(1)
    tokens = torch.randint(5, model.vocab_size, (6, 7))
    mask = torch.ones(6, 7, dtype=torch.bool)
    changed = tokens.clone()
    changed[:, 4:] = (changed[:, 4:] + 1 - 5) % (model.vocab_size - 5) + 5
    with torch.no_grad():
        before = model.decoder(tokens, mask, memory, memory_mask)
        after = model.decoder(changed, mask, memory, memory_mask)
    assert torch.allclose(before[:, :4], after[:, :4], atol=1e-6)
    assert not torch.allclose(before[:, 4:], after[:, 4:], atol=1e-3)


def test_decoder_padding_invariance(ar_setup):
    """Extra token padding (any ids) and extra memory padding (any values) leave valid logits unchanged."""
    model, _, batch = ar_setup
    memory, memory_mask = model.encode(batch.features, batch.feat_mask)
    decoder_in, _, token_mask = model.teacher_forcing_io(batch.tokens, batch.token_lengths)
    with torch.no_grad():
        reference = model.decoder(decoder_in, token_mask, memory, memory_mask)
        torch.manual_seed(2)
        padded_mask = torch.cat([token_mask, torch.zeros(6, 3, dtype=torch.bool)], dim=1)
        padded_in = torch.cat([decoder_in, torch.zeros(6, 3, dtype=torch.long)], dim=1)
        padded_in = torch.where(padded_mask, padded_in, torch.randint(0, model.vocab_size, padded_in.shape))
        padded_memory_mask = torch.cat([memory_mask, torch.zeros(6, 4, dtype=torch.bool)], dim=1)
        padded_memory = torch.cat([memory, torch.zeros(6, 4, memory.shape[2])], dim=1)
        noise = 5 * torch.randn(padded_memory.shape)
        padded_memory = torch.where(padded_memory_mask.unsqueeze(-1), padded_memory, noise)
        padded = model.decoder(padded_in, padded_mask, padded_memory, padded_memory_mask)
    valid = token_mask
    assert torch.allclose(reference[valid], padded[:, : reference.shape[1]][valid], atol=1e-5)


def test_cached_decode_step_equals_teacher_forced_forward_at_every_step(ar_setup):
    model, _, batch = ar_setup
    with torch.no_grad():
        memory, memory_mask = model.encode(batch.features, batch.feat_mask)
        decoder_in, _, mask = model.teacher_forcing_io(batch.tokens, batch.token_lengths)
        full = torch.log_softmax(model.decoder(decoder_in, mask, memory, memory_mask), dim=-1)  # [B, S+1, V]
        cache = None
        for step in range(decoder_in.shape[1]):
            log_probs, cache = model.decode_step(memory, decoder_in[:, : step + 1], step, cache, memory_mask)
            assert log_probs.shape == (6, model.vocab_size) and cache.length == step + 1
            valid = mask[:, step]
            assert torch.allclose(log_probs[valid], full[:, step][valid], atol=1e-5), step


def test_each_cached_step_projects_one_query_and_reuses_cross_attention_keys(ar_setup):
    model, _, batch = ar_setup
    calls = {"self_query": [], "self_keys": [], "cross_kv": 0}
    for block in model.decoder.blocks:
        self_attn, cross_attn = block.self_attn, block.cross_attn
        project_query, attend, project_kv = self_attn.project_query, self_attn.attend, cross_attn.project_key_value

        def counting_query(query, _inner=project_query):
            calls["self_query"].append(query.shape[1])
            return _inner(query)

        def counting_attend(q, k, v, *args, _inner=attend, **kwargs):
            calls["self_keys"].append(k.shape[2])
            return _inner(q, k, v, *args, **kwargs)

        def counting_kv(key, value, _inner=project_kv):
            calls["cross_kv"] += 1
            return _inner(key, value)

        self_attn.project_query, self_attn.attend = counting_query, counting_attend
        cross_attn.project_key_value = counting_kv
    layers = len(model.decoder.blocks)
    with torch.no_grad():
        memory, memory_mask = model.encode(batch.features, batch.feat_mask)
        tokens = torch.full((6, 1), model.bos_id)
        cache = None
        for step in range(5):
            _, cache = model.decode_step(memory, tokens, step, cache, memory_mask)
            tokens = torch.cat([tokens, torch.full((6, 1), 7)], dim=1)
    assert calls["self_query"] == [1] * (5 * layers)  # one new query per step and layer
    assert calls["self_keys"] == [step + 1 for step in range(5) for _ in range(layers)]
    assert calls["cross_kv"] == layers  # encoder keys/values projected once, at step 0


def test_decode_step_rejects_a_cache_of_the_wrong_length(ar_setup):
    model, _, batch = ar_setup
    with torch.no_grad():
        memory, memory_mask = model.encode(batch.features, batch.feat_mask)
        _, cache = model.decode_step(memory, torch.full((6, 1), model.bos_id), 0, None, memory_mask)
        with pytest.raises(ValueError, match="cache holds 1 tokens but step is 2"):
            model.decode_step(memory, torch.full((6, 3), model.bos_id), 2, cache)
