"""Pointwise arithmetic torch names that braze composes from registered ops: reciprocal, trunc (fix) and frac, lerp,
addcmul and addcdiv, logit, hypot, logaddexp and logaddexp2, xlogy, the one-sided clamps clamp_min and clamp_max,
sgn, sinc and copysign.

Each is written with ops the registry already defines, so it traces, differentiates and compiles as those do; the
forms keep float32 results within a few ulp of the exact values (lerp, addcmul, addcdiv and logaddexp round as
torch's forms do: within a few ulp of their terms) and give torch's values at infinities, NaN and the domain edges.
Operands promote as torch's; integer operands of the float functions compute in float32.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from braze.ir.errors import DTypeError
from braze.ir.types import float64

from .dispatch import apply
from .functions import _floating, abs, clamp, logical_and, logical_or, maximum, minimum, sign, where
from .math_functions import isinf
from .promotion import SCALARS, as_tensor, binary_operands, coerce, result_dtype
from .tensor import Tensor

_INV_LN2 = 1.0 / math.log(2.0)


def _float_operands(input: Any, other: Any) -> tuple[Tensor, Tensor]:
    """The two operands promoted as torch's, then to float32 when that is an integer or bool dtype."""
    x, y = binary_operands(input, other)
    return (x, y) if x.dtype.is_float else (_floating(x), _floating(y))


def reciprocal(input: Tensor) -> Tensor:
    """Elementwise 1 / input (integers divide as float32, as torch)."""
    return apply("div", 1.0, _floating(input))


def trunc(input: Tensor) -> Tensor:
    """Elementwise rounding toward zero (ceil below 0, floor elsewhere: trunc(-0.5) = -0); integers unchanged."""
    x = as_tensor(input)
    if not x.dtype.is_float:
        return x.clone()
    return where(apply("lt", x, 0.0), apply("ceil", x), apply("floor", x))


fix = trunc


def frac(input: Tensor) -> Tensor:
    """Elementwise fractional part, input - trunc(input), with input's sign (NaN at +-inf, as torch); zeros for
    integers."""
    x = as_tensor(input)
    if not x.dtype.is_float:
        return apply("mul", x, 0)
    return apply("sub", x, trunc(x))


def lerp(input: Tensor, end: Tensor, weight: Any) -> Tensor:
    """input + weight (end - input) for |weight| < 0.5, else end - (end - input)(1 - weight), as torch: exact at
    weight 0 and 1."""
    dtype = result_dtype(input, end, weight)
    start, stop = coerce((input, end), dtype)
    if not dtype.is_float:
        start, stop = _floating(start), _floating(stop)
    diff = apply("sub", stop, start)
    if isinstance(weight, SCALARS):
        w = Tensor._wrap(np.asarray(weight, dtype=start.dtype.numpy))
        if np.abs(w._data) < 0.5:
            return apply("add", start, apply("mul", w, diff))
        return apply("sub", stop, apply("mul", diff, apply("sub", 1.0, w)))
    (w,) = coerce((weight,), start.dtype)
    near_start = apply("add", start, apply("mul", w, diff))
    near_end = apply("sub", stop, apply("mul", diff, apply("sub", 1.0, w)))
    return where(apply("lt", abs(w), 0.5), near_start, near_end)


def _scaled(value: Any, tensor1: Tensor, dtype: Any) -> Tensor:
    """value * tensor1 with value taken in `dtype` (a float value truncates for integer tensors, as torch's)."""
    return tensor1 if value == 1 else apply("mul", Tensor._wrap(np.asarray(value).astype(dtype.numpy)), tensor1)


