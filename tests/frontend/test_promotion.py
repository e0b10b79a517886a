"""torch's dtype promotion in the frontend, and the cast ops it inserts for autodiff."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from braze.frontend.promotion import result_dtype

f32, f64, i32, i64, b = braze.float32, braze.float64, braze.int32, braze.int64, braze.bool_


def _t(dtype: braze.DType, shape: tuple[int, ...] = (2,)) -> braze.Tensor:
    return braze.zeros(shape, dtype=dtype)


@pytest.mark.parametrize("a,b,want", [
    (_t(i64), 2.5, f32),        # an int tensor with a Python float takes the default float dtype
    (_t(i32), 2, i32),          # a Python int keeps the tensor's integer dtype
    (_t(f64), 2.5, f64),        # a Python float never widens a float tensor
    (_t(b), 1, i64),            # bool with a Python int counts as int64
    (_t(b), True, b),
    (_t(f32), _t(f64), f64),    # same category: the wider dtype
    (_t(i32), _t(i64), i64),
    (_t(i64), _t(f32), f32),    # int with float: the float tensor's dtype
    (_t(f32), _t(f64, ()), f32),  # a 0-d tensor of the same category does not widen
    (_t(i64), _t(f64, ()), f64),  # a 0-d tensor of a higher category decides
    (_t(i32), _t(i64, ()), i32),
    (_t(b), _t(i32), i32),
])
def test_result_dtype_follows_torch(a: object, b: object, want: braze.DType) -> None:
    assert result_dtype(a, b) == want


def test_int_tensor_times_float_is_float32() -> None:
    out = braze.tensor([1, 2]) * 2.5
    assert out.dtype == braze.float32 and out.tolist() == [2.5, 5.0]


def test_int_division_gives_float32() -> None:
    out = braze.tensor([1, 2]) / braze.tensor([2, 4])
    assert out.dtype == braze.float32 and out.tolist() == [0.5, 0.5]


def test_int_tensor_plus_float_tensor() -> None:
    out = braze.tensor([1, 2]) + braze.tensor(np.array([0.5, 0.5]))
    assert out.dtype == braze.float64 and out.tolist() == [1.5, 2.5]


def test_comparison_promotes_before_comparing() -> None:
    assert (braze.tensor([1, 2]) < 1.5).tolist() == [True, False]


def test_promotion_cast_is_differentiated() -> None:
    x = braze.tensor([1.0, 2.0], requires_grad=True)
    y = braze.tensor(np.array([3.0, 4.0]))
    out = x * y
    out.sum().backward()
    assert out.dtype == braze.float64 and x.grad.dtype == braze.float32 and x.grad.tolist() == [3.0, 4.0]


def test_numpy_scalar_takes_tensor_dtype_category() -> None:
    assert (braze.tensor([1.0]) * np.float64(2.0)).dtype == braze.float32


def test_unrepresentable_promotion_raises_dtype_error() -> None:
    with pytest.raises(braze.DTypeError):
        braze.tensor(np.array([1], np.uint8)) + braze.tensor(np.array([1], np.int8))


def test_reverse_operators_with_numpy_arrays_return_tensors() -> None:
    out = np.array([1.0, 2.0], np.float32) + braze.tensor([1.0, 1.0])
    assert isinstance(out, braze.Tensor) and out.tolist() == [2.0, 3.0]
