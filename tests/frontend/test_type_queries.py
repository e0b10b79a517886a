"""torch.finfo / torch.iinfo limits, torch.is_tensor and torch.is_floating_point, as torch reports them."""
from __future__ import annotations

import numpy as np
import pytest

import braze


@pytest.mark.parametrize("dtype", [braze.float16, braze.float32, braze.float64])
def test_finfo_gives_the_formats_limits(dtype: braze.DType) -> None:
    info, expected = braze.finfo(dtype), np.finfo(dtype.numpy_name)
    assert (info.bits, info.eps, info.max, info.min, info.tiny, info.resolution, info.dtype) == \
        (expected.bits, expected.eps, expected.max, expected.min, expected.smallest_normal, expected.resolution,
         dtype.numpy_name)


def test_finfo_bfloat16_has_float32_range_and_8_significand_bits() -> None:
    info = braze.finfo(braze.bfloat16)
    assert (info.bits, info.eps, info.max, info.min, info.tiny, info.resolution) == \
        (16, 2.0 ** -7, (2 - 2.0 ** -7) * 2.0 ** 127, -(2 - 2.0 ** -7) * 2.0 ** 127, 2.0 ** -126, 0.01)


def test_finfo_defaults_to_float32() -> None:
    assert braze.finfo().max == braze.finfo(braze.float32).max


def test_finfo_min_masks_a_softmax_like_minus_infinity() -> None:
    """The masking idiom of attention code: (1 - mask) * finfo(dtype).min stays finite and zeroes masked keys."""
    scores, mask = braze.zeros(1, 3), braze.tensor([[1.0, 1.0, 0.0]])
    probs = braze.softmax(scores + (1.0 - mask) * braze.finfo(scores.dtype).min, dim=-1)
    assert probs.tolist() == [[0.5, 0.5, 0.0]]


@pytest.mark.parametrize("dtype", [braze.int8, braze.uint8, braze.int32, braze.int64])
def test_iinfo_gives_the_integer_range(dtype: braze.DType) -> None:
    info, expected = braze.iinfo(dtype), np.iinfo(dtype.numpy_name)
    assert (info.bits, info.max, info.min, info.dtype) == (expected.bits, expected.max, expected.min, dtype.numpy_name)


def test_finfo_refuses_integer_dtypes_naming_iinfo() -> None:
    with pytest.raises(braze.BrazeError, match=r"finfo: type must be a floating dtype .*got braze\.int64; use "
                                               r"braze\.iinfo"):
        braze.finfo(braze.int64)


def test_iinfo_refuses_bool_naming_the_integer_dtypes() -> None:
    with pytest.raises(braze.BrazeError, match=r"iinfo: type must be an integer dtype \(braze\.int32, .*got "
                                               r"braze\.bool"):
        braze.iinfo(braze.bool)


def test_is_tensor_counts_tensors_and_parameters_only() -> None:
    assert [braze.is_tensor(x) for x in (braze.ones(1), braze.nn.Parameter(braze.ones(1)), 1.0, np.ones(1))] == \
        [True, True, False, False]


def test_is_floating_point_function_follows_the_dtype() -> None:
    assert [braze.is_floating_point(x) for x in (braze.ones(1), braze.arange(2), braze.nn.Parameter(braze.ones(1)))] \
        == [True, False, True]


def test_is_floating_point_refuses_a_python_number() -> None:
    with pytest.raises(braze.BrazeError, match="is_floating_point: argument 'input' must be a Tensor, got float"):
        braze.is_floating_point(3.0)


def test_numel_counts_tensors_and_parameters() -> None:
    assert (braze.numel(braze.ones(2, 3)), braze.numel(braze.nn.Linear(4, 5).weight)) == (6, 20)


def test_numel_refuses_a_python_list() -> None:
    with pytest.raises(braze.BrazeError, match="numel: argument 'input' must be a Tensor, got list"):
        braze.numel([1, 2])


# (type1, type2, torch.promote_types, torch.can_cast(type1, type2)), as torch 2.13 gives them
PROMOTIONS = [("int64", "float32", "float32", True), ("float32", "float64", "float64", True),
              ("bool", "int32", "int32", True), ("uint8", "int64", "int64", True),
              ("float64", "int8", "float64", False), ("int32", "bool", "int32", False)]


@pytest.mark.parametrize("a, b, promoted, castable", PROMOTIONS)
def test_promote_types_and_can_cast_follow_torchs_categories(a: str, b: str, promoted: str, castable: bool) -> None:
    x, y = getattr(braze, a), getattr(braze, b)
    assert (braze.promote_types(x, y), braze.can_cast(x, y)) == (getattr(braze, promoted), castable)


def test_promote_types_without_a_braze_dtype_for_the_result_says_so() -> None:
    with pytest.raises(braze.DTypeError, match="no braze dtype holds both int8 and uint8"):
        braze.promote_types(braze.int8, braze.uint8)
