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
def test_intensity_augmentations_change_the_image_and_leave_the_mask(name):
    images, masks = block_masks()
    augment = BatchAugment(AugmentConfig(**{f"{name}_prob": 1.0}))
    changed, same_masks = augment(images, masks, np.random.default_rng(2))
    assert torch.equal(same_masks, masks) and changed.shape == images.shape
    assert not torch.allclose(changed, images)
    again, _ = augment(images, masks, np.random.default_rng(2))
    assert torch.equal(again, changed)  # a pure function of the generator


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
    cfg = load_config(None, ["data.augment.rotate_prob=0.5", "data.augment.gamma_range=[0.8, 1.2]"])
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
