"""Shapes per the contracts and padding invariance of attention, encoder, predictor and decoder."""

import pytest
import torch

from paraformer_asr.checks import lengths_to_mask
from paraformer_asr.models.attention import MultiHeadAttention
from paraformer_asr.models.cif import CifPredictor
from paraformer_asr.models.decoder import NarDecoder
from paraformer_asr.models.encoder import Encoder, subsampled_lengths
from paraformer_asr.models.layers import DecoderBlock, FsmnMemory

from asr_reference import loop_fsmn_memory


def _pad_time(x: torch.Tensor, extra: int, value: float = 0.0) -> torch.Tensor:
    pad = x.new_full((x.shape[0], extra, *x.shape[2:]), value)
    return torch.cat([x, pad], dim=1)


def test_attention_shapes_masks_and_no_nan_rows():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    q, kv = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    mask = lengths_to_mask(torch.tensor([7, 3]), 7)
    out = mha(q, kv, kv, key_padding_mask=mask)
    assert out.shape == (2, 5, 16)
    # keys past the padding mask do not matter
    kv2 = kv.clone()
    kv2[1, 3:] = 100.0
    assert torch.allclose(out, mha(q, kv2, kv2, key_padding_mask=mask), atol=1e-6)
    # a causal mask hides the future; rows with nothing to attend to give zeros, not NaN
    x = torch.randn(2, 4, 16)
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    full = mha(x, x, x, attn_mask=causal)
    x2 = x.clone()
    x2[:, 3] = -50.0
    assert torch.allclose(full[:, :3], mha(x2, x2, x2, attn_mask=causal)[:, :3], atol=1e-6)
    empty = mha(x, x, x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    assert torch.isfinite(empty).all()
    with pytest.raises(ValueError, match="bool"):
        mha(q, kv, kv, key_padding_mask=mask.float())


def test_attention_cached_keys_match_full_computation():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2).eval()
    x = torch.randn(1, 5, 16)
    causal = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    full = mha(x, x, x, attn_mask=causal)
    keys, values = [], []
    for step in range(5):
        k, v = mha.project_key_value(x[:, step:step + 1], x[:, step:step + 1])
        keys.append(k)
        values.append(v)
        out = mha.attend(mha.project_query(x[:, step:step + 1]), torch.cat(keys, 2), torch.cat(values, 2))
        assert torch.allclose(out[:, 0], full[:, step], atol=1e-6)


@pytest.mark.parametrize("factor", [1, 2, 4])
def test_encoder_shapes_and_padding_invariance(factor):
    torch.manual_seed(0)
    enc = Encoder(12, 32, 4, 2, 48, dropout=0.0, subsampling_factor=factor, subsampling_channels=4).eval()
    lengths = torch.tensor([40, 23, 9])
    feats = torch.randn(3, 40, 12) * lengths_to_mask(lengths).unsqueeze(-1)
    out, out_mask = enc(feats, lengths_to_mask(lengths))
    expected = subsampled_lengths(lengths, factor)
    assert out.shape == (3, int(expected.max()), 32) and out_mask.sum(1).tolist() == expected.tolist()
    assert float(out.detach()[~out_mask].abs().sum()) == 0.0
    padded = _pad_time(feats, 13, 7.0)  # padding content must not matter either
    out2, mask2 = enc(padded, lengths_to_mask(lengths, 53))
    for row, n in enumerate(expected.tolist()):
        assert torch.allclose(out[row, :n], out2[row, :n], atol=1e-5)
    alone, _ = enc(feats[2:, :9], lengths_to_mask(lengths[2:]))
    assert torch.allclose(alone[0], out[2, : int(expected[2])], atol=1e-5)


