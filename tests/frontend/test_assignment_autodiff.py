"""Assignment into a tensor that autodiff records, against torch: the gradient reaches the old value except where
written and the written value; a leaf that requires grad is refused; an operand changed in place after an op was
recorded makes that op's backward refuse (the version counter)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze

torch = pytest.importorskip("torch")

R = np.random.default_rng(0)
A, B, C = R.standard_normal((3, 4)), R.standard_normal(4), R.standard_normal(())


def _scaled_then_row(m: Any, a: Any, b: Any, c: Any) -> Any:
    x = a * 2
    x[0] = b
    return x


def _element_and_mask(m: Any, a: Any, b: Any, c: Any) -> Any:
    x = a - 0.25   # not a.tanh(): torch's tanh saves its result, so torch refuses its backward after this
    x[1, 2] = c
    x[x > 0.5] = c * 3
    return x * a


def _index_put_masked_fill_and_copy(m: Any, a: Any, b: Any, c: Any) -> Any:
    x = a + 1
    x.index_put_((m.tensor([0, 2]), m.tensor([1, 3])), b[:2], accumulate=True)
    x.masked_fill_(m.tensor([True, False, False, True]), 0.5)
    y = b * 1
    y.copy_(c)
    return x.sum(0) * y


def _column_from_a_value_then_reused(m: Any, a: Any, b: Any, c: Any) -> Any:
    x = m.zeros(3, 4, dtype=m.float64)
    x[:, 1] = a[:, 0] * c
    x[2] = x[0] + b
    return x.exp()


CASES: list[Callable[..., Any]] = [_scaled_then_row, _element_and_mask, _index_put_masked_fill_and_copy,
                                   _column_from_a_value_then_reused]


def _run(lib: Any, fn: Callable[..., Any]) -> tuple[np.ndarray, list[np.ndarray]]:
    leaves = [lib.tensor(v, dtype=lib.float64, requires_grad=True) for v in (A, B, C)]
    out = fn(lib, *leaves)
    weights = lib.tensor(np.arange(out.numel(), dtype=np.float64).reshape(tuple(out.shape)) / 7)
    (out * weights).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() if t.grad is not None else np.zeros(t.shape) for t in leaves]


@pytest.mark.parametrize("fn", CASES, ids=[f.__name__.strip("_") for f in CASES])
def test_assignment_gradients_match_torch(fn: Callable[..., Any]) -> None:
    (ours, our_grads), (theirs, their_grads) = _run(braze, fn), _run(torch, fn)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    for mine, want in zip(our_grads, their_grads):
        np.testing.assert_allclose(mine, want, rtol=1e-12, atol=1e-12)


def test_assigned_tensor_is_a_non_leaf_of_the_update() -> None:
    a = braze.tensor(A, requires_grad=True)
    x = a * 2
    version = x._version
    x[0] = 1.0
    assert x._version == version + 1 and not x.is_leaf and x.requires_grad


def test_backward_through_an_op_whose_operand_was_assigned_is_refused() -> None:
    a = braze.tensor(A, requires_grad=True)
    x = a * 2
    y = x * x   # mul's backward reads x
    x[1] = 0.0
    with pytest.raises(braze.BrazeError, match=r"modified by an inplace operation: operand 0 of mul \(shape \(3, 4\), "
                                               r"float64\) is at version 1; expected version 0 instead"):
        y.sum().backward()


def test_copy_into_a_leaf_that_requires_grad_is_refused() -> None:
    w = braze.tensor(B, requires_grad=True)
    with pytest.raises(braze.BrazeError, match="copy_: a leaf Variable that requires grad is being used in an "
                                               "in-place operation"):
        w.copy_(braze.zeros(4))


def test_copy_under_no_grad_bumps_the_version_a_recorded_op_checks() -> None:
    w = braze.tensor(B, requires_grad=True)
    x = braze.tensor(B)
    y = w * x   # x is read by mul's backward for w
    with braze.no_grad():
        x.copy_(braze.zeros(4))
    with pytest.raises(braze.BrazeError, match="operand 1 of mul"):
        y.sum().backward()
