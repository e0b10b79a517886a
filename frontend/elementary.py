"""Elementary functions torch names that braze composes from registered ops: tan, the inverse trigonometric
functions (atan, asin, acos), the hyperbolic functions and their inverses (sinh, cosh, asinh, acosh, atanh),
base-2 and base-10 logarithms, exp2, and the degree conversions deg2rad and rad2deg, with torch's aliases
(arctan, arcsin, ...).

Each is written with ops the registry already defines (sin, cos, atan2, exp, expm1, log, log1p, sqrt, pow, ...), so
it traces, differentiates and compiles as those do. The forms are chosen to keep float32 results within a few ulp
of the exact values: no cancellation near 0, no early overflow for large |x|, torch's values at the domain edges.
Integer and bool inputs compute in float32, as torch's.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from braze.ir.types import float64

from .dispatch import apply
from .functions import _floating, abs, where
from .tensor import Tensor

_LN2 = math.log(2.0)


def _constant(value: float, like: Tensor) -> Tensor:
    """`value` as a 0-d constant of like's dtype."""
    return Tensor._wrap(np.asarray(value, dtype=like.dtype.numpy))


def _big(x: Tensor) -> float:
    """|x| beyond which sqrt(x^2 + 1) = |x| to the dtype's precision (and x^2 has not overflowed)."""
    return 2.0 ** 28 if x.dtype == float64 else 2.0 ** 12


def _snap_to_integer(r: Tensor) -> Tensor:
    """r rounded to the nearest integer n when within 2 eps |n| of it (2^-22 |n| in float32): log(x) / ln(b) is
    within about 1 ulp of log_b(x) (measured 0.69 ulp at powers of two), so log_b of an exact power of b comes out
    exact, and a value snapped near one moves by at most 4 ulp. Written r + (n - r) (exact) with the difference
    detached, so that the gradient stays r's."""
    n = apply("round", r)
    close = apply("le", abs(apply("sub", r, n)), apply("mul", abs(n), 2.0 * float(np.finfo(r.dtype.numpy).eps)))
    return apply("add", r, where(close, apply("sub", n, r), _constant(0.0, r)).detach())


def tan(input: Tensor) -> Tensor:
    """Elementwise tangent, sin(x) / cos(x): both are accurate to 2 ulp, cos also near its zeros."""
    x = _floating(input)
    return apply("div", apply("sin", x), apply("cos", x))


def atan(input: Tensor) -> Tensor:
    """Elementwise arctangent, atan2(x, 1)."""
    x = _floating(input)
    return apply("atan2", x, 1.0)


def _cosine_leg(x: Tensor) -> Tensor:
    """sqrt(1 - x^2) as sqrt((1 - x)(1 + x)), which does not cancel near |x| = 1; NaN for |x| > 1."""
    return apply("sqrt", apply("mul", apply("sub", 1.0, x), apply("add", x, 1.0)))


# P(w), lowest degree first, of asin(s) = s + s w P(w) with w = s^2, s in [0, 1/2]: our weighted least-squares fit
# (Lawson-reweighted towards minimax) of (asin(s) - s) / s^3, relative error 2.8e-10 before rounding
_ASIN_P = (0.16666659712791443, 0.07500503957271576, 0.044516999274492264, 0.0318073034286499, 0.014440278522670269,
           0.03751396760344505)
_HALF_PI_HEAD = float(np.float32(math.pi / 2))
_HALF_PI_TAIL = math.pi / 2 - _HALF_PI_HEAD


def _asin_reduced(a: Tensor) -> tuple[Tensor, Tensor]:
    """(a > 1/2, r) for a = |x| in float32: r = asin(a) up to 1/2, else r = asin(sqrt((1 - a) / 2)), so that asin(a)
    = pi/2 - 2 r there; one polynomial and one square root, no division (atan2's form took a division and a square
    root a vector: 0.65x torch's time). NaN beyond 1 (a negative square root)."""
    big = apply("gt", a, 0.5)
    w = where(big, apply("mul", apply("sub", 1.0, a), 0.5), apply("mul", a, a))
    s = where(big, apply("sqrt", where(big, w, _constant(0.25, a))), a)  # the root sees only its branch's range
    p = _constant(_ASIN_P[-1], a)
    for c in reversed(_ASIN_P[:-1]):
        p = apply("add", apply("mul", p, w), c)
    return big, apply("add", s, apply("mul", s, apply("mul", w, p)))


