"""CIF: the vectorised integrator equals the plain loop, in its outputs and in its gradients, fires exactly N
tokens when scaled."""

import pytest
import torch

from asr_reference import loop_cif_autograd
from paraformer_asr.checks import lengths_to_mask
from paraformer_asr.models.cif import (CifPredictor, cif_integrate, fire_frames, fit_alpha_scale,
                                       inference_token_count)
from paraformer_asr_tools.benchmarks.cif import loop_cif


def _random_case(seed: int, batch=5, frames=60, dim=8, scale=0.9):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, frames, dim, generator=gen)
    lengths = torch.randint(5, frames + 1, (batch,), generator=gen)
    lengths[0] = frames
    alphas = torch.rand(batch, frames, generator=gen) * scale * lengths_to_mask(lengths, frames)
    return hidden, alphas, lengths


def _compare_with_loop(hidden, alphas, num_tokens):
    embeddings, token_mask, fires = cif_integrate(hidden, alphas, num_tokens)
    ref_embeddings, ref_fires = loop_cif(hidden, alphas, num_tokens)
    assert token_mask.sum(1).tolist() == [len(r) for r in ref_embeddings]
    for row, (ref, ref_fire) in enumerate(zip(ref_embeddings, ref_fires)):
        if ref:
            assert torch.allclose(embeddings[row, : len(ref)], torch.stack(ref).float(), atol=1e-5)
        assert fires[row, : len(ref)].tolist() == ref_fire
        assert float(embeddings[row, len(ref):].abs().sum()) == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_fire_frames_are_the_same_when_an_onnx_export_traces_them(seed, monkeypatch):
    _, alphas, _ = _random_case(seed, scale=1.7)  # alpha > 1: several fires in one frame
    token_mask = lengths_to_mask(inference_token_count(alphas))
    eager = fire_frames(alphas, token_mask)  # sorted search
    monkeypatch.setattr(torch.onnx, "is_in_onnx_export", lambda: True)
    assert torch.equal(fire_frames(alphas, token_mask), eager)  # counted comparisons, as the export traces them
    assert bool((eager[~token_mask] == -1).all()) and bool((eager[token_mask] >= 0).all())


@pytest.mark.parametrize("seed", range(4))
def test_vectorised_cif_equals_loop_at_inference(seed):
    hidden, alphas, _ = _random_case(seed)
    _compare_with_loop(hidden, alphas, inference_token_count(alphas))


@pytest.mark.parametrize("seed", range(4))
def test_cif_scaled_to_target_fires_exactly_n_and_equals_loop(seed):
    hidden, alphas, lengths = _random_case(seed, scale=0.5)
    targets = torch.randint(1, 30, (alphas.shape[0],), generator=torch.Generator().manual_seed(seed))
    targets[1] = int(lengths[1]) + 3  # more tokens than frames: alphas above 1, several fires per frame
    scaled = alphas * (targets / alphas.sum(1)).unsqueeze(1)
    embeddings, token_mask, fires = cif_integrate(hidden, scaled, targets)
    assert token_mask.sum(1).tolist() == targets.tolist()
    assert bool((fires[token_mask] >= 0).all())
    _compare_with_loop(hidden, scaled, targets)


def test_inference_count_is_round_of_alpha_sum_with_tail_rule():
    alphas = torch.tensor([[0.6, 0.6, 0.3, 0.0], [0.6, 0.6, 0.2, 0.0], [0.2, 0.2, 0.0, 0.0]])
    assert inference_token_count(alphas).tolist() == [2, 1, 0]  # 1.5 -> 2 (tail 0.5 fires), 1.4 -> 1, 0.4 -> 0
    hidden = torch.arange(4.0).view(1, 4, 1).expand(3, 4, 1).contiguous()
    emb, mask, fires = cif_integrate(hidden, alphas, inference_token_count(alphas))
    # first utterance: token 0 = 0.6*f0 + 0.4*f1; tail token = (0.2*f1 + 0.3*f2) / 0.5
    assert torch.allclose(emb[0, :, 0], torch.tensor([0.4, (0.2 * 1 + 0.3 * 2) / 0.5]))
    assert fires[0].tolist() == [1, 2] and fires[2].tolist() == [-1, -1]


def test_predictor_scales_to_target_length():
    torch.manual_seed(0)
    pred = CifPredictor(16)
    hidden = torch.randn(3, 25, 16)
    mask = lengths_to_mask(torch.tensor([25, 20, 8]))
    targets = torch.tensor([7, 3, 5])
    cif = pred(hidden, mask, targets)
    assert cif.num_tokens.tolist() == [7, 3, 5] and cif.embeddings.shape == (3, 7, 16)
    assert torch.allclose(cif.integrated_alphas.sum(1), targets.float(), atol=1e-4)
    assert torch.allclose(cif.alpha_sum, cif.alphas.sum(1))


def _loop_loss(hidden, alphas, num_tokens, projection):
    """sum(embeddings * projection) over the loop CIF's embeddings ([B, >= N, D] projection, padding unread)."""
    return sum((tokens * projection[row, :len(tokens)]).sum()
               for row, tokens in enumerate(loop_cif_autograd(hidden, alphas, num_tokens)))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("counts", ["inference", "below_the_sum"])
