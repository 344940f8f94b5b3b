import pytest
import torch

from unet_transformer_seg.checks import (
    assert_shape, gradient_norms, install_nonfinite_hooks, parameters_without_gradient,
)
from unet_transformer_seg.config import load_config
from unet_transformer_seg.errors import ContractError, NonFiniteError, ShapeError, UserError
from unet_transformer_seg.models import UNet, UNetTransformer, build_model
from unet_transformer_seg.models.unet import ConvBlock
from unet_transformer_seg.models.transformer import (
    FeedForward, MultiHeadAttention, TransformerBlock, TransformerBottleneck, positional_encoding_2d,
)

from seg_reference import attention_reference


def small_transformer(**kwargs):
    defaults = dict(in_channels=3, out_channels=4, base_channels=4, depth=2, transformer_layers=2, num_heads=2)
    return UNetTransformer(**{**defaults, **kwargs})


@pytest.mark.parametrize("model_cls", [UNet, UNetTransformer])
@pytest.mark.parametrize("size", [(16, 16), (8, 24)])
def test_model_output_shape(model_cls, size):
    model = model_cls(in_channels=3, out_channels=5, base_channels=4, depth=2)
    logits = model(torch.randn(2, 3, *size))
    assert logits.shape == (2, 5, *size) and logits.dtype == torch.float32


@pytest.mark.parametrize("model_cls", [UNet, UNetTransformer])
def test_every_parameter_gradient_matches_finite_differences(model_cls):
    """Autograd's gradient of every parameter tensor, projected on a random direction, against a central difference
    of the loss along that direction, in float64 with a step of 1e-7 (rounding ~1e-8). The seed is one where no ReLU
    input lies within 1e-4 of its kink (checked), so the two evaluations see the same linear pieces."""
    torch.manual_seed(3)
    model = model_cls(in_channels=1, out_channels=3, base_channels=4, depth=2).double()
    image = torch.randn(2, 1, 16, 16, dtype=torch.float64)
    weights = torch.randn(2, 3, 16, 16, dtype=torch.float64)  # a loss whose gradient is no symmetry's zero
    closest = []
    hooks = [module.register_forward_pre_hook(lambda _, inputs: closest.append(float(inputs[0].detach().abs().min())))
             for module in model.modules() if isinstance(module, torch.nn.ReLU)]

    def loss() -> torch.Tensor:
        return (model(image) * weights).sum()

    loss().backward()
    for hook in hooks:
        hook.remove()
    assert min(closest) > 1e-4
    assert parameters_without_gradient(model) == []
    step = 1e-7
    for name, param in model.named_parameters():
        direction = torch.randn_like(param)
        with torch.no_grad():
            param += step * direction
            above = loss().item()
            param -= 2 * step * direction
            below = loss().item()
            param += step * direction
        analytic = float((param.grad * direction).sum())
        assert (above - below) / (2 * step) == pytest.approx(analytic, rel=1e-5, abs=1e-6), name


def test_sizes_the_network_cannot_take_give_a_clear_error():
    model = UNet(in_channels=3, out_channels=2, base_channels=4, depth=3)
    with pytest.raises(ShapeError, match=r"model input is 20x36 .* multiples of 2\*\*depth = 8 \(e\.g\. 24x40\)"):
        model(torch.randn(1, 3, 20, 36))
    with pytest.raises(ShapeError, match=r"model input: dim 1 must be 3"):
        model(torch.randn(1, 1, 16, 16))
    assert issubclass(ShapeError, UserError)  # what a caller passes in is the caller's to fix


def test_finiteness_checks_run_only_when_installed():
    model = UNet(in_channels=3, out_channels=2, base_channels=4, depth=2)
    bad = torch.randn(1, 3, 16, 16)
    bad[0, 0, 0, 0] = float("nan")
    assert torch.isnan(model(bad)).any()  # no check (and no host sync) on the hot path
    handles = install_nonfinite_hooks(model)  # what run.debug_checks installs
    with pytest.raises(NonFiniteError, match="model input holds 1 NaN"):
        model(bad)
    for handle in handles:
        handle.remove()