def asin(input: Tensor) -> Tensor:
    """Elementwise arcsine: in float32 from one polynomial (_asin_reduced: within 2.5 ulp), in float64 as
    atan2(x, sqrt((1 - x)(1 + x))); accurate at 0 and at +-1, -0 kept, NaN for |x| > 1."""
    x = _floating(input)
    if x.dtype == float64:
        return apply("atan2", x, _cosine_leg(x))

    def magnitude(a: Tensor) -> Tensor:
        big, r = _asin_reduced(a)
        far = apply("sub", _HALF_PI_HEAD, apply("sub", apply("mul", r, 2.0), _HALF_PI_TAIL))
        return where(big, far, r)
    return _odd(x, magnitude)


def acos(input: Tensor) -> Tensor:
    """Elementwise arccosine: in float32 2 r above 1/2, pi - 2 r below -1/2 and pi/2 - asin(x) between (within 1.5
    ulp: none of them cancels), in float64 atan2(sqrt((1 - x)(1 + x)), x); NaN for |x| > 1."""
    x = _floating(input)
    if x.dtype == float64:
        return apply("atan2", _cosine_leg(x), x)
    big, r = _asin_reduced(abs(x))
    negative = apply("lt", x, 0.0)
    twice = apply("mul", r, 2.0)
    far = where(negative, apply("sub", 2.0 * _HALF_PI_HEAD, apply("sub", twice, 2.0 * _HALF_PI_TAIL)), twice)
    signed = where(negative, apply("neg", r), r)
    near = apply("sub", _HALF_PI_HEAD, apply("sub", signed, _HALF_PI_TAIL))
    return where(big, far, near)


def _odd(x: Tensor, magnitude: Callable[[Tensor], Tensor]) -> Tensor:
    """The odd f(x) = s f(s x), s = -1 for x < 0 else 1, from `magnitude`, f on x >= 0 and on -0 (giving -0): unlike
    f(|x|) with x's sign, this keeps the derivative at 0 (that of |x| is 0 there)."""
    s = where(apply("lt", x, 0.0), _constant(-1.0, x), _constant(1.0, x))
    return apply("mul", magnitude(apply("mul", x, s)), s)


def _exp_limit(x: Tensor) -> tuple[float, float]:
    """(T, e^T / 2): exp(T) is finite in x's dtype, and e^a / 2 = e^(a - T) (e^T / 2) with a - T exact for a <= 2T."""
    limit = 709.0 if x.dtype == float64 else 88.0
    return limit, math.exp(limit) / 2.0


def sinh(input: Tensor) -> Tensor:
    """Elementwise hyperbolic sine, (u + u / (u + 1)) / 2 with u = expm1(|x|) and x's sign: no cancellation near 0;
    beyond 88 (709 in float64), where e^|x| would overflow first, e^(|x| - 88) e^88 / 2 (finite up to 89.4)."""
    def magnitude(a: Tensor) -> Tensor:
        limit, half_exp = _exp_limit(a)
        far = apply("gt", a, limit)
        u = apply("expm1", apply("sub", a, where(far, _constant(limit, a), _constant(0.0, a))))
        e = apply("add", u, 1.0)
        return where(far, apply("mul", e, half_exp), apply("mul", apply("add", u, apply("div", u, e)), 0.5))
    return _odd(_floating(input), magnitude)


def cosh(input: Tensor) -> Tensor:
    """Elementwise hyperbolic cosine, e / 2 + 1 / (2 e) with e = e^|x|; beyond 88 (709 in float64), where e^|x|
    would overflow first, e^(|x| - 88) e^88 / 2 (finite up to 89.4)."""
    a = abs(_floating(input))
    limit, half_exp = _exp_limit(a)
    far = apply("gt", a, limit)
    e = apply("exp", apply("sub", a, where(far, _constant(limit, a), _constant(0.0, a))))
    return where(far, apply("mul", e, half_exp), apply("add", apply("mul", e, 0.5), apply("div", 0.5, e)))


