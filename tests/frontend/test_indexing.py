"""Tensor indexing: values match numpy, gradients scatter back, unsupported index kinds fail clearly."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import braze

A = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)

INDICES: list[Any] = [
    1, -1, (0, 2), (1, -1, 3), slice(None), slice(1, None), (slice(None), slice(None, None, 2)),
    (Ellipsis, 1), (Ellipsis, slice(1, 3)), (None, 0), (0, None, slice(None), None), (slice(None), None, 1),
    (slice(5, 1),), (slice(-10, 10, 3),), [1, 0, 1], (slice(None), [2, 0]), (Ellipsis, [3, -4, 1]),
    (slice(None), np.array([[0, 1], [2, 2]])), (1, [0, 2], slice(None, None, 2)),
    (None, slice(None), [0], None), Ellipsis, (),
]


@pytest.mark.parametrize("index", INDICES, ids=[repr(i) for i in INDICES])
def test_getitem_matches_numpy(index: Any) -> None:
    got = braze.tensor(A)[index]
    want = A[index]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


def test_int_with_array_index_follows_torch() -> None:
    # torch applies integer indices first (numpy would move the array's dims to the front here)
    got = braze.tensor(A)[0, :, [1, 1]]
    np.testing.assert_array_equal(got.numpy(), A[0][:, [1, 1]])


def test_tensor_index_selects_on_one_axis() -> None:
    idx = braze.tensor([[2, 0], [-1, 1]])
    np.testing.assert_array_equal(braze.tensor(A)[:, idx].numpy(), A[:, np.array([[2, 0], [-1, 1]])])


@pytest.mark.parametrize("index", [(0, slice(1, None)), (slice(None), [2, 0, 2]), (Ellipsis, slice(None, None, 3)),
                                   (1, None, -1)], ids=repr)
def test_getitem_gradient_scatters_back(index: Any) -> None:
    x = braze.tensor(A, requires_grad=True)
    out = x[index]
    weights = np.arange(1.0, out.numel() + 1).reshape(out.shape)
    (out * braze.tensor(weights)).sum().backward()
    want = np.zeros_like(A)
    np.add.at(want, index, weights)
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_getitem_returns_a_new_tensor_for_full_slices() -> None:
    x = braze.tensor(A)
    assert x[...] is not x and x[:].shape == A.shape


def test_bool_mask_index_names_the_limitation() -> None:
    x = braze.tensor(A)
    with pytest.raises(IndexError, match="boolean-mask indexing is not supported"):
        x[x > 3]


def test_bool_array_index_names_the_limitation() -> None:
    with pytest.raises(IndexError, match="boolean-mask"):
        braze.tensor(A)[np.array([True, False])]


def test_negative_step_is_rejected_like_torch() -> None:
    with pytest.raises(ValueError, match="step must be positive"):
        braze.tensor(A)[::-1]


def test_two_array_indices_are_rejected() -> None:
    with pytest.raises(IndexError, match="one integer-array index"):
        braze.tensor(A)[[0, 1], [1, 2]]


def test_out_of_range_int_index() -> None:
    with pytest.raises(IndexError, match="out of range"):
        braze.tensor(A)[2]


def test_too_many_indices() -> None:
    with pytest.raises(IndexError, match="too many indices"):
        braze.tensor(A)[0, 0, 0, 0]


def test_float_tensor_index_is_rejected() -> None:
    with pytest.raises(IndexError, match="integer"):
        braze.tensor(A)[braze.tensor([0.0])]