def test_build_model_from_config():
    cfg = load_config(None, ["model.type=unet", "data.num_classes=3"])
    assert type(build_model(cfg)) is UNet
    cfg = load_config(None, ["data.num_classes=2", "train.loss=bce_dice"])
    model = build_model(cfg)
    assert type(model) is UNetTransformer and model.head.out_channels == 1


def test_attention_shapes_and_loop_reference():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2)
    query, key = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    out = mha(query, key, key)
    assert out.shape == (2, 5, 8)
    assert torch.allclose(out, attention_reference(mha, query, key, key), atol=1e-5)
    assert torch.allclose(mha(query), attention_reference(mha, query, query, query), atol=1e-5)


def test_sdpa_path_equals_explicit_path():
    torch.manual_seed(0)
    explicit = MultiHeadAttention(16, 4, impl="explicit")
    fused = MultiHeadAttention(16, 4, impl="sdpa")
    fused.load_state_dict(explicit.state_dict())
    x = torch.randn(3, 9, 16, requires_grad=True)
    out_explicit, out_fused = explicit(x), fused(x)
    assert torch.allclose(out_explicit, out_fused, atol=1e-5)
    grad_explicit, = torch.autograd.grad(out_explicit.sum(), x)
    grad_fused, = torch.autograd.grad(out_fused.sum(), x)
    assert torch.allclose(grad_explicit, grad_fused, atol=1e-5)
    model_a = small_transformer(attention="explicit").eval()
    model_b = small_transformer(attention="sdpa").eval()
    model_b.load_state_dict(model_a.state_dict())
    image = torch.randn(2, 3, 16, 16)
    assert torch.allclose(model_a(image), model_b(image), atol=1e-5)


def test_block_feedforward_and_bottleneck_shapes():
    x = torch.randn(2, 12, 8)
    assert FeedForward(8, 2.0, 0.0)(x).shape == (2, 12, 8)
    assert TransformerBlock(8, 2, 2.0, 0.0, "explicit")(x).shape == (2, 12, 8)
    feature_map = torch.randn(2, 8, 3, 4)
    for norm in ("batch", "group"):
        assert ConvBlock(8, 12, norm)(feature_map).shape == (2, 12, 3, 4)
    assert TransformerBottleneck(8, 2, 2, 2.0, 0.0)(feature_map).shape == (2, 8, 3, 4)
    with pytest.raises(ContractError, match="attention key: dim 2"):  # internal: a bug, not a user error
        MultiHeadAttention(8, 2)(x, torch.randn(2, 5, 6))
    assert not issubclass(ContractError, UserError)


def test_positional_encoding_2d():
    code = positional_encoding_2d(3, 4, 8)
    assert code.shape == (12, 8)
    grid = code.view(3, 4, 8)
    assert torch.equal(grid[:, 0, :4], grid[:, 3, :4])  # row half depends on the row only
    assert torch.equal(grid[0, :, 4:], grid[2, :, 4:])  # column half depends on the column only
    assert len({tuple(row.tolist()) for row in code}) == 12  # every position distinct
    assert torch.allclose(grid[0, 0], torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]))


