"""Autodiff semantics: accumulation, the Gradients mapping, grad mode, detach, inner, requires_grad flow."""
from __future__ import annotations

import numpy as np
import pytest

import braze
import braze.nn.functional as F


def _leaf(values: list[float]) -> braze.Tensor:
    return braze.tensor(np.array(values), requires_grad=True)


def test_backward_fills_leaf_grad() -> None:
    x = _leaf([1.0, 2.0])
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_backward_accumulates_across_calls() -> None:
    x = _leaf([1.0, 2.0])
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    assert x.grad.tolist() == [6.0, 6.0]


def test_backward_returns_gradients_by_identity() -> None:
    x, y = _leaf([1.0, 2.0]), _leaf([1.0, 2.0])
    grads = (x * 2 + y * 5).sum().backward()
    assert isinstance(grads, braze.Gradients) and len(grads) == 2
    assert grads[x].tolist() == [2.0, 2.0] and grads[y].tolist() == [5.0, 5.0]
    assert x in grads and braze.tensor([1.0]) not in grads and set(map(id, grads)) == {id(x), id(y)}


def test_gradients_hold_this_call_only() -> None:
    x = _leaf([1.0])
    x.sum().backward()
    grads = (x * 4).sum().backward()
    assert grads[x].tolist() == [4.0] and x.grad.tolist() == [5.0]


def test_gradients_missing_tensor_raises_key_error() -> None:
    x = _leaf([1.0])
    grads = x.sum().backward()
    with pytest.raises(KeyError):
        grads[braze.tensor([1.0])]


def test_tensor_used_twice_sums_both_paths() -> None:
    x = _leaf([3.0])
    y = x * x + x
    y.backward()
    assert x.grad.tolist() == [7.0]


def test_backward_needs_scalar_or_gradient() -> None:
    x = _leaf([1.0, 2.0])
    with pytest.raises(braze.BrazeError, match="single-element"):
        (x * 2).backward()
    (x * 2).backward(gradient=braze.tensor(np.array([1.0, 10.0])))
    assert x.grad.tolist() == [2.0, 20.0]


def test_backward_on_untracked_tensor_raises() -> None:
    with pytest.raises(braze.BrazeError, match="does not require grad"):
        braze.tensor([1.0]).sum().backward()


def test_non_leaf_grads_are_not_retained() -> None:
    x = _leaf([1.0])
    h = x * 2
    (h * 3).sum().backward()
    assert h.grad is None and not h.is_leaf and x.grad.tolist() == [6.0]


def test_requires_grad_propagates() -> None:
    x, c = _leaf([1.0]), braze.tensor([2.0])
    out = x * c
    assert out.requires_grad and out.is_tracked() and not c.requires_grad and not (c * c).requires_grad


def test_is_require_grad_and_is_tracked() -> None:
    x = braze.tensor([1.0])
    assert not x.is_require_grad() and not x.is_tracked()
    x.requires_grad_(True)
    assert x.is_require_grad() and x.is_tracked()


def test_no_grad_context_records_nothing() -> None:
    x = _leaf([1.0])
    with braze.no_grad():
        y = x * 2
        assert not braze.is_grad_enabled()
    assert braze.is_grad_enabled() and not y.requires_grad and y.is_leaf


def test_no_grad_as_decorator() -> None:
    @braze.no_grad()
    def double(t: braze.Tensor) -> braze.Tensor:
        return t * 2
    assert not double(_leaf([1.0])).requires_grad


def test_enable_grad_inside_no_grad() -> None:
    x = _leaf([1.0])
    with braze.no_grad():
        with braze.enable_grad():
            y = x * 2
    assert y.requires_grad


def test_inference_mode_records_nothing_as_context_and_decorator() -> None:
    x = _leaf([1.0])

    @braze.inference_mode
    def bare() -> braze.Tensor:
        return x * 2

    @braze.inference_mode()
    def called() -> braze.Tensor:
        return x * 2

    with braze.inference_mode():
        y = x * 2
    assert [t.requires_grad for t in (y, bare(), called())] == [False, False, False] and braze.is_grad_enabled()


@pytest.mark.parametrize("outer", [True, False])
def test_inference_mode_false_leaves_the_grad_mode(outer: bool) -> None:
    with braze.set_grad_enabled(outer), braze.inference_mode(False):
        assert (_leaf([1.0]) * 2).requires_grad is outer


def test_set_grad_enabled_as_context() -> None:
    with braze.set_grad_enabled(False):
        assert not braze.is_grad_enabled()
    assert braze.is_grad_enabled()


def test_detach_shares_data_and_stops_gradient() -> None:
    x = _leaf([2.0])
    d = x.detach()
    (x * d).sum().backward()
    assert not d.requires_grad and np.shares_memory(d.numpy(), x.detach().numpy()) and x.grad.tolist() == [2.0]


def test_inner_disables_autodiff() -> None:
    x = _leaf([2.0])
    inner = x.inner()
    out = inner * 3
    assert x.is_autodiff() and not inner.is_autodiff() and not out.is_autodiff() and not out.is_tracked()


def test_inner_cannot_require_grad() -> None:
    with pytest.raises(braze.BrazeError, match="autodiff disabled"):
        braze.tensor([1.0]).inner().requires_grad_(True)


def test_mixing_inner_with_tracked_tensor_is_an_error() -> None:
    x = _leaf([2.0])
    with pytest.raises(braze.BrazeError, match="without autodiff"):
        x * x.inner()


def test_requires_grad_only_on_float_leaves() -> None:
    with pytest.raises(braze.BrazeError, match="floating-point"):
        braze.tensor([1]).requires_grad_(True)
    with pytest.raises(braze.BrazeError, match="leaf"):
        (_leaf([1.0]) * 2).requires_grad_(False)


def test_non_differentiable_op_results_do_not_require_grad() -> None:
    x = _leaf([1.0, 3.0])
    assert not (x > 2).requires_grad and not x.argmax().requires_grad


def test_multi_result_op_gradient() -> None:
    x = braze.tensor(np.random.default_rng(0).standard_normal((4, 3)), requires_grad=True)
    w, b = braze.ones(3, dtype=braze.float64), braze.zeros(3, dtype=braze.float64)
    y, mean, var = braze.apply("batch_norm_train", x, w, b, eps=1e-5)
    grads = (mean.sum() * 4).backward()
    np.testing.assert_allclose(grads[x].numpy(), np.ones((4, 3)))
    assert y.requires_grad and var.requires_grad


def test_backward_of_a_leaf_itself() -> None:
    x = _leaf([5.0])
    x.backward()
    assert x.grad.tolist() == [1.0]


def test_grad_of_integer_path_is_none() -> None:
    x = _leaf([1.0, 2.0])
    out = (x * x.argmax().float()).sum()
    out.backward()
    assert x.grad.tolist() == [1.0, 1.0]


def test_functional_dropout_gradient_uses_same_mask() -> None:
    braze.manual_seed(0)
    x = braze.ones(100, dtype=braze.float64, requires_grad=True)
    y = F.dropout(x, 0.5)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.detach().numpy())


def test_no_grad_decorator_restores_mode_after_recursion() -> None:
    @braze.no_grad
    def depth(k: int) -> bool:
        return depth(k - 1) if k else braze.is_grad_enabled()
    assert depth(3) is False and braze.is_grad_enabled()


def test_set_grad_enabled_as_decorator_applies_inside_calls_only() -> None:
    @braze.set_grad_enabled(False)
    def inside() -> bool:
        return braze.is_grad_enabled()
    assert braze.is_grad_enabled() and inside() is False and braze.is_grad_enabled()
