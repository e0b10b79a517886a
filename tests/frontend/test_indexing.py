"""Tensor indexing: values match numpy (torch agrees on these), gradients scatter back, unsupported index kinds fail
clearly, traced masks raise a TraceError."""
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
    ([0, 1], [1, 2]), ([1, 0], slice(None), [3, 0]), (slice(None), [[0], [2]], [1, 3]), ([1], None, [2]),
    (A[..., 0] > 5,), (slice(None), A[0] > 3), (Ellipsis, np.array([True, False, False, True])), ([True, False],),
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


def test_negative_step_is_rejected_like_torch() -> None:
    with pytest.raises(ValueError, match="step must be positive"):
        braze.tensor(A)[::-1]


def test_out_of_range_int_index() -> None:
    with pytest.raises(IndexError, match="out of range"):
        braze.tensor(A)[2]


def test_too_many_indices() -> None:
    with pytest.raises(IndexError, match="too many indices"):
        braze.tensor(A)[0, 0, 0, 0]


def test_float_tensor_index_is_rejected() -> None:
    with pytest.raises(IndexError, match="integer"):
        braze.tensor(A)[braze.tensor([0.0])]


def test_two_array_indices_pick_pairs() -> None:
    np.testing.assert_array_equal(braze.tensor(A)[[0, 1], [1, 2]].numpy(), A[[0, 1], [1, 2]])


def test_two_tensor_indices_gradient_scatters_back() -> None:
    x = braze.tensor(A, requires_grad=True)
    x[braze.tensor([0, 1, 1]), braze.tensor([2, 0, 0])].sum().backward()
    want = np.zeros_like(A)
    np.add.at(want, ([0, 1, 1], [2, 0, 0]), 1.0)
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_mask_index_gradient_reaches_the_selected_elements() -> None:
    x = braze.tensor(A, requires_grad=True)
    (x[x > 20] * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.where(A > 20, 2.0, 0.0))


def test_traced_mask_index_names_the_users_line() -> None:
    def f(x):
        return x[x > 0]
    with pytest.raises(braze.TraceError, match=r"test_indexing.py:\d+: boolean-mask indexing of a traced tensor"):
        braze.trace(f, braze.tensor(A))


def test_traced_two_array_index_matches_eager() -> None:
    idx = braze.tensor([[1, 0], [0, 1]])
    graph = braze.trace(lambda x, i: x[i, :, i], braze.tensor(A), idx)
    want = braze.tensor(A)[idx, :, idx].numpy()
    np.testing.assert_array_equal(braze.ir.interpret(graph, [A, idx.numpy()])[0], want)
