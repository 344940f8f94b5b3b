import pytest
import torch

from paraformer_asr.checks import assert_shape, check_finite, check_padding_mask, lengths_to_mask


def test_assert_shape_binds_symbols_across_tensors():
    dims = assert_shape(torch.zeros(2, 5, 3), "B,T,F", "x")
    assert dims == {"B": 2, "T": 5, "F": 3}
    assert_shape(torch.zeros(2, 5), "B,T", "mask", dims)
    with pytest.raises(ValueError, match="'T' was bound to 5"):
        assert_shape(torch.zeros(2, 6), "B,T", "mask", dims)
    with pytest.raises(ValueError, match="expected 3 dims"):
        assert_shape(torch.zeros(2, 5), "B,T,F", "x")
    with pytest.raises(ValueError, match="must be 4"):
        assert_shape(torch.zeros(2, 5), "B,4", "x")


def test_padding_mask_checks_dtype_and_polarity():
    mask = lengths_to_mask(torch.tensor([3, 1]), 4)
    assert mask.tolist() == [[True, True, True, False], [True, False, False, False]]
    check_padding_mask(mask, "m", (2, 4))
    with pytest.raises(ValueError, match="torch.bool"):
        check_padding_mask(mask.float(), "m")
    with pytest.raises(ValueError, match="polarity"):
        check_padding_mask(~mask, "m")
    with pytest.raises(ValueError, match="no valid position"):
        check_padding_mask(torch.zeros(1, 3, dtype=torch.bool), "m")
    with pytest.raises(ValueError, match="does not match"):
        check_padding_mask(mask, "m", (2, 5))


def test_check_finite_names_the_tensor():
    check_finite(torch.ones(3), "ok")
    with pytest.raises(ValueError, match="features: 1 non-finite"):
        check_finite(torch.tensor([1.0, float("nan")]), "features")