def addcmul(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
    """input + value * tensor1 * tensor2, multiplied in that order as torch's."""
    dtype = result_dtype(input, tensor1, tensor2)
    x, a, b = coerce((input, tensor1, tensor2), dtype)
    return apply("add", x, apply("mul", _scaled(value, a, dtype), b))


def addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
    """input + value * tensor1 / tensor2 for floating-point tensors (torch refuses integer ones)."""
    dtype = result_dtype(input, tensor1, tensor2)
    if not dtype.is_float:
        raise DTypeError(f"addcdiv: integer division is not supported (got {dtype}), as in torch; write "
                         f"input + value * tensor1 / tensor2 with floating-point tensors")
    x, a, b = coerce((input, tensor1, tensor2), dtype)
    return apply("add", x, apply("div", _scaled(value, a, dtype), b))


def logit(input: Tensor, eps: float | None = None) -> Tensor:
    """Elementwise log(x / (1 - x)), x first clamped to [eps, 1 - eps] when eps is given. Written
    log1p((2x - 1) / (1 - x)) for x >= 1/4 (2x - 1 is exact there), so that it stays accurate where the result
    is near 0; +-inf at 1 and 0, NaN outside [0, 1]."""
    x = _floating(input)
    if eps is not None:
        x = apply("clamp", x, min=float(eps), max=1.0 - float(eps))
    rest = apply("sub", 1.0, x)
    low = apply("log", apply("div", x, rest))
    high = apply("log1p", apply("div", apply("sub", apply("mul", x, 2.0), 1.0), rest))
    return where(apply("lt", x, 0.25), low, high)


def hypot(input: Any, other: Any) -> Tensor:
    """Elementwise sqrt(input^2 + other^2) without overflow or underflow: float32 squares and sums in float64
    (exact squares, one rounding), float64 as m sqrt(1 + (n / m)^2) with m, n the larger and smaller magnitude.
    An infinite operand gives inf, even with a NaN (as C's hypot)."""
    x, y = _float_operands(input, other)
    if x.dtype == float64:
        p, q = abs(x), abs(y)
        m, n = maximum(p, q), minimum(p, q)
        ratio = apply("div", n, where(apply("eq", m, 0.0), 1.0, m))
        out = apply("mul", m, apply("sqrt", apply("add", apply("mul", ratio, ratio), 1.0)))
    else:
        wide_x, wide_y = apply("cast", x, dtype=float64), apply("cast", y, dtype=float64)
        wide = apply("sqrt", apply("add", apply("mul", wide_x, wide_x), apply("mul", wide_y, wide_y)))
        out = apply("cast", wide, dtype=x.dtype)
    return where(logical_or(isinf(x), isinf(y)), float("inf"), out)


def log_add(a: Tensor, b: Tensor, log1p_of_exp: Any = lambda d: apply("log1p", apply("exp", d))) -> Tensor:
    """max(a, b) + log1p_of_exp(-|a - b|) (log(e^a + e^b) by default). Where the max is not finite (an infinity,
    both -inf, or NaN) the max itself with a zero gradient: the formula then sees finite stand-ins, so that no NaN
    reaches the gradient (logcumsumexp's scan pads with -inf)."""
    top = maximum(a, b)
    plain = logical_and(apply("gt", top, -math.inf), apply("lt", top, math.inf))
    a, b = where(plain, a, 0.0), where(plain, b, 0.0)
    out = apply("add", maximum(a, b), log1p_of_exp(apply("neg", abs(apply("sub", a, b)))))
    return where(plain, out, top.detach())


def logaddexp(input: Any, other: Any) -> Tensor:
    """Elementwise log(e^input + e^other), as max + log1p(exp(-|input - other|)) (torch's form: never overflows; near
    a result of 0 from operands of opposite sign, the error is a few ulp of max(|input|, |other|, 1))."""
    a, b = _float_operands(input, other)
    return log_add(a, b)


def logaddexp2(input: Any, other: Any) -> Tensor:
    """Elementwise log2(2^input + 2^other), as max + log1p(2^-|input - other|) / ln 2 (see logaddexp)."""
    a, b = _float_operands(input, other)
    return log_add(a, b, lambda d: apply("mul", apply("log1p", apply("pow", 2.0, d)), _INV_LN2))


def xlogy(input: Any, other: Any) -> Tensor:
    """Elementwise input * log(other), 0 where input is 0 (even for other 0 or inf) unless other is NaN (then NaN),
    as torch; log reads 1 where input is 0, so that no gradient is NaN there."""
    return x_times_log(input, other, "log", 1.0)


def x_times_log(input: Any, other: Any, log: str, neutral: float) -> Tensor:
    """input * log(other) for the op `log` (log, log1p), 0 where input is 0 unless other is NaN; `log` reads
    `neutral` (where it is 0) there, so that no gradient is NaN."""
    x, y = _float_operands(input, other)
    zero = logical_and(apply("eq", x, 0.0), apply("eq", y, y))
    return where(zero, 0.0, apply("mul", x, apply(log, where(zero, neutral, y))))


def clamp_min(input: Tensor, min: Any) -> Tensor:
    """Elementwise max(input, min): clamp with a lower bound only."""
    return clamp(input, min=min)


def clamp_max(input: Tensor, max: Any) -> Tensor:
    """Elementwise min(input, max): clamp with an upper bound only."""
    return clamp(input, max=max)


def sgn(input: Tensor) -> Tensor:
    """Elementwise sign (-1, 0 or 1): for real tensors, torch's sgn is sign."""
    return sign(input)


def sinc(input: Tensor) -> Tensor:
    """Elementwise normalized sinc, sin(pi x) / (pi x), 1 at 0. sin(pi x) is (-1)^n sin(pi (x - n)) with n = round(x)
    (x - n exact), so sinc is accurate near the integers, where it is exactly 0, and far from 0; x = 0 computes at
    1 instead, so that its gradient is 0, not NaN."""
    x = _floating(input)
    zero = apply("eq", x, 0.0)
    safe = where(zero, 1.0, x)
    n = apply("round", safe)
    parity = apply("sub", n, apply("mul", apply("floor", apply("mul", n, 0.5)), 2.0))
    sin_pi_x = apply("mul", apply("sin", apply("mul", apply("sub", safe, n), math.pi)),
                     apply("sub", 1.0, apply("mul", parity, 2.0)))
    return where(zero, 1.0, apply("div", sin_pi_x, apply("mul", safe, math.pi)))


def copysign(input: Any, other: Any) -> Tensor:
    """Elementwise |input| with the sign of other, -0 included: other + 1/other is negative exactly when other's sign
    bit is set. A NaN `other` counts as positive (no value op can read a NaN's sign bit)."""
    x, y = _float_operands(input, other)
    magnitude = abs(x)
    negative = apply("lt", apply("add", y, apply("div", 1.0, y)), 0.0)
    return where(negative, apply("neg", magnitude), magnitude)


__all__ = ["reciprocal", "trunc", "fix", "frac", "lerp", "addcmul", "addcdiv", "logit", "hypot", "logaddexp",
           "logaddexp2", "xlogy", "clamp_min", "clamp_max", "sgn", "sinc", "copysign"]
TENSOR_METHODS: tuple[str, ...] = tuple(__all__)  # every name above is also a Tensor method (bound in methods.py)