def test_activation_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    plain = small_transformer(norm="group")
    checkpointed = small_transformer(norm="group", activation_checkpointing=True)
    checkpointed.load_state_dict(plain.state_dict())
    image = torch.randn(2, 3, 16, 16)
    plain(image).square().mean().backward()
    checkpointed(image).square().mean().backward()
    for (name, a), (_, b) in zip(plain.named_parameters(), checkpointed.named_parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


def test_assert_shape_binds_symbols():
    dims = assert_shape(torch.zeros(2, 3, 4), "B,T,D")
    assert dims == {"B": 2, "T": 3, "D": 4}
    with pytest.raises(ContractError, match=r"y: dim 0 \(B\) must be 2"):
        assert_shape(torch.zeros(3, 4), "B,D", name="y", dims=dims)
    with pytest.raises(ShapeError, match="expected 2 dims"):
        assert_shape(torch.zeros(3), "B,D", error=ShapeError)


def test_nonfinite_hooks_name_the_first_bad_module():
    model = small_transformer()
    with torch.no_grad():
        model.bottleneck_transform.blocks[0].attn.v_proj.weight[0, 0] = float("inf")
    handles = install_nonfinite_hooks(model)
    with pytest.raises(NonFiniteError, match="output of module 'bottleneck_transform.blocks.0.attn.v_proj'"):
        model(torch.randn(1, 3, 16, 16))
    for handle in handles:
        handle.remove()
    model = small_transformer()
    model(torch.randn(1, 3, 16, 16)).sum().backward()
    norms = dict(gradient_norms(model))
    assert set(norms) == {name for name, _ in model.named_parameters()}
    for name, param in model.named_parameters():
        assert norms[name] == pytest.approx(float(param.grad.double().square().sum().sqrt()), rel=1e-5), name


def unet_receptive_rows(row: int, depth: int):
    """The input rows (lo, hi) that can reach output row `row` of a U-Net of `depth` levels, walked back layer by layer:
    a 3x3 convolution widens by 1 on each side, a 2x2 transposed convolution of stride 2 maps fine row r to coarse row
    r // 2, a 2x2 max-pool maps coarse row r to fine rows 2r, 2r + 1. The skips reach less far than the deepest path."""
    lo, hi = row - 2, row + 2  # the last decoder block's two convolutions
    for _ in range(depth - 1):  # up one level, then that decoder block
        lo, hi = lo // 2 - 2, hi // 2 + 2
    lo, hi = lo // 2 - 2, hi // 2 + 2  # up to the bottleneck and its block
    for _ in range(depth):  # down the encoder: unpool, then the encoder block
        lo, hi = 2 * lo - 2, 2 * hi + 1 + 2
    return lo, hi


def test_unet_receptive_field_is_wider_than_the_training_window_but_local():
    # depth 3 reaches 100 rows at most (more than a 64-pixel window, far less than the whole plane)
    assert max(hi - lo + 1 for lo, hi in (unet_receptive_rows(row, 3) for row in range(64, 72))) == 100
    assert unet_receptive_rows(63, 3) == (18, 109)  # the bottom row of a 64 x 64 input sees none of rows 0..17
    torch.manual_seed(0)
    model = UNet(in_channels=1, out_channels=2, base_channels=8, depth=3).eval()
    image = torch.randn(1, 1, 160, 16, requires_grad=True)
    logits = model(image)
    for row in range(64, 72):  # one period of the 2**3 alignment
        gradient, = torch.autograd.grad(logits[0, :, row, 8].sum(), image, retain_graph=True)
        reached = gradient[0, 0].abs().sum(1).nonzero().flatten()
        assert (int(reached.min()), int(reached.max())) == unet_receptive_rows(row, 3), row


def test_transformer_bottleneck_gives_a_global_receptive_field():
    """A change in the top-left 8 x 8 block of a 64 x 64 input reaches the bottom-right logits through the attention
    only: the plain U-Net's bottom-right logits stay bit for bit the same."""
    size, block = 64, 8
    assert unet_receptive_rows(size - 1, 3)[0] > block  # the block lies outside the U-Net's reach from that corner
    outputs = {}
    for model_cls in (UNet, UNetTransformer):
        torch.manual_seed(0)
        model = model_cls(in_channels=3, out_channels=4, base_channels=8, depth=3).eval().double()
        image = torch.randn(1, 3, size, size, dtype=torch.float64)
        changed = image.clone()
        changed[..., :block, :block] += 5.0
        with torch.no_grad():
            outputs[model_cls] = model(image)[0, :, -1, -1], model(changed)[0, :, -1, -1]
    plain, transformer = outputs[UNet], outputs[UNetTransformer]
    assert torch.equal(*plain)
    # float64 rounding of logits of size ~0.5 is ~1e-16; the attention moves them by ~1e-10 at this random init
    assert (transformer[0] - transformer[1]).abs().max() > 1e-12
