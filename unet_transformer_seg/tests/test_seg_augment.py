"""Batched augmentation (`data.augment`) and foreground-centred windows (`data.foreground_fraction`)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from unet_transformer_seg.config import AugmentConfig, load_config
from unet_transformer_seg.data.augment import BatchAugment, affine_matrices, affine_warp, blur, gaussian_kernels
from unet_transformer_seg.data.transforms import SegmentationTransform, window_origin
from unet_transformer_seg.errors import ConfigError
from unet_transformer_seg.labels import IGNORE_LABEL

S = 32


def block_masks(batch=3, size=S, block=4):
    """[B, S, S] masks of block x block squares with ids 0..3 (a different layout per item) and their images: channel 0
    is the id itself, so a pixel's image value says which mask id it must carry."""
    rng = np.random.default_rng(0)
    blocks = torch.as_tensor(rng.integers(0, 4, size=(batch, size // block, size // block)))
    masks = blocks.repeat_interleave(block, 1).repeat_interleave(block, 2)  # [B, S, S]
    images = torch.stack([masks.float(), torch.rand(batch, size, size)], 1)  # [B, 2, S, S]
    return images, masks


def test_quarter_turn_moves_image_and_mask_like_rot90():
    images, masks = block_masks()
    turn = affine_matrices(torch.full((3,), torch.pi / 2, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
    warped, warped_masks = affine_warp(images, masks, turn)
    k = 1 if torch.equal(warped_masks[0], torch.rot90(masks[0], 1, (-1, -2))) else -1  # the turn's direction
    assert torch.equal(warped_masks, torch.rot90(masks, k, (-1, -2)))
    torch.testing.assert_close(warped, torch.rot90(images, k, (-1, -2)), atol=1e-5, rtol=0)


def test_zoom_by_two_is_the_centre_upsampled_and_zoom_out_brings_in_ignored_pixels():
    images, masks = block_masks()
    zoom_in = affine_matrices(torch.zeros(3, dtype=torch.float64), torch.full((3,), 2.0, dtype=torch.float64))
    _, zoomed = affine_warp(images, masks, zoom_in)
    centre = masks[:, S // 4 : 3 * S // 4, S // 4 : 3 * S // 4]
    assert torch.equal(zoomed, centre.repeat_interleave(2, 1).repeat_interleave(2, 2))
    zoom_out = affine_matrices(torch.zeros(3, dtype=torch.float64), torch.full((3,), 0.5, dtype=torch.float64))
    shrunk_images, shrunk = affine_warp(images, masks, zoom_out)
    outside = torch.zeros(S, S, dtype=torch.bool)
    outside[: S // 4 - 1] = outside[-(S // 4 - 1) :] = True
    outside[:, : S // 4 - 1] = outside[:, -(S // 4 - 1) :] = True
    assert (shrunk[:, outside] == IGNORE_LABEL).all() and (shrunk_images[:, :, outside] == 0).all()
    inner = shrunk[:, S // 4 + 1 : -(S // 4 + 1), S // 4 + 1 : -(S // 4 + 1)]
    assert (inner >= 0).all()


def test_random_spatial_augmentation_keeps_image_and_mask_aligned():
    images, masks = block_masks(batch=16, block=8)
    augment = BatchAugment(AugmentConfig(scale_prob=1.0, rotate_prob=1.0, rotate_degrees=180.0,
                                         scale_range=[0.6, 1.6]))
    warped, warped_masks = augment(images, masks, np.random.default_rng(1))
    assert not torch.equal(warped_masks, masks)
    # away from block edges (a 7 x 7 neighbourhood of one id, wider than the bilinear support at these zooms) the
    # bilinear image equals the nearest mask id
    padded = F.pad(warped_masks.float()[:, None], (3, 3, 3, 3), value=-2.0)
    same = (F.max_pool2d(padded, 7, 1) == F.max_pool2d(-padded, 7, 1).neg())[:, 0] & (warped_masks >= 0)
    assert same.sum() > 500  # enough pixels to check
    assert torch.allclose(warped[:, 0][same], warped_masks[same].float(), atol=1e-4)
    # pixels brought in from outside the window: ignored in the mask, 0 (the mean colour) in the image
    outside = (F.max_pool2d(warped_masks.float()[:, None], 3, 1, padding=1)[:, 0] == IGNORE_LABEL)
    assert outside.any() and (warped.permute(1, 0, 2, 3)[:, outside] == 0).all()


@pytest.mark.parametrize("name", ["brightness", "contrast", "gamma", "noise", "blur"])
def test_intensity_augmentations_leave_the_mask_and_follow_the_generator(name):
    images, masks = block_masks()
    augment = BatchAugment(AugmentConfig(**{f"{name}_prob": 1.0}))
    changed, same_masks = augment(images, masks, np.random.default_rng(2))
    assert torch.equal(same_masks, masks) and changed.shape == images.shape
    assert not torch.allclose(changed, images)
    again, _ = augment(images, masks, np.random.default_rng(2))
    assert torch.equal(again, changed)  # a pure function of the generator
    other, _ = augment(images, masks, np.random.default_rng(3))
    assert not torch.equal(other, changed)


def intensity(name: str, images: torch.Tensor, seed: int = 4, **settings) -> torch.Tensor:
    """`images` after the intensity transform `name` alone, applied to every sample."""
    augment = BatchAugment(AugmentConfig(**{f"{name}_prob": 1.0, **settings}))
    masks = torch.zeros(images.shape[0], *images.shape[-2:], dtype=torch.int64)
    return augment(images, masks, np.random.default_rng(seed))[0]


def per_image(values: torch.Tensor) -> torch.Tensor:
    return values.flatten(1)


def test_brightness_multiplies_each_image_by_one_factor_in_the_range():
    images = torch.rand(16, 2, S, S, dtype=torch.float64) + 0.5  # no zeros: every pixel gives the factor
    out = intensity("brightness", images, brightness_range=[0.6, 1.3])
    ratios = per_image(out / images)  # [B, pixels]
    factors = ratios[:, 0]
    torch.testing.assert_close(ratios, factors[:, None].expand_as(ratios), atol=1e-12, rtol=0)
    assert ((factors >= 0.6) & (factors <= 1.3)).all()
    assert factors.max() - factors.min() > 0.2  # one draw per sample, not per batch
    torch.testing.assert_close(out, factors.view(-1, 1, 1, 1) * images, atol=1e-12, rtol=0)


def test_brightness_applies_to_the_share_of_samples_its_probability_gives():
    images = torch.rand(400, 1, 4, 4) + 0.5
    augment = BatchAugment(AugmentConfig(brightness_prob=0.3))
    out, _ = augment(images, torch.zeros(400, 4, 4, dtype=torch.int64), np.random.default_rng(5))
    touched = (out != images).flatten(1).any(1).double().mean()
    assert abs(float(touched) - 0.3) < 0.07


def test_contrast_scales_deviations_from_each_images_mean_by_one_factor_in_the_range():
    images = torch.rand(16, 2, S, S, dtype=torch.float64) * torch.arange(1, 17, dtype=torch.float64).view(-1, 1, 1, 1)
    out = intensity("contrast", images, contrast_range=[0.5, 1.5])
    means = per_image(images).mean(1)
    torch.testing.assert_close(per_image(out).mean(1), means, atol=1e-12, rtol=0)  # each image keeps its mean
    deviations, new_deviations = per_image(images) - means[:, None], per_image(out) - means[:, None]
    factors = new_deviations.norm(dim=1) / deviations.norm(dim=1)
    torch.testing.assert_close(new_deviations, factors[:, None] * deviations, atol=1e-10, rtol=0)
    assert ((factors >= 0.5) & (factors <= 1.5)).all() and factors.max() - factors.min() > 0.3


def test_gamma_is_a_power_of_each_image_rescaled_to_0_1_with_its_range_kept():
    images = torch.rand(16, 2, S, S, dtype=torch.float64) * 4 - 1  # values in [-1, 3]
    out = intensity("gamma", images, gamma_range=[0.7, 1.5])
    low, high = per_image(images).min(1).values, per_image(images).max(1).values
    torch.testing.assert_close(per_image(out).min(1).values, low, atol=1e-12, rtol=0)
    torch.testing.assert_close(per_image(out).max(1).values, high, atol=1e-12, rtol=0)
    unit = (per_image(images) - low[:, None]) / (high - low)[:, None]
    new_unit = (per_image(out) - low[:, None]) / (high - low)[:, None]
    inner = (unit > 0.05) & (unit < 0.95)  # away from 0 and 1 the exponent is well defined
    exponents = torch.where(inner, new_unit.log() / unit.log(), torch.nan)
    gammas = exponents.nanmean(1)
    torch.testing.assert_close(exponents[inner], gammas[:, None].expand_as(exponents)[inner], atol=1e-9, rtol=0)
    assert ((gammas >= 0.7) & (gammas <= 1.5)).all() and gammas.max() - gammas.min() > 0.3
    assert (gammas < 1).any() and (gammas > 1).any()  # both darker and lighter mid-tones


def test_noise_is_zero_mean_gaussian_with_a_std_per_image_up_to_noise_std():
    images = torch.rand(32, 2, S, S, dtype=torch.float64)
    noise = per_image(intensity("noise", images, noise_std=0.2) - images)  # [B, 2048]
    stds = noise.std(1)
    assert (stds <= 0.2 * 1.05).all()  # 2048 pixels: the sample std is within ~3 % of the drawn one
    assert stds.min() < 0.05 and stds.max() > 0.15  # std drawn uniform in [0, 0.2] per sample
    assert (noise.mean(1).abs() <= 4 * stds / noise.shape[1] ** 0.5).all()  # zero mean
    standardised = noise / stds[:, None]
    assert abs(float((standardised.abs() < 1).double().mean()) - 0.6827) < 0.01  # Gaussian, not uniform


def test_blur_keeps_a_constant_image_and_spreads_a_point_into_a_gaussian_in_the_sigma_range():
    constant = torch.full((8, 2, S, S), 0.7, dtype=torch.float64)
    torch.testing.assert_close(intensity("blur", constant), constant, atol=1e-12, rtol=0)
    points = torch.zeros(16, 1, S, S, dtype=torch.float64)
    points[:, :, S // 2, S // 2] = 1.0
    out = intensity("blur", points, blur_sigma=[0.5, 1.0])[:, 0]
    torch.testing.assert_close(out.sum((1, 2)), torch.ones(16, dtype=torch.float64), atol=1e-12, rtol=0)
    centre = out[:, S // 2, S // 2]
    sigmas = (-0.5 / (out[:, S // 2, S // 2 + 1] / centre).log()).sqrt()  # k(1) / k(0) = exp(-1 / (2 sigma^2))
    assert ((sigmas >= 0.5 - 1e-9) & (sigmas <= 1.0 + 1e-9)).all() and sigmas.max() - sigmas.min() > 0.2
    radius = 3  # ceil(3 * the largest sigma)
    offsets = torch.arange(-radius, radius + 1, dtype=torch.float64)
    for image, sigma in zip(out, sigmas):  # the point spread is the outer product of one normalised Gaussian
        kernel = torch.exp(-0.5 * (offsets / sigma) ** 2)
        kernel = kernel / kernel.sum()
        expected = torch.zeros(S, S, dtype=torch.float64)
        expected[S // 2 - radius : S // 2 + radius + 1, S // 2 - radius : S // 2 + radius + 1] = torch.outer(kernel,
                                                                                                              kernel)
        torch.testing.assert_close(image, expected, atol=1e-12, rtol=0)


def test_no_augmentation_returns_the_batch_untouched():
    images, masks = block_masks()
    out_images, out_masks = BatchAugment(AugmentConfig())(images, masks, np.random.default_rng(0))
    assert out_images is images and out_masks is masks


def test_batched_blur_equals_one_convolution_per_image():
    images = torch.rand(4, 3, 20, 24)
    sigmas = torch.tensor([0.0, 0.5, 1.0, 2.0])
    radius = 6
    blurred = blur(images, sigmas, radius)
    kernels = gaussian_kernels(sigmas, radius)
    for index in range(4):  # reference: a plain 2-D convolution with the outer product kernel, image by image
        kernel_2d = torch.outer(kernels[index], kernels[index]).expand(3, 1, -1, -1)
        padded = F.pad(images[index : index + 1], (radius,) * 4, mode="reflect")
        expected = F.conv2d(padded, kernel_2d, groups=3)
        torch.testing.assert_close(blurred[index : index + 1], expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(blurred[0], images[0], atol=1e-6, rtol=0)  # sigma 0: unchanged


def test_augment_config_group_and_its_errors():
    cfg = load_config(None, ["data.augment.rotate_prob=0.5", "data.augment.gamma_prob=0.3",
                             "data.augment.gamma_range=[0.8, 1.2]"])
    assert cfg.data.augment.rotate_prob == 0.5 and cfg.data.augment.gamma_range == [0.8, 1.2]
    with pytest.raises(ConfigError, match="data.augment.rotate_prob' must be <= 1"):
        load_config(None, ["data.augment.rotate_prob=2"])
    with pytest.raises(ConfigError, match="data.augment.scale_range' must be \\[low, high\\]"):
        load_config(None, ["data.augment.scale_range=[1.5, 0.5]"])
    with pytest.raises(ConfigError, match="unknown config key 'data.augment.shear'"):
        load_config(None, ["data.augment.shear=0.1"])


def _hits_foreground(mask_windows) -> float:
    return float(np.mean([bool((window > 0).any()) for window in mask_windows]))


def test_foreground_windows_hit_foreground_at_the_configured_rate():
    mask = torch.zeros(128, 128, dtype=torch.int64)
    mask[5:7, 100:102] = 2  # a tiny object: a uniform 16 x 16 window covers it with probability < 1 %
    rng = np.random.default_rng(0)
    for fraction in (0.0, 0.33, 0.7):
        windows = [mask[top : top + 16, left : left + 16]
                   for top, left in (window_origin(mask, 16, rng, fraction) for _ in range(2000))]
        assert abs(_hits_foreground(windows) - fraction) < 0.05, fraction


@pytest.mark.parametrize("mode", ["pad", "random_crop"])
def test_pad_and_random_crop_windows_hit_foreground_at_the_configured_rate(mode):
    mask = torch.zeros(60, 80, dtype=torch.int64)
    mask[50:52, 75:77] = 1  # a uniform 16 x 16 window covers it with probability 1.7 %
    mask[0, :] = IGNORE_LABEL  # ignored pixels are not foreground
    image = torch.rand(3, 60, 80)
    transform = SegmentationTransform(16, lambda x: (x - 0.5) / 0.25, train=True, resize_mode=mode, foreground_fraction=0.33)
    rng = np.random.default_rng(3)
    windows = [transform(image, mask, rng)[1] for _ in range(1000)]
    assert all(tuple(window.shape) == (16, 16) for window in windows)
    assert abs(_hits_foreground(windows) - 0.33) < 0.05
