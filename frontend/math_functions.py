"""Trigonometric, rounding and remainder functions, float checks (isnan, isinf, nan_to_num, isclose) and the
boolean reductions any/all, with torch's names and dtype rules.

Integer tensors round to themselves; fmod and remainder of integers compute in float64 (exact below 2^53) and
return the integer dtype, as torch does.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from braze.ir.types import bool_, float64, int64

from .dispatch import apply
from .functions import _floating, abs, eq, gt, logical_and, logical_not, logical_or, where
from .movement import normalize_dims
from .promotion import as_tensor, binary_operands, cast
from .tensor import Tensor


def sin(input: Tensor) -> Tensor:
    """Elementwise sine."""
    return apply("sin", _floating(input))


def cos(input: Tensor) -> Tensor:
    """Elementwise cosine."""
    return apply("cos", _floating(input))


def log1p(input: Tensor) -> Tensor:
    """Elementwise log(1 + input), accurate for small inputs."""
    return apply("log1p", _floating(input))


def expm1(input: Tensor) -> Tensor:
    """Elementwise exp(input) - 1, accurate for small inputs."""
    return apply("expm1", _floating(input))


def atan2(input: Any, other: Any) -> Tensor:
    """Elementwise arctangent of input / other in the quadrant of (other, input)."""
    y, x = binary_operands(input, other)
    if not y.dtype.is_float:
        y, x = _floating(y), _floating(x)
    return apply("atan2", y, x)


arctan2 = atan2


def _rounding(name: str, input: Tensor) -> Tensor:
    x = as_tensor(input)
    return apply(name, x) if x.dtype.is_float else x.clone()


def floor(input: Tensor) -> Tensor:
    """Elementwise largest integer <= input."""
    return _rounding("floor", input)


def ceil(input: Tensor) -> Tensor:
    """Elementwise smallest integer >= input."""
    return _rounding("ceil", input)


def round(input: Tensor, *, decimals: int = 0) -> Tensor:
    """Elementwise round half to even, at `decimals` decimal places."""
    if decimals == 0:
        return _rounding("round", input)
    scale = 10.0 ** decimals
    return apply("div", _rounding("round", apply("mul", input, scale)), scale)


def _remainder(name: str, input: Any, other: Any) -> Tensor:
    x, y = binary_operands(input, other)
    if x.dtype.is_float:
        return apply(name, x, y)
    return cast(apply(name, cast(x, float64), cast(y, float64)), x.dtype)


def fmod(input: Any, other: Any) -> Tensor:
    """Elementwise remainder of truncated division (the sign of input), as C fmod."""
    return _remainder("fmod", input, other)


def remainder(input: Any, other: Any) -> Tensor:
    """Elementwise remainder of floor division (the sign of other), as Python's %."""
    return _remainder("remainder", input, other)


def isnan(input: Tensor) -> Tensor:
    """Elementwise NaN test (bool)."""
    x = as_tensor(input)
    return apply("ne", x, x) if x.dtype.is_float else _all_false(x)


def isinf(input: Tensor) -> Tensor:
    """Elementwise test for +inf or -inf (bool)."""
    x = as_tensor(input)
    return eq(abs(x), float("inf")) if x.dtype.is_float else _all_false(x)


def isfinite(input: Tensor) -> Tensor:
    """Elementwise test for neither NaN nor infinite (bool)."""
    return logical_not(logical_or(isnan(input), isinf(input)))


def _all_false(x: Tensor) -> Tensor:
    return Tensor._wrap(np.zeros(x.shape, np.bool_)) if isinstance(x._data, np.ndarray) else apply("ne", x, x)


def nan_to_num(input: Tensor, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """NaN, +inf and -inf replaced by `nan` and by the dtype's largest and smallest finite values (or those given)."""
    x = as_tensor(input)
    if not x.dtype.is_float:
        return x.clone()
    info = np.finfo(x.dtype.numpy)
    out = where(apply("ne", x, x), nan, x)
    out = where(eq(x, float("inf")), float(info.max) if posinf is None else posinf, out)
    return where(eq(x, float("-inf")), float(info.min) if neginf is None else neginf, out)


def isclose(input: Any, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """Elementwise |input - other| <= atol + rtol * |other|, with equal infinities close (and NaNs, if equal_nan)."""
    x, y = binary_operands(input, other)
    if not x.dtype.is_float:
        x, y = cast(x, float64), cast(y, float64)
    diff = abs(apply("sub", x, y))
    close = logical_or(eq(x, y), apply("le", diff, apply("add", apply("mul", abs(y), rtol), atol)))
    return logical_or(close, logical_and(isnan(x), isnan(y))) if equal_nan else close


def allclose(input: Any, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Whether every element pair is close (see isclose)."""
    return bool(all(isclose(input, other, rtol, atol, equal_nan)))


def _nonzero(x: Tensor) -> Tensor:
    return x if x.dtype == bool_ else apply("ne", x, Tensor._wrap(np.zeros((), x._data.dtype)))


def any(input: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Whether some element is nonzero (over `dim`, or all dims when None); bool."""
    x = as_tensor(input)
    count = apply("sum", cast(_nonzero(x), int64), axes=normalize_dims(dim, x.ndim), keepdim=keepdim)
    return gt(count, 0)


def all(input: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Whether every element is nonzero (over `dim`, or all dims when None); bool."""
    x = as_tensor(input)
    return logical_not(any(logical_not(_nonzero(x)), dim, keepdim))


__all__ = ["sin", "cos", "log1p", "expm1", "atan2", "arctan2", "floor", "ceil", "round", "fmod", "remainder",
           "isnan", "isinf", "isfinite", "nan_to_num", "isclose", "allclose", "any", "all"]
