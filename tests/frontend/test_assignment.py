"""Indexed assignment: x[index] = value, masked_fill_ and index_put agree with numpy's assignment (torch's on these
index kinds), gradients flow to the assigned value, and traced assignments compile; in-place methods (add_, triu_,
...) update self with the out-of-place result, as torch's do."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import braze

A = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)
MASK = A[..., 0] > 5

CASES: list[tuple[Any, Any]] = [
    (0, 5.0), ((slice(None), 1), np.arange(4.0)), ((1, slice(0, 3, 2), -1), np.array([7.0, 8.0])),
    (([0, 1], [1, 2]), -1.0), (([0, 1], [1, 2]), np.array([[1.0], [2.0]]) * np.ones(4)), (MASK, 9.0),
    (MASK, np.arange(4.0)), ((MASK,), np.arange(4.0 * MASK.sum()).reshape(-1, 4)),
    ((Ellipsis, [0, 0, 3]), np.array([1.0, 2.0, 3.0])), (A > 10, -2.0), ((slice(None), [2, 0]), 0.0),
    ((slice(1, 1),), 3.0),
]


@pytest.mark.parametrize("index, value", CASES, ids=[str(k) for k in range(len(CASES))])
def test_setitem_matches_numpy(index: Any, value: Any) -> None:
    want = A.copy()
    want[index] = value
    x = braze.tensor(A)
    x[index] = braze.tensor(value) if isinstance(value, np.ndarray) else value
    np.testing.assert_array_equal(x.numpy(), want)


def test_setitem_with_tensor_indices_and_mask() -> None:
    x = braze.zeros(5)
    x[braze.tensor([1, 3])] = 1.0
    logits = braze.tensor([1.0, 2.0, 3.0, 4.0])
    logits[logits > 2] = braze.tensor([-1.0, -2.0])
    assert x.tolist() == [0.0, 1.0, 0.0, 1.0, 0.0] and logits.tolist() == [1.0, 2.0, -1.0, -2.0]


def test_setitem_casts_the_value_to_the_tensors_dtype() -> None:
    x = braze.zeros(3, dtype=braze.long)
    x[1] = 2.7
    x[2] = braze.tensor(5.0)
    assert x.dtype == braze.int64 and x.tolist() == [0, 2, 5]


def test_setitem_gradient_reaches_the_assigned_value_only_where_written() -> None:
    v = braze.tensor([2.0, 3.0], requires_grad=True)
    x = braze.ones(2, 3, dtype=braze.float64)
    x[:, 1] = v.double()
    (x * braze.tensor(np.arange(6.0).reshape(2, 3))).sum().backward()
    assert v.grad.tolist() == [1.0, 4.0]


def test_setitem_into_a_leaf_that_requires_grad_is_refused_as_in_torch() -> None:
    w = braze.zeros(3, requires_grad=True)
    with pytest.raises(braze.BrazeError, match=r"x\[\.\.\.\] = value: a leaf Variable that requires grad is being "
                                               r"used in an in-place operation; assign under braze.no_grad\(\)"):
        w[0] = 1.0
    with braze.no_grad():
        w[0] = 1.0
    assert w.tolist() == [1.0, 0.0, 0.0] and w.requires_grad and w.is_leaf


def test_mask_assignment_of_a_value_too_large_is_refused() -> None:
    x = braze.zeros(2, 1)
    with pytest.raises(braze.ShapeError, match=r"value of shape \(3,\) does not broadcast"):
        x[braze.tensor([True, False])] = braze.ones(3)


def test_masked_fill_in_place_returns_self() -> None:
    x = braze.tensor([1.0, -2.0, 3.0])
    assert x.masked_fill_(x < 0, 0.0) is x and x.tolist() == [1.0, 0.0, 3.0]


def test_index_put_accumulate_sums_repeated_positions() -> None:
    x = braze.zeros(4, dtype=braze.float64)
    out = x.index_put((braze.tensor([0, 2, 0]),), braze.tensor([1.0, 2.0, 3.0], dtype=braze.float64),
                      accumulate=True)
    assert out.tolist() == [4.0, 0.0, 2.0, 0.0] and x.tolist() == [0.0] * 4
    x.index_put_((braze.tensor([3]),), braze.tensor(7.0, dtype=braze.float64))
    assert x.tolist() == [0.0, 0.0, 0.0, 7.0]


def _assign_all(x, mask, idx):
    y = x * 2
    y[:, 0] = 0.5
    y[mask] = -1.0
    y[idx] = 3.0
    y.masked_fill_(y > 10, 10.0)
    return y


def test_traced_assignment_compiles_and_matches_eager() -> None:
    x = braze.tensor(np.arange(12.0).reshape(3, 4))
    args = (x, x > 6, braze.tensor([2, 0]))
    compiled = braze.compile(_assign_all, *args)
    np.testing.assert_array_equal(compiled(*args).numpy(), _assign_all(*args).numpy())
    ops = {n.op for n in braze.trace(_assign_all, *args).nodes}
    assert "scatter" in ops and "where" in ops


def test_traced_mask_assignment_of_a_vector_names_the_users_line() -> None:
    def f(x):
        x[x > 0] = braze.tensor([1.0, 2.0])
        return x
    with pytest.raises(braze.TraceError, match=r"test_assignment.py:\d+: boolean-mask indexing"):
        braze.trace(f, braze.tensor([1.0, 2.0]))


M = np.arange(-6.0, 10.0).reshape(4, 4) / 2
IN_PLACE = [("add_", (M,), {"alpha": 2}), ("sub_", (1.5,), {}), ("mul_", (M,), {}), ("div_", (2.0,), {}),
            ("pow_", (2,), {}), ("clamp_", (), {"min": -1, "max": 2}), ("triu_", (1,), {}),
            ("tril_", (), {"diagonal": -1}), ("exp_", (), {}), ("neg_", (), {}), ("floor_", (), {}),
            ("remainder_", (1.5,), {})]


def _args(args: tuple[Any, ...], tensor: Any) -> tuple[Any, ...]:
    return tuple(tensor(a) if isinstance(a, np.ndarray) else a for a in args)


@pytest.mark.parametrize("name, args, kwargs", IN_PLACE, ids=[c[0] for c in IN_PLACE])
def test_in_place_method_updates_self_with_the_out_of_place_result(name: str, args: tuple, kwargs: dict) -> None:
    x = braze.tensor(M)
    expected = getattr(x, name[:-1])(*_args(args, braze.tensor), **kwargs).numpy()
    assert getattr(x, name)(*_args(args, braze.tensor), **kwargs) is x
    np.testing.assert_array_equal(x.numpy(), expected)


def test_in_place_arithmetic_keeps_the_tensors_dtype() -> None:
    x, i = braze.ones(2), braze.arange(3)
    x.mul_(braze.tensor([2.0, 3.0], dtype=braze.float64))
    i.mul_(2)
    assert (x.dtype, x.tolist(), i.dtype, i.tolist()) == (braze.float32, [2.0, 3.0], braze.int64, [0, 2, 4])


def test_in_place_arithmetic_refuses_a_float_result_for_an_integer_tensor() -> None:
    with pytest.raises(braze.BrazeError, match="add_: the result type float32 cannot be stored in place in a tensor "
                                               "of dtype int64"):
        braze.arange(3).add_(0.5)


def _causal_scores(x):
    mask = braze.full((x.shape[-1], x.shape[-1]), float("-inf"))
    mask.triu_(1)
    return x.mul_(0.5) + mask


def test_traced_in_place_updates_compile_and_match_eager() -> None:
    x = braze.tensor(M)
    np.testing.assert_array_equal(braze.compile(_causal_scores, x)(M), _causal_scores(braze.tensor(M)).numpy())


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name, args, kwargs", IN_PLACE, ids=[c[0] for c in IN_PLACE])
def test_in_place_method_matches_torch(name: str, args: tuple, kwargs: dict) -> None:
    ours, theirs = braze.tensor(M), torch.tensor(M)
    getattr(ours, name)(*_args(args, braze.tensor), **kwargs)
    getattr(theirs, name)(*_args(args, torch.tensor), **kwargs)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("index, value", CASES, ids=[str(k) for k in range(len(CASES))])
def test_setitem_matches_torch(index: Any, value: Any) -> None:
    def as_torch(i: Any) -> Any:
        if isinstance(i, tuple):
            return tuple(as_torch(j) for j in i)
        return torch.tensor(i) if isinstance(i, (list, np.ndarray)) else i
    want = torch.tensor(A)
    want[as_torch(index)] = torch.tensor(value) if isinstance(value, np.ndarray) else value
    x = braze.tensor(A)
    x[index] = braze.tensor(value) if isinstance(value, np.ndarray) else value
    np.testing.assert_array_equal(x.numpy(), want.numpy())
