"""Loss and CIF numerics: fp32 predictor under autocast, length-normalised losses, the CTC combination, its
normalisation and warm-up, and the end-of-sentence fire (model.predictor_bias); each switch trains (gradients,
overfitting one batch). Gradients are checked for their values: against the loop CIF where the CIF integrates
(tests/asr_reference.py), else finite and non-zero for every parameter that should receive one."""

import pytest
import torch
from torch.nn.utils.rnn import pad_sequence

from paraformer_asr.checks import lengths_to_mask
from paraformer_asr.config import config_from_dict
from paraformer_asr.data.batching import Collator
from paraformer_asr.data.setup import build_data
from paraformer_asr.errors import ConfigError
from paraformer_asr.factory import build_model
from paraformer_asr.losses import ctc_loss, hybrid_loss_weights, quantity_loss
from paraformer_asr.models import cif as cif_module
from paraformer_asr.models.cif import CifPredictor, fire_frames
from paraformer_asr.models.glancing import glancing_mix

from asr_helpers import overfit, tiny_raw_config
from asr_reference import loop_cif_autograd

SWITCHES = {
    "length_normalized_loss": {"length_normalized_loss": True},
    "interpolate": {"ctc_combination": "interpolate", "ctc_weight": 0.3},
    "predictor_bias": {"predictor_bias": 1},
}


def _model(model_overrides: dict, model_type: str = "paraformer", train_mode: bool = True):
    raw = tiny_raw_config()
    raw["model"].update({"type": model_type, "dropout": 0.0, **model_overrides})
    cfg = config_from_dict(raw)
    data = build_data(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, data.input_dim, data.tokenizer)
    batch = Collator(data.tokenizer.pad_id)([data.train[i] for i in range(6)])
    return cfg, data, model.train(train_mode), batch


def without_a_useful_gradient(named_parameters) -> list[str]:
    """The names of the parameters whose gradient is missing, not finite, or zero everywhere."""
    return [name for name, p in named_parameters
            if p.grad is None or not bool(torch.isfinite(p.grad).all()) or not bool(p.grad.ne(0).any())]


def integrate_with_the_loop(hidden, alphas, num_tokens):
    """``cif_integrate``'s outputs computed by the loop CIF, one frame at a time (``loop_cif_autograd``), so that a
    model can be run with it in place of the vectorised one: embeddings [B, N, D] (zeros past each count),
    token_mask [B, N], fire_frames [B, N] (an index, without gradient)."""
    embeddings = pad_sequence(loop_cif_autograd(hidden, alphas, num_tokens), batch_first=True)  # [B, N, D]
    token_mask = lengths_to_mask(num_tokens, embeddings.shape[1])
    return embeddings, token_mask, fire_frames(alphas, token_mask)


