"""The dispatcher: operand conversion, attribute checks, errors, results, recording and interception."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import braze
from braze.frontend.dispatch import apply, eager_apply, intercept
from braze.ir.errors import AttributeSchemaError, UnknownOpError


class Holder:
    """An object standing for a module parameter: it hands apply a Tensor."""

    def __init__(self, tensor: braze.Tensor) -> None:
        self.tensor = tensor

    def __braze_tensor__(self) -> braze.Tensor:
        return self.tensor


def test_apply_accepts_braze_tensor_protocol() -> None:
    w = braze.tensor([1.0, 2.0], requires_grad=True)
    out = apply("mul", Holder(w), braze.tensor([3.0, 3.0]))
    out.sum().backward()
    assert out.tolist() == [3.0, 6.0] and w.grad.tolist() == [3.0, 3.0]


def test_tensor_operators_accept_braze_tensor_protocol() -> None:
    assert (braze.tensor([1.0]) + Holder(braze.tensor([2.0]))).tolist() == [3.0]


def test_apply_lifts_numbers_to_first_tensor_dtype() -> None:
    out = apply("add", braze.tensor(np.array([1.0])), 2)
    assert out.dtype == braze.float64 and out.tolist() == [3.0]


def test_apply_accepts_numpy_arrays() -> None:
    assert apply("add", np.ones(2, np.float32), braze.ones(2)).tolist() == [2.0, 2.0]


def test_apply_returns_tuple_for_multi_result_ops() -> None:
    x = braze.tensor(np.random.default_rng(0).standard_normal((4, 2)))
    out = apply("batch_norm_train", x, braze.ones(2, dtype=braze.float64), braze.zeros(2, dtype=braze.float64))
    assert isinstance(out, tuple) and len(out) == 3 and out[1].shape == (2,)


def test_bad_matmul_raises_shape_error_naming_op_and_shapes() -> None:
    with pytest.raises(braze.ShapeError, match=r"matmul.*f32\[2,3\].*f32\[4,5\]"):
        braze.randn(2, 3) @ braze.randn(4, 5)


def test_binary_dtype_mismatch_through_apply_raises_dtype_error() -> None:
    with pytest.raises(braze.DTypeError, match="add"):
        apply("add", braze.ones(1), braze.ones(1, dtype=braze.float64))


def test_unknown_attribute_is_rejected() -> None:
    with pytest.raises(AttributeSchemaError, match="sum"):
        apply("sum", braze.ones(2), axis=0)


def test_unknown_op_names_close_matches() -> None:
    with pytest.raises(UnknownOpError, match="matmul"):
        apply("matmull", braze.ones(2))


def test_records_only_when_operand_requires_grad() -> None:
    x = braze.tensor([1.0], requires_grad=True)
    assert apply("exp", x).grad_fn == "exp" and apply("exp", x.detach()).grad_fn is None


def test_interceptor_sees_every_call_and_can_answer() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def handler(name: str, operands: tuple[Any, ...], attrs: dict[str, Any]) -> Any:
        seen.append((name, attrs))
        return "traced" if name == "exp" else NotImplemented
    with intercept(handler):
        assert braze.exp(braze.ones(1)) == "traced"
        eager = braze.ones(2).sum(dim=0)
    assert [n for n, _ in seen] == ["exp", "sum"] and seen[1][1] == {"axes": (0,), "keepdim": False}
    assert eager.item() == 2.0 and braze.exp(braze.zeros(1)).tolist() == [1.0]


def test_interceptor_can_record_and_compute_eagerly() -> None:
    recorded: list[str] = []

    def handler(name: str, operands: tuple[Any, ...], attrs: dict[str, Any]) -> Any:
        recorded.append(name)
        return eager_apply(name, *operands, **attrs)
    x = braze.tensor([1.0, 4.0], requires_grad=True)
    with intercept(handler):
        out = (x.sqrt() * 2).sum()
    out.backward()
    assert recorded == ["sqrt", "mul", "sum"] and x.grad.tolist() == [1.0, 0.5]


def test_apply_is_exported_at_top_level() -> None:
    assert braze.apply is apply
