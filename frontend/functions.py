"""The torch-style tensor functions (braze.exp, braze.matmul, braze.cat, ...), each a registered op via apply.

Argument names and defaults follow torch (`input`, `dim`, `keepdim`); dtype promotion happens here, before
the op is bound, because the IR never promotes.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple, Sequence

import numpy as np

from braze.ir.types import bool_, float32, float64, int64

from .dispatch import apply
from .movement import *  # noqa: F403  (re-exported: braze.reshape, braze.cat, ...)
from .movement import __all__ as _movement_all
from .movement import normalize_dim, normalize_dims
from .ordering import *  # noqa: F403  (re-exported: braze.sort, braze.topk, ...)
from .ordering import __all__ as _ordering_all
from .promotion import SCALARS, as_operand, as_tensor, binary_operands, cast, to_dtype
from .tensor import Tensor


class MinMax(NamedTuple):
    """The (values, indices) pair max/min return along a dimension, as torch.return_types.max."""

    values: Tensor
    indices: Tensor


# --- helpers ----------------------------------------------------------------------------------------------


def _floating(input: Any) -> Tensor:
    """Integer and bool tensors become float32 for float-only ops, as torch."""
    t = as_operand(input) if not isinstance(input, SCALARS) else as_tensor(input)
    return t if t.dtype.is_float else cast(t, float32)


# --- elementwise arithmetic -------------------------------------------------------------------------------


def add(input: Any, other: Any, *, alpha: float = 1) -> Tensor:
    """input + alpha * other, promoted like torch."""
    return apply("add", *binary_operands(input, other if alpha == 1 else mul(other, alpha)))


def sub(input: Any, other: Any, *, alpha: float = 1) -> Tensor:
    """input - alpha * other, promoted like torch."""
    return apply("sub", *binary_operands(input, other if alpha == 1 else mul(other, alpha)))


def mul(input: Any, other: Any) -> Tensor:
    """Elementwise product, promoted like torch."""
    return apply("mul", *binary_operands(input, other))


def div(input: Any, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    """True division (integer operands divide as float32, as torch), or rounded toward zero (rounding_mode="trunc")
    or down ("floor"), which keeps an integer dtype (computed through float64: exact below 2^53)."""
    if rounding_mode not in (None, "trunc", "floor"):
        raise ValueError(f"div: rounding_mode={rounding_mode!r} is not supported; supported values: None, 'trunc', "
                         f"'floor'")
    x, y = binary_operands(input, other)
    if rounding_mode is None:
        if not x.dtype.is_float:
            x, y = cast(x, float32), cast(y, float32)
        return apply("div", x, y)
    wide = x.dtype if x.dtype.is_float else float64
    q = apply("div", cast(x, wide), cast(y, wide))
    q = apply("floor", q) if rounding_mode == "floor" else apply("where", apply("lt", q, 0.0), apply("ceil", q),
                                                                   apply("floor", q))
    return cast(q, x.dtype)


def floor_divide(input: Any, other: Any) -> Tensor:
    """input / other rounded down (torch.floor_divide and the // operator)."""
    return div(input, other, rounding_mode="floor")


true_divide = divide = div
multiply, subtract = mul, sub


def pow(input: Any, exponent: Any) -> Tensor:
    """input ** exponent elementwise (floating-point operands)."""
    x, y = binary_operands(input, exponent)
    return apply("pow", x, y)


def neg(input: Tensor) -> Tensor:
    """Elementwise negation."""
    return apply("neg", input)


negative = neg


def abs(input: Tensor) -> Tensor:
    """Elementwise absolute value."""
    return apply("abs", input)


def sign(input: Tensor) -> Tensor:
    """Elementwise sign: -1, 0 or 1."""
    return apply("sign", input)


def square(input: Tensor) -> Tensor:
    """input * input."""
    return mul(input, input)


def exp(input: Tensor) -> Tensor:
    """Elementwise e ** input."""
    return apply("exp", _floating(input))


def log(input: Tensor) -> Tensor:
    """Elementwise natural logarithm."""
    return apply("log", _floating(input))


def sqrt(input: Tensor) -> Tensor:
    """Elementwise square root."""
    return apply("sqrt", _floating(input))


def rsqrt(input: Tensor) -> Tensor:
    """Elementwise 1 / sqrt(input)."""
    return apply("rsqrt", _floating(input))


def tanh(input: Tensor) -> Tensor:
    """Elementwise hyperbolic tangent."""
    return apply("tanh", _floating(input))


def sigmoid(input: Tensor) -> Tensor:
    """Elementwise logistic function 1 / (1 + exp(-input))."""
    return apply("sigmoid", _floating(input))


def erf(input: Tensor) -> Tensor:
    """Elementwise Gauss error function."""
    return apply("erf", _floating(input))


def relu(input: Tensor) -> Tensor:
    """Elementwise max(input, 0)."""
    return apply("relu", input)


def clamp(input: Tensor, min: float | None = None, max: float | None = None) -> Tensor:
    """Limit values to [min, max]; either bound may be None."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        out = input if min is None else maximum(input, min)
        return out if max is None else minimum(out, max)
    return apply("clamp", input, min=None if min is None else float(min), max=None if max is None else float(max))


clip = clamp


def maximum(input: Any, other: Any) -> Tensor:
    """Elementwise maximum of two tensors, promoted like torch."""
    return apply("maximum", *binary_operands(input, other))


def minimum(input: Any, other: Any) -> Tensor:
    """Elementwise minimum of two tensors, promoted like torch."""
    return apply("minimum", *binary_operands(input, other))


# --- comparisons, logic and selection ---------------------------------------------------------------------


def eq(input: Any, other: Any) -> Tensor:
    """Elementwise input == other (bool)."""
    return apply("eq", *binary_operands(input, other))


def ne(input: Any, other: Any) -> Tensor:
    """Elementwise input != other (bool)."""
    return apply("ne", *binary_operands(input, other))


def lt(input: Any, other: Any) -> Tensor:
    """Elementwise input < other (bool)."""
    return apply("lt", *binary_operands(input, other))


def le(input: Any, other: Any) -> Tensor:
    """Elementwise input <= other (bool)."""
    return apply("le", *binary_operands(input, other))


def gt(input: Any, other: Any) -> Tensor:
    """Elementwise input > other (bool)."""
    return apply("gt", *binary_operands(input, other))


def ge(input: Any, other: Any) -> Tensor:
    """Elementwise input >= other (bool)."""
    return apply("ge", *binary_operands(input, other))


def _as_bool(input: Any) -> Tensor:
    t = as_tensor(input)
    return t if t.dtype == bool_ else ne(t, 0)


def logical_not(input: Tensor) -> Tensor:
    """Elementwise not (nonzero counts as True)."""
    return eq(_as_bool(input), False)


def logical_and(input: Any, other: Any) -> Tensor:
    """Elementwise and (nonzero counts as True)."""
    return apply("mul", _as_bool(input), _as_bool(other))


def logical_or(input: Any, other: Any) -> Tensor:
    """Elementwise or (nonzero counts as True)."""
    return apply("maximum", _as_bool(input), _as_bool(other))


def where(condition: Tensor, input: Any, other: Any) -> Tensor:
    """Elements of `input` where `condition` holds, else of `other` (both promoted like a binary op)."""
    x, y = binary_operands(input, other)
    return apply("where", as_tensor(condition), x, y)


def masked_fill(input: Tensor, mask: Tensor, value: Any) -> Tensor:
    """`input` with `value` where `mask` is True; the value takes the input's dtype."""
    fill = value if isinstance(value, Tensor) else Tensor._wrap(np.asarray(value, dtype=input._data.dtype))
    return apply("where", as_tensor(mask), cast(fill, input.dtype), input)


# --- reductions -------------------------------------------------------------------------------------------


def sum(input: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
        dtype: Any = None) -> Tensor:
    """Sum over `dim` (all dims when None); integer tensors sum as int64, as torch."""
    x = as_tensor(input)
    if dtype is not None:
        x = to_dtype(x, dtype)
    elif x.dtype.is_integer:
        x = cast(x, int64)
    return apply("sum", x, axes=normalize_dims(dim, x.ndim), keepdim=keepdim)


def mean(input: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
         dtype: Any = None) -> Tensor:
    """Arithmetic mean over `dim` (all dims when None) of a floating-point tensor."""
    x = as_tensor(input, dtype)
    return apply("mean", x, axes=normalize_dims(dim, x.ndim), keepdim=keepdim)


def _extremum(name: str, input: Tensor, dim: Any, keepdim: bool) -> Tensor | MinMax:
    if isinstance(dim, Tensor):
        return (maximum if name == "max" else minimum)(input, dim)
    if dim is None:
        return apply(name, input, axes=None, keepdim=False)
    d = normalize_dim(dim, input.ndim)
    values = apply(name, input, axes=(d,), keepdim=keepdim)
    return MinMax(values, apply("arg" + name, input, axis=d, keepdim=keepdim))


def max(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor | MinMax:
    """The largest element; with `dim`, (values, indices) along it; with a tensor, the elementwise maximum."""
    return _extremum("max", input, dim, keepdim)


def min(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor | MinMax:
    """The smallest element; with `dim`, (values, indices) along it; with a tensor, the elementwise minimum."""
    return _extremum("min", input, dim, keepdim)


def amax(input: Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> Tensor:
    """The largest values over `dim` (all dims when empty); the gradient is shared among ties."""
    return apply("max", input, axes=normalize_dims(dim, input.ndim) or None, keepdim=keepdim)


def amin(input: Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> Tensor:
    """The smallest values over `dim` (all dims when empty); the gradient is shared among ties."""
    return apply("min", input, axes=normalize_dims(dim, input.ndim) or None, keepdim=keepdim)


def argmax(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """int64 index of the first largest element along `dim` (of the flattened tensor when None)."""
    return apply("argmax", input, axis=dim, keepdim=keepdim)


def argmin(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """int64 index of the first smallest element along `dim` (of the flattened tensor when None)."""
    return apply("argmin", input, axis=dim, keepdim=keepdim)


def var(input: Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None, keepdim: bool = False,
        *, correction: int | None = None) -> Tensor:
    """Variance over `dim` with Bessel's correction (correction=1) unless unbiased=False or correction=0."""
    if correction is None:
        correction = 0 if unbiased is False else 1
    axes = normalize_dims(dim, input.ndim)
    count = math.prod(input.shape[a] for a in (axes if axes is not None else range(input.ndim)))
    centered = sub(input, apply("mean", input, axes=axes, keepdim=True))
    return div(apply("sum", mul(centered, centered), axes=axes, keepdim=keepdim), float(count - correction))


def std(input: Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None, keepdim: bool = False,
        *, correction: int | None = None) -> Tensor:
    """Standard deviation: the square root of var with the same arguments."""
    return sqrt(var(input, dim, unbiased, keepdim, correction=correction))


def logsumexp(input: Tensor, dim: int | Sequence[int], keepdim: bool = False) -> Tensor:
    """log(sum(exp(input))) over `dim`, shifted by the (constant) maximum for stability."""
    axes = normalize_dims(dim, input.ndim)
    shift = apply("max", input.detach(), axes=axes, keepdim=True)
    total = apply("sum", exp(sub(input, shift)), axes=axes, keepdim=True)
    out = add(log(total), shift)
    return out if keepdim else apply("squeeze", out, axes=axes)


def _softmax_dim(name: str, input: Tensor, dim: int | None) -> int:
    if dim is None:
        warnings.warn(f"{name}: implicit dim is deprecated; pass dim", UserWarning, stacklevel=3)
        return 0 if input.ndim in (0, 1, 3) else 1
    return dim


def softmax(input: Tensor, dim: int | None = None, dtype: Any = None) -> Tensor:
    """exp(input) normalized to sum 1 along `dim` (computed stably)."""
    x = as_tensor(input, dtype)
    return apply("softmax", x, axis=_softmax_dim("softmax", x, dim))


def log_softmax(input: Tensor, dim: int | None = None, dtype: Any = None) -> Tensor:
    """log(softmax(input)) along `dim` (computed stably)."""
    x = as_tensor(input, dtype)
    return apply("log_softmax", x, axis=_softmax_dim("log_softmax", x, dim))


# --- linear algebra ------------------------------------------------------------------------------------------


def matmul(input: Any, other: Any) -> Tensor:
    """Matrix product with numpy/torch semantics (1-D operands, broadcast batch dims)."""
    return apply("matmul", *binary_operands(input, other))


__all__ = ["add", "sub", "mul", "div", "pow", "neg", "abs", "sign", "square", "exp", "log", "sqrt", "rsqrt", "tanh",
           "sigmoid", "erf", "relu", "clamp", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
           "logical_not", "logical_and", "logical_or", "where", "masked_fill", "sum", "mean", "max", "min", "amax",
           "amin", "argmax", "argmin", "var", "std", "logsumexp", "softmax", "log_softmax", "matmul", "negative",
           "clip", "as_tensor", "true_divide", "divide", "multiply", "subtract", "floor_divide", "MinMax",
           *_movement_all,
           *_ordering_all]