def _log_twice(x: Tensor, big: float) -> Tensor:
    """log(2x) = log(x) + ln 2 for x > big, from x clamped to at least big (so that no gradient is NaN below)."""
    return apply("add", apply("log", apply("clamp", x, min=big, max=None)), _LN2)


def asinh(input: Tensor) -> Tensor:
    """Elementwise inverse hyperbolic sine, log1p(a + a |a| / (1 + sqrt(1 + a^2))) for a = |x| with x's sign
    (accurate near 0, -0 kept); log(a) + ln 2 beyond 2^12 (2^28 in float64), where a^2 would round 1 away or
    overflow."""
    def magnitude(a: Tensor) -> Tensor:
        big = _big(a)
        m = apply("clamp", a, min=None, max=big)
        q = apply("div", abs(m), apply("add", apply("sqrt", apply("add", apply("mul", m, m), 1.0)), 1.0))
        near = apply("log1p", apply("add", m, apply("mul", m, q)))
        return where(apply("gt", a, big), _log_twice(a, big), near)
    return _odd(_floating(input), magnitude)


def acosh(input: Tensor) -> Tensor:
    """Elementwise inverse hyperbolic cosine, log1p(t + sqrt(t) sqrt(t + 2)) with t = x - 1 (accurate near 1, NaN
    for x < 1); log(x) + ln 2 beyond 2^12 (2^28 in float64)."""
    x = _floating(input)
    big = _big(x)
    t = apply("sub", apply("clamp", x, min=None, max=big), 1.0)
    near = apply("log1p", apply("add", t, apply("mul", apply("sqrt", t), apply("sqrt", apply("add", t, 2.0)))))
    return where(apply("gt", x, big), _log_twice(x, big), near)


def atanh(input: Tensor) -> Tensor:
    """Elementwise inverse hyperbolic tangent, (log1p(x) - log1p(-x)) / 2: odd by construction, no cancellation
    (the logs have opposite signs), +-inf at +-1 and NaN beyond."""
    x = _floating(input)
    return apply("mul", apply("sub", apply("log1p", x), apply("log1p", apply("neg", x))), 0.5)


def log2(input: Tensor) -> Tensor:
    """Elementwise base-2 logarithm, log(x) / ln 2, exact at powers of two (see _snap_to_integer)."""
    return _snap_to_integer(apply("mul", apply("log", _floating(input)), 1.0 / _LN2))


def log10(input: Tensor) -> Tensor:
    """Elementwise base-10 logarithm, log(x) / ln 10, exact at the powers of ten (see _snap_to_integer)."""
    return _snap_to_integer(apply("mul", apply("log", _floating(input)), 1.0 / math.log(10.0)))


def exp2(input: Tensor) -> Tensor:
    """Elementwise 2 ** x, as pow(2, x): within 1 ulp, and exact at integers."""
    x = _floating(input)
    return apply("pow", 2.0, x)


def deg2rad(input: Tensor) -> Tensor:
    """Degrees to radians: x * (pi / 180), the constant rounded to the dtype as torch's."""
    return apply("mul", _floating(input), math.pi / 180.0)


def rad2deg(input: Tensor) -> Tensor:
    """Radians to degrees: x * (180 / pi), the constant rounded to the dtype as torch's."""
    return apply("mul", _floating(input), 180.0 / math.pi)


arctan, arcsin, arccos = atan, asin, acos
arcsinh, arccosh, arctanh = asinh, acosh, atanh

__all__ = ["tan", "atan", "arctan", "asin", "arcsin", "acos", "arccos", "sinh", "cosh", "asinh", "arcsinh", "acosh",
           "arccosh", "atanh", "arctanh", "log2", "log10", "exp2", "deg2rad", "rad2deg"]
TENSOR_METHODS: tuple[str, ...] = tuple(__all__)  # every name above is also a Tensor method (bound in methods.py)