def test_encoder_rejects_too_short_inputs_and_bad_masks():
    enc = Encoder(12, 32, 4, 1, 48, subsampling_factor=4, subsampling_channels=4)
    with pytest.raises(ValueError, match="too short"):
        enc(torch.randn(1, 6, 12), torch.ones(1, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="polarity"):
        enc(torch.randn(2, 20, 12), ~lengths_to_mask(torch.tensor([20, 10])))
    with pytest.raises(ValueError, match="dim 2"):
        enc(torch.randn(2, 20, 13), torch.ones(2, 20, dtype=torch.bool))


@pytest.mark.parametrize("fsmn_kernel", [0, 5], ids=["self-attention", "fsmn"])
def test_predictor_and_decoder_shapes_and_padding_invariance(fsmn_kernel):
    torch.manual_seed(0)
    pred = CifPredictor(32, kernel_size=3).eval()
    dec = NarDecoder(11, 32, 4, 2, 48, fsmn_kernel_size=fsmn_kernel).eval()
    lengths = torch.tensor([20, 12])
    hidden = torch.randn(2, 20, 32) * lengths_to_mask(lengths).unsqueeze(-1)
    mask = lengths_to_mask(lengths)
    cif = pred(hidden, mask)
    assert cif.alphas.shape == (2, 20) and float(cif.alphas.detach()[1, 12:].abs().sum()) == 0.0
    assert bool(((cif.alphas[mask] > 0) & (cif.alphas[mask] < 1)).all())
    n = int(cif.num_tokens.max())
    assert cif.embeddings.shape == (2, n, 32) and cif.token_mask.shape == (2, n)
    logits = dec(cif.embeddings, cif.token_mask, hidden, mask)
    assert logits.shape == (2, n, 11)

    hidden_p, mask_p = _pad_time(hidden, 9, 3.0), lengths_to_mask(lengths, 29)
    cif_p = pred(hidden_p, mask_p)
    assert torch.allclose(cif.alphas, cif_p.alphas[:, :20], atol=1e-6)
    assert torch.equal(cif.num_tokens, cif_p.num_tokens)
    assert torch.allclose(cif.embeddings, cif_p.embeddings, atol=1e-5)
    logits_p = dec(cif_p.embeddings, cif_p.token_mask, hidden_p, mask_p)
    valid = cif.token_mask
    assert torch.allclose(logits[valid], logits_p[valid], atol=1e-5)
    # extra token padding in the decoder input leaves valid positions unchanged
    emb_p = _pad_time(cif.embeddings, 3, -4.0)
    tmask_p = torch.cat([cif.token_mask, torch.zeros(2, 3, dtype=torch.bool)], 1)
    assert torch.allclose(dec(emb_p, tmask_p, hidden, mask)[:, :n][valid], logits[valid], atol=1e-5)


@pytest.mark.parametrize("positions", [True, False])
def test_decoder_without_positions_reads_order_only_from_its_inputs(positions):
    """Self-attention is permutation-equivariant: without positions, permuting the input tokens permutes the logits;
    the sinusoidal positions are what breaks that symmetry."""
    torch.manual_seed(0)
    dec = NarDecoder(11, 32, 4, 2, 48, positions=positions).eval()
    acoustic, memory = torch.randn(2, 6, 32), torch.randn(2, 9, 32)  # [B, N, D], [B, T, D]
    token_mask, memory_mask = torch.ones(2, 6, dtype=torch.bool), torch.ones(2, 9, dtype=torch.bool)
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    logits = dec(acoustic, token_mask, memory, memory_mask)  # [B, N, V]
    permuted = dec(acoustic[:, order], token_mask, memory, memory_mask)
    assert torch.allclose(permuted, logits[:, order], atol=1e-5) == (not positions)


def test_fsmn_memory_matches_a_token_loop_and_ignores_padding():
    torch.manual_seed(0)
    fsmn = FsmnMemory(6, kernel_size=5)
    x = torch.randn(3, 7, 6)
    mask = lengths_to_mask(torch.tensor([7, 4, 1]), 7)
    with torch.no_grad():
        out = fsmn(x, mask)  # [3, 7, 6]
    expected = loop_fsmn_memory(x, mask, fsmn.conv.weight.detach()[:, 0])  # conv weight [D, 1, k]
    assert out.shape == (3, 7, 6) and torch.allclose(out, expected, atol=1e-6)
    assert float(out[~mask].abs().sum()) == 0.0
    x_garbage = x.masked_fill(~mask.unsqueeze(-1), 9.0)  # whatever sits in the padding changes nothing
    with torch.no_grad():
        assert torch.equal(fsmn(x_garbage, mask), out)


def test_fsmn_decoder_block_has_no_self_attention():
    block = DecoderBlock(16, 4, 32, fsmn_kernel_size=3)
    assert block.self_attn is None and block.fsmn is not None
    x, mask = torch.randn(1, 4, 16), torch.ones(1, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="no self-attention mask"):
        block(x, mask, x, mask, self_attn_mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="odd"):
        FsmnMemory(16, kernel_size=4)