def test_vectorised_cif_gradients_equal_the_loops(seed, counts):
    """d(loss)/d(hidden) and d(loss)/d(alphas) of a random projection of the embeddings, in float64: the
    vectorised CIF against the loop, step by step. 'inference': the counts of :func:`inference_token_count` (a tail
    token divided by its mass where the tail is >= 0.5, a dropped one below); 'below_the_sum': alphas up to about 4
    (several fires in one frame) summing to N + 0.4, so the N-th token fires whole and the rest is dropped. A sum of
    exactly N (training) puts the last fire on a slice boundary, a kink where the loop's ``>= 1`` and the vectorised
    ``mass < 1`` can fall on different sides by rounding, so it is kept off the integer here."""
    hidden, alphas, lengths = _random_case(seed, batch=4, frames=30, dim=6, scale=1.0)
    generator = torch.Generator().manual_seed(100 + seed)
    if counts == "inference":
        num_tokens = inference_token_count(alphas)
    else:
        num_tokens = torch.randint(1, 45, (4,), generator=generator).minimum(2 * lengths)
        alphas = alphas * ((num_tokens + 0.4) / alphas.sum(1)).unsqueeze(1)
    hidden = hidden.double().requires_grad_()
    alphas = alphas.double().requires_grad_()
    projection = torch.randn(4, int(num_tokens.max()), 6, generator=generator, dtype=torch.float64)  # [B, N, D]
    embeddings, _, _ = cif_integrate(hidden, alphas, num_tokens)
    grads = torch.autograd.grad((embeddings * projection).sum(), (hidden, alphas))
    reference = torch.autograd.grad(_loop_loss(hidden, alphas, num_tokens, projection), (hidden, alphas))
    for name, got, want in zip(("hidden", "alphas"), grads, reference):
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-9), (name, float((got - want).abs().max()))
    assert float(reference[1].abs().sum()) > 0  # the alphas' path is exercised, not only the frames'


def test_predictor_gradients_equal_those_through_the_loop_cif():
    """The predictor's parameters and its input get the gradients they get when the loop (in float64) integrates
    its alphas instead (the inference count: no alpha sum on a slice boundary)."""
    torch.manual_seed(0)
    pred = CifPredictor(8)
    hidden = torch.randn(3, 25, 8, requires_grad=True)
    mask = lengths_to_mask(torch.tensor([25, 20, 8]))
    projection = torch.randn(3, 25, 8, dtype=torch.float64)  # [B, >= N, D]
    inputs = (hidden, *pred.parameters())
    cif = pred(hidden, mask)
    loss = (cif.embeddings * projection[:, :cif.embeddings.shape[1]]).sum()
    grads = torch.autograd.grad(loss, inputs)
    alphas = pred.predict_alphas(hidden, mask) * pred.alpha_scale  # what forward integrates
    assert torch.equal(alphas, cif.integrated_alphas)
    reference = torch.autograd.grad(_loop_loss(hidden.double(), alphas.double(), cif.num_tokens, projection), inputs)
    for got, want in zip(grads, reference):
        assert torch.allclose(got, want.float(), rtol=1e-4, atol=1e-5), float((got - want).abs().max())


def test_fit_alpha_scale_is_the_ratio_of_total_tokens_to_total_alpha():
    assert fit_alpha_scale(torch.tensor([2.0, 3.0]), torch.tensor([3, 3])) == pytest.approx(6 / 5)
    assert fit_alpha_scale(torch.tensor([4.0]), torch.tensor([4])) == 1.0
    assert fit_alpha_scale(torch.zeros(3), torch.tensor([1, 2, 3])) == 1.0  # no mass to scale


def test_alpha_scale_multiplies_the_inference_alphas_only():
    torch.manual_seed(0)
    pred = CifPredictor(16).eval()
    hidden = torch.randn(3, 30, 16)
    mask = lengths_to_mask(torch.tensor([30, 22, 9]))
    plain = pred(hidden, mask)
    pred.alpha_scale.fill_(1.7)
    scaled = pred(hidden, mask)
    assert torch.equal(scaled.alphas, plain.alphas) and torch.equal(scaled.alpha_sum, plain.alpha_sum)  # raw
    assert torch.allclose(scaled.integrated_alphas, 1.7 * plain.alphas)
    assert torch.equal(scaled.num_tokens, inference_token_count(1.7 * plain.alphas))
    targets = torch.tensor([4, 3, 2])  # training: scaled to the targets, the calibration plays no part
    assert torch.allclose(pred(hidden, mask, targets).integrated_alphas, plain.alphas * (targets / plain.alpha_sum)[:, None])


def test_alpha_scale_round_trips_and_old_state_dicts_load_with_scale_one():
    pred = CifPredictor(8)
    pred.alpha_scale.fill_(1.03)
    restored = CifPredictor(8)
    restored.load_state_dict(pred.state_dict())
    assert float(restored.alpha_scale) == pytest.approx(1.03)
    old = {k: v for k, v in pred.state_dict().items() if k != "alpha_scale"}  # written before the buffer existed
    restored.load_state_dict(old)  # strict
    assert float(restored.alpha_scale) == 1.0