def parameter_gradients(model, batch, seed: int = 1) -> dict[str, torch.Tensor]:
    """Every parameter's gradient of ``model.compute_loss(batch).total``, the glancing draw seeded with ``seed``."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    model.compute_loss(batch).total.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_predictor_sums_alphas_in_float32_under_bf16_autocast():
    torch.manual_seed(0)
    predictor = CifPredictor(16)
    hidden = torch.randn(2, 400, 16)
    mask = lengths_to_mask(torch.tensor([400, 300]))
    with torch.no_grad():
        predictor.proj.weight.mul_(0.01)
        predictor.proj.bias.fill_(-0.466)  # alpha ~0.386 a frame: a sum of about 154.3 over 400 frames
    with torch.no_grad():
        reference = predictor(hidden, mask)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cif = predictor(hidden.bfloat16(), mask)
    assert cif.alphas.dtype == cif.alpha_sum.dtype == torch.float32
    assert cif.embeddings.dtype == torch.bfloat16  # the decoder gets the autocast dtype, as the encoder gave it
    total = float(cif.alpha_sum[0])
    assert 150 < total < 160 and abs(total - round(total)) > 0.05  # sub-token precision is kept
    assert abs(total - float(reference.alpha_sum[0])) < 0.05  # only the bf16 input differs from the fp32 run
    assert float(cif.alphas.bfloat16().sum(dim=1)[0]) == round(total)  # what a bf16 sum would have given


def test_model_under_autocast_trains_with_float32_quantity_term():
    _, _, model, batch = _model({})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model.compute_loss(batch)
    assert out.cif.alpha_sum.dtype == torch.float32 and out.terms["quantity"].dtype == torch.float32
    assert out.cif.embeddings.dtype == torch.bfloat16 and torch.isfinite(out.total)
    out.total.backward()
    assert without_a_useful_gradient(model.named_parameters()) == []


def test_quantity_loss_per_utterance_or_per_target_token():
    alpha_sum, targets = torch.tensor([3.5, 5.0]), torch.tensor([3, 6])
    assert float(quantity_loss(alpha_sum, targets)) == pytest.approx((0.5 + 1.0) / 2)
    assert float(quantity_loss(alpha_sum, targets, length_normalized=True)) == pytest.approx((0.5 + 1.0) / 9)


def test_hybrid_weights_and_config_checks():
    assert hybrid_loss_weights(0.3, "add") == (1.0, 0.3)
    assert hybrid_loss_weights(0.3, "interpolate") == (pytest.approx(0.7), 0.3)
    assert hybrid_loss_weights(0.0, "interpolate") == (1.0, 0.0)
    raw = tiny_raw_config()
    raw["model"].update({"ctc_combination": "interpolate", "ctc_weight": 1.0})
    with pytest.raises(ConfigError, match="model.ctc_weight"):
        config_from_dict(raw)
    raw = tiny_raw_config()
    raw["model"]["predictor_bias"] = 2
    with pytest.raises(ConfigError, match="model.predictor_bias' must be 0 or 1"):
        config_from_dict(raw)
    with pytest.raises(ConfigError, match="model.ctc_combination"):
        config_from_dict({**tiny_raw_config(), "model": {"ctc_combination": "sum"}})


@pytest.mark.parametrize("model_type", ["paraformer", "transformer_ar"])
@pytest.mark.parametrize("combination", ["add", "interpolate"])
def test_total_loss_follows_the_ctc_combination(model_type, combination):
    cfg, _, model, batch = _model({"ctc_weight": 0.3, "ctc_combination": combination, "glancing_ratio": 0.0},
                                  model_type, train_mode=False)
    out = model.compute_loss(batch)
    decoder_weight = 1.0 if combination == "add" else 0.7
    expected = decoder_weight * out.terms["ce"] + 0.3 * out.terms["ctc"]
    if model_type == "paraformer":
        expected = expected + cfg.model.quantity_weight * out.terms["quantity"]
    assert torch.allclose(out.total.detach(), expected)


def test_ctc_normalisation_divides_the_summed_loss_by_tokens_or_utterances():
    generator = torch.Generator().manual_seed(0)
    log_probs = torch.randn(3, 12, 5, generator=generator).log_softmax(dim=-1)  # [B, T, V]
    targets = torch.tensor([[1, 2, 3], [2, 2, 0], [4, 0, 0]])
    lengths, frames = torch.tensor([3, 2, 1]), torch.tensor([12, 10, 8])
    summed = torch.nn.functional.ctc_loss(log_probs.transpose(0, 1), targets, frames, lengths, blank=0,
                                          reduction="sum")
    assert torch.allclose(ctc_loss(log_probs, frames, targets, lengths, 0), summed / 6)
    assert torch.allclose(ctc_loss(log_probs, frames, targets, lengths, 0, "utterance"), summed / 3)
    with pytest.raises(ValueError, match="normalization"):
        ctc_loss(log_probs, frames, targets, lengths, 0, "frame")
    with pytest.raises(ConfigError, match="model.ctc_normalization"):
        config_from_dict({**tiny_raw_config(), "model": {"ctc_normalization": "frame"}})


@pytest.mark.parametrize("model_type", ["paraformer", "transformer_ar"])
def test_a_ctc_warm_up_leaves_the_decoder_loss_out_but_keeps_every_gradient(model_type):
    """decoder_scale 0 (train.ctc_warmup_steps): the total is the CTC (and quantity) terms alone, the decoder's
    parameters get zero gradients (present, so DistributedDataParallel sees every parameter used), the encoder's
    non-zero ones."""
    cfg, _, model, batch = _model({"ctc_weight": 0.3}, model_type)  # glancing on: the token embeddings take part
    out = model.compute_loss(batch, decoder_scale=0.0)
    expected = 0.3 * out.terms["ctc"]
    if model_type == "paraformer":
        expected = expected + cfg.model.quantity_weight * out.terms["quantity"]
    assert torch.allclose(out.total.detach(), expected) and float(out.terms["ce"]) > 0
    out.total.backward()
    assert all(p.grad is not None and not bool(p.grad.any()) for p in model.decoder.parameters())
    trained = [(name, p) for name, p in model.named_parameters() if not name.startswith("decoder.")]
    assert without_a_useful_gradient(trained) == []  # encoder, CTC head (and the Paraformer's predictor)
    with pytest.raises(ConfigError, match="train.ctc_warmup_steps"):
        config_from_dict({**tiny_raw_config(), "train": {"ctc_warmup_steps": 5}})  # no CTC head


@pytest.mark.slow
def test_the_training_loop_warms_up_the_ctc_for_the_configured_steps(tmp_path, monkeypatch):
    from paraformer_asr.training import launch, steps

    scales = []
    forward = steps.LossModule.forward

    def recording(self, batch, decoder_scale=1.0):
        scales.append(decoder_scale)
        return forward(self, batch, decoder_scale)

    monkeypatch.setattr(steps.LossModule, "forward", recording)
    raw = tiny_raw_config(str(tmp_path))
    raw["model"]["ctc_weight"] = 0.3
    raw["train"].update(epochs=1, ctc_warmup_steps=2)
    launch.train(config_from_dict(raw))
    assert scales == [0.0, 0.0] + [1.0] * (len(scales) - 2) and len(scales) == 6  # 96 utterances, batches of 16


def test_length_normalised_quantity_term_divides_by_target_tokens():
    _, _, model, batch = _model({"length_normalized_loss": True})
    out = model.compute_loss(batch)
    errors = (out.cif.alpha_sum - batch.token_lengths).abs()
    assert torch.allclose(out.terms["quantity"], errors.sum() / batch.token_lengths.sum())
    _, _, plain, _ = _model({})
    assert torch.allclose(plain.compute_loss(batch).terms["quantity"], errors.mean())  # same weights and data


def test_predictor_bias_trains_an_eos_fire_and_targets():
    cfg, data, model, batch = _model({"predictor_bias": 1, "glancing_ratio": 1.0})
    out = model.compute_loss(batch)
    lengths = batch.token_lengths
    assert out.cif.num_tokens.tolist() == (lengths + 1).tolist()
    assert out.logits.shape == (6, int(lengths.max()) + 1, data.tokenizer.vocab_size)
    assert torch.allclose(out.terms["quantity"], (out.cif.alpha_sum - (lengths + 1)).abs().mean())
    targets, target_lengths = model.decoder_targets(batch.tokens, lengths)
    rows = torch.arange(6)
    assert targets[rows, lengths].eq(data.tokenizer.eos_id).all() and target_lengths.tolist() == (lengths + 1).tolist()
    assert torch.equal(targets[:, :-1][batch.token_mask], batch.tokens[batch.token_mask])


def test_predictor_bias_gradients_equal_those_through_the_loop_cif(monkeypatch):
    """Every parameter's gradient with the end-of-sentence fire, against the same model integrating with the loop
    CIF. The alphas are scaled to sum to N + 1 exactly, so the last token may fire on the last frame in one and
    end as a tail divided by its mass (about 1) in the other; on alphas that always sum to N + 1 the two are the
    same function, so the gradients of everything before the scaling agree. Glancing at 0.5, not 1: an untrained
    model's first pass is all wrong, and 1 would replace every CIF embedding with its target's."""
    _, _, model, batch = _model({"predictor_bias": 1, "glancing_ratio": 0.5})
    vectorised = parameter_gradients(model, batch)
    monkeypatch.setattr(cif_module, "cif_integrate", integrate_with_the_loop)
    looped = parameter_gradients(model, batch)
    assert without_a_useful_gradient(model.named_parameters()) == []
    assert vectorised.keys() == looped.keys()
    for name, gradient in vectorised.items():
        assert torch.allclose(gradient, looped[name], rtol=1e-4, atol=1e-6), (name, gradient, looped[name])


def test_predictor_bias_drops_the_last_fired_token_at_inference():
    _, _, biased, batch = _model({"predictor_bias": 1}, train_mode=False)
    _, _, plain, _ = _model({}, train_mode=False)
    plain.load_state_dict(biased.state_dict())
    log_probs, cif = biased.posteriors(batch.features, batch.feat_mask)
    all_log_probs, all_cif = plain.posteriors(batch.features, batch.feat_mask)
    assert cif.num_tokens.tolist() == (all_cif.num_tokens - 1).clamp(min=0).tolist()
    assert log_probs.shape[1] == int(cif.num_tokens.max())
    valid = cif.token_mask
    assert torch.allclose(log_probs[valid], all_log_probs[:, :log_probs.shape[1]][valid])  # the same decoder pass
    assert torch.equal(cif.fire_frames[valid], all_cif.fire_frames[:, :log_probs.shape[1]][valid])
    assert bool((cif.fire_frames[~valid] == -1).all())
    tokens, lengths = biased.greedy_decode(batch.features, batch.feat_mask)
    beams, _, beam_lengths = biased.beam_search(batch.features, batch.feat_mask, beam_size=2)
    assert torch.equal(lengths, cif.num_tokens) and torch.equal(beam_lengths[:, 0], lengths)
    assert torch.equal(beams[:, 0], tokens)


def test_predictor_bias_decoding_does_not_depend_on_batch_padding():
    _, data, model, _ = _model({"predictor_bias": 1}, train_mode=False)
    collate = Collator(data.tokenizer.pad_id)
    items = [data.train[i] for i in range(5)]
    batch = collate(items)
    tokens, lengths = model.greedy_decode(batch.features, batch.feat_mask)
    for row, item in enumerate(items):
        alone = collate([item])
        one_tokens, one_length = model.greedy_decode(alone.features, alone.feat_mask)
        n = int(lengths[row])
        assert int(one_length[0]) == n and torch.equal(one_tokens[0, :n], tokens[row, :n])


@pytest.mark.parametrize("glancing_loss", ["all", "unglanced"])
def test_glancing_loss_counts_the_positions_it_names(glancing_loss):
    """The CE of ``compute_loss`` against the same steps written out: one pass, the glancing draw under the same
    seed, and the CE over every position ("all") or over those that kept their CIF embedding ("unglanced")."""
    _, _, model, batch = _model({"glancing_ratio": 0.5, "glancing_loss": glancing_loss, "label_smoothing": 0.0})
    torch.manual_seed(3)
    ce = model.compute_loss(batch).terms["ce"]
    torch.manual_seed(3)
    encoder_out, enc_mask = model.encode(batch.features, batch.feat_mask)
    targets, target_lengths = model.decoder_targets(batch.tokens, batch.token_lengths)
    extraction, _ = model.extract_tokens(encoder_out, enc_mask, targets, target_lengths)
    queries, token_mask = extraction.embeddings, extraction.token_mask
    first_pass = model.decode_queries(queries, token_mask, encoder_out, enc_mask).argmax(dim=-1)
    mixed, glanced = glancing_mix(queries, model.decoder.embed_tokens(targets), first_pass, targets, token_mask, 0.5)
    assert bool(glanced.any()) and bool((token_mask & ~glanced).any())
    logits = model.decode_queries(mixed, token_mask, encoder_out, enc_mask)
    counted = token_mask & ~glanced if glancing_loss == "unglanced" else token_mask
    assert torch.allclose(ce, torch.nn.functional.cross_entropy(logits[counted], targets[counted]))


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_gradients_reach_every_parameter_with_each_switch(switch):
    _, _, model, batch = _model({**SWITCHES[switch], "glancing_ratio": 1.0, "ctc_weight": 0.3})
    model.compute_loss(batch).total.backward()
    assert without_a_useful_gradient(model.named_parameters()) == []


@pytest.mark.slow
@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_overfitting_one_batch_with_each_switch(switch):
    _, data, model, _ = _model({**SWITCHES[switch], "glancing_ratio": 0.0, "label_smoothing": 0.0})
    batch = Collator(data.tokenizer.pad_id)([data.train[i] for i in range(4)])
    losses = overfit(model, batch, steps=150)
    assert losses[-1] < 0.1 * losses[0]
    model.eval()
    tokens, lengths = model.greedy_decode(batch.features, batch.feat_mask)
    assert [data.tokenizer.decode(t[:n]) for t, n in zip(tokens, lengths.tolist())] == batch.texts


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_predictor_runs_in_float32_under_cuda_fp16_autocast():
    _, _, model, batch = _model({})
    model, batch = model.cuda(), batch.to("cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        encoder_out, _ = model.encode(batch.features, batch.feat_mask)
        out = model.compute_loss(batch)
    assert out.cif.alpha_sum.dtype == torch.float32 and out.cif.embeddings.dtype == encoder_out.dtype
    assert torch.isfinite(out.total)
