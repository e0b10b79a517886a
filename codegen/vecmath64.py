"""Vectorizable float64 exp, log, expm1, tanh and erf: the float64 bodies of vecmath's functions that need their own
constants (sigmoid, silu, gelu and log1p are written once, over exp, log and erf, in vecmath.py).

libm's exp, log, tanh and erf are one scalar call per lane; a float64 model's softmax, sigmoid or GELU took 3-14x
torch's time through them. These are straight-line IR as the float32 ones are (selects for the special values, one
branch where a vector holds a rare input), with the same structure and more terms:
- exp, <= 1 ulp: x = n ln2 + r (ln2 in a 21-bit head, exact times any n here, and a tail), |r| <= ln2/2, e^r = 1 + r +
  r^2 Q(r) with Q the Taylor series to r^13/13! (remainder below 0.05 ulp), scaled by 2^n as two exact powers of two
  (AVX-512: one vscalefpd), so that subnormal results round once. Below -746 the result is 0 (from the lane's
  exp(0), as in float32: no microcode assist), above 709.79 +inf.
- log, <= 1 ulp: x = 2^e (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), s = f / (2 + f), log(1 + f) = f - (f^2/2 -
  s (f^2/2 + R(s^2))) with R the series of 2 atanh(s) / s - 2 to s^20 (remainder below 2^-58), e ln2 added as head
  and tail. Subnormals are scaled by 2^52 first and the special values selected, only in a vector that has one.
- expm1, <= 2 ulp: reduced as exp, expm1(r) = r + r^2/2 + r^3 Q(r) (Taylor to r^13/13!), then 2^n expm1(r) +
  (2^n - 1) in one FMA where 2^n - 1 is exact (|n| <= 53), else 2^n (1 + expm1(r)) - 1.
- tanh, <= 2.5 ulp (1.8 with FMA, 2.1 without): h / (h + 1) with h = expm1(2|x|) / 2, refined below |x| = 0.55 as
  h (1 - q), x's sign: the float32 method with float64's constants.
- erf, <= 1.25 ulp (1.18 seen, with FMA or without): x + x (c + x^2 Q(x^2)) below 1 (Q of degree 11, fitted); from 1,
  1 - erfc(|x|) with erfc(a) = e^(-a^2) t R(t), t = 1 / (1 + a/2) (R of degree 15, fitted on [1/4, 2/3]) and
  e^(-a^2) from a's exact square (two doubles, VectorEmit.two_prod) as e^(-hi) (1 - lo): erfc's error is well under
  an ulp of erf = 1 - erfc there; 1 from 6 (erf rounds to 1 from 5.93).
The bounds are asserted by tests/codegen/test_vecmath.py against numpy's long double, with and without FMA.
"""
from __future__ import annotations

import math
from typing import Callable

import llvmlite.ir as ir

from .vecmath_emit import VectorEmit, log_of_any

ACCURACY64: dict[str, float] = {"exp": 1.0, "log": 1.0, "expm1": 2.0, "tanh": 2.5, "erf": 1.25}

_LN2_HI = 0.6931467056274414           # ln 2 to 21 bits (its low 32 bits clear): n * _LN2_HI is exact for |n| < 2^32
_LN2_LO = 4.7493250390316726e-07       # ln 2 - _LN2_HI
_LOG2E = 1.4426950408889634
_ROUND_MAGIC = 6755399441055744.0      # 1.5 * 2^52: (v + M) - M rounds v to the nearest integer, |v| < 2^51
_EXP_HIGH = 710.0                      # exp(709.79) overflows: clamped here, the result is inf
_EXP_ZERO = -746.0                     # exp(x) rounds to 0 below ln 2^-1075 = -745.13

# 1/k!, k = 13 down to 2: e^r = 1 + r + r^2 Q(r)
_EXP_Q = tuple(1.0 / math.factorial(k) for k in range(13, 1, -1))
# 1/k!, k = 13 down to 3: expm1(r) = r + r^2/2 + r^3 Q(r)
_EXPM1_Q = tuple(1.0 / math.factorial(k) for k in range(13, 2, -1))
# 2 / (2k + 1), k = 10 down to 1: R(z) = z P(z), 2 atanh(s) = 2s + s R(s^2)
_LOG_P = tuple(2.0 / (2 * k + 1) for k in range(10, 0, -1))
_EXPM1_EXACT_N = 53.0                  # 2^n - 1 is exact for |n| <= 53
_EXPM1_LOW = -40.0                     # expm1(x) rounds to -1 below -37.43 (2^n stays normal down here)
_TANH_CLAMP = 44.0                     # tanh(x) rounds to +-1 for |x| >= 19.06; expm1's argument is clamped at 2 x 22


def _reduce(m: VectorEmit, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """x = n ln2 + r with |r| <= ln2/2 (just over, by rounding): n as float, n as integer and r, for |x| < 2^50."""
    t = m.fma(x, _LOG2E, _ROUND_MAGIC)
    n = m.sub(t, _ROUND_MAGIC)
    n_int = m.b.sub(m.bits(t), m.bits(m.k(_ROUND_MAGIC)))
    r = m.fma(n, -_LN2_HI, x)
    return n, n_int, m.fma(n, -_LN2_LO, r)


def _exp(m: VectorEmit, x: ir.Value) -> ir.Value:
    """exp(x) to 1 ulp (see the module docstring)."""
    xc = m.select(m.cmp(">", x, _EXP_HIGH), _EXP_HIGH, x)     # NaN fails both compares and propagates
    zero = m.cmp("<", x, _EXP_ZERO)
    xc = m.select(zero, 0.0, xc)
    n, n_int, r = _reduce(m, xc)
    p = m.add(m.fma(m.mul(r, r), m.horner(r, _EXP_Q), r), 1.0)
    return m.select(zero, 0.0, m.times_pow2(p, n, n_int))


def _log(m: VectorEmit, x: ir.Value) -> ir.Value:
    """log(x) to 1 ulp (see the module docstring; vecmath_emit's log_of_any around the core)."""
    return log_of_any(m, x, _log_core)


def _log_core(m: VectorEmit, e: ir.Value, f: ir.Value) -> ir.Value:
    """log(2^e (1 + f)) for 1 + f in [sqrt(1/2), sqrt(2))."""
    s = m.div(f, m.add(f, 2.0))
    z = m.mul(s, s)
    half_square = m.mul(m.mul(f, f), 0.5)
    tail = m.fma(s, m.fma(z, m.horner(z, _LOG_P), half_square), m.mul(e, _LN2_LO))
    return m.fma(e, _LN2_HI, m.sub(f, m.sub(half_square, tail)))


def _expm1_reduced(m: VectorEmit, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(n, n_int, expm1(r)) for x = n ln2 + r."""
    n, n_int, r = _reduce(m, x)
    return n, n_int, m.fma(m.mul(r, r), m.fma(m.horner(r, _EXPM1_Q), r, 0.5), r)


def _expm1(m: VectorEmit, x: ir.Value) -> ir.Value:
    """exp(x) - 1 to 2 ulp (see the module docstring)."""
    xc = m.select(m.cmp(">", x, _EXP_HIGH), _EXP_HIGH, x)
    xc = m.select(m.cmp("<", xc, _EXPM1_LOW), _EXPM1_LOW, xc)   # NaN fails both compares
    n, n_int, p = _expm1_reduced(m, xc)
    two_n = m.pow2(n_int)                                      # only used where |n| <= 53
    near = m.fma(two_n, p, m.sub(two_n, 1.0))
    whole = m.times_pow2(m.add(p, 1.0), n, n_int)
    r = m.select(m.cmp("<=", m.abs(n), _EXPM1_EXACT_N), near, m.sub(whole, 1.0))
    return m.copysign(r, x)                                    # keeps expm1(-0) = -0


def _tanh(m: VectorEmit, x: ir.Value) -> ir.Value:
    """tanh(x) to 2.5 ulp as q = h / (h + 1), h = expm1(2|x|) / 2 (see vecmath's float32 tanh)."""
    y = m.mul(m.abs(x), 2.0)
    y = m.select(m.cmp(">", y, _TANH_CLAMP), _TANH_CLAMP, y)   # NaN fails the compare and propagates
    n, n_int, p = _expm1_reduced(m, y)
    half_n = m.pow2(m.b.sub(n_int, m.ki(1)))                  # 2^(n-1) - 1/2 rounds only past n = 54, harmlessly
    h = m.fma(half_n, p, m.sub(half_n, 0.5))
    q = m.div(h, m.add(h, 1.0))
    q = m.select(m.cmp("<", y, 1.1), m.fma(m.b.fneg(q), h, h), q)
    return m.copysign(q, x)


# erf(x) = x + x (2/sqrt(pi) - 1 + z Q(2z - 1)) for z = x^2 <= 1: Q's coefficients, highest degree first (our
# Chebyshev fit in 40-digit arithmetic: error below 4e-18 in erf(x) / x), and the constant in decimal, so that it
# carries 2/sqrt(pi)'s digits past its own rounding
_ERF_Q = (3.0146959088404563e-14, -7.914652039128325e-13, 1.912352470150408e-11, -4.261699159982095e-10,
          8.657774662516903e-09, -1.588891596842387e-07, 2.605654634545775e-06, -3.7679993517106166e-05,
          0.0004727143056007409, -0.005043685427888912, 0.04474867880585629, -0.32582085685129053)
_ERF_C = 0.12837916709551257390
_ERF_TAIL = 1.0                        # below, the series; from here erfc < 0.16 and 1 - erfc loses nothing
_ERF_ONE = 6.0                         # erf(x) rounds to 1 from 5.93
# erfc(a) = e^(-a^2) t R(4.8 t - 2.2) for t = 1 / (1 + a/2) in [1/4, 2/3] (a in [1, 6]): R's coefficients, highest
# degree first (our Chebyshev fit of e^(a^2) erfc(a) / t on that interval: relative error 5.3e-17)
_ERFC_R = (-5.078207763720487e-12, 1.3290481895999488e-11, 7.93301872324515e-11, -5.323714277292962e-10,
           -1.2229124705129637e-10, 1.2868095494772884e-08, -3.113194855443141e-08, -2.677668084010234e-07,
           1.3738824941585075e-06, 6.479355689466505e-06, -4.948906824598752e-05, -0.00027892663037625026,
           0.0015599066398753962, 0.023394523545106842, 0.13362278624164278, 0.48311899686530574)


def _erf(m: VectorEmit, x: ir.Value) -> ir.Value:
    """erf(x) to 1.25 ulp (see the module docstring)."""
    a = m.abs(x)
    z = m.mul(x, x)
    small = m.fma(x, m.fma(z, m.horner(m.fma(z, 2.0, -1.0), _ERF_Q), _ERF_C), x)
    ac = m.select(m.cmp(">", a, _ERF_ONE), _ERF_ONE, m.select(m.cmp("<", a, _ERF_TAIL), _ERF_TAIL, a))
    t = m.div(1.0, m.fma(ac, 0.5, 1.0))
    square, square_error = m.two_prod(ac, ac)             # a^2 exactly, as two doubles
    head = _exp(m, m.b.fneg(square))
    gaussian = m.fma(head, m.b.fneg(square_error), head)  # e^(-a^2) = e^(-square) (1 - square_error)
    erfc = m.mul(m.mul(gaussian, t), m.horner(m.fma(t, 4.8, -2.2), _ERFC_R))
    large = m.copysign(m.select(m.cmp(">=", a, _ERF_ONE), 1.0, m.sub(1.0, erfc)), x)
    return m.select(m.cmp("<", a, _ERF_TAIL), small, large)


BODIES64: dict[str, Callable[[VectorEmit, ir.Value], ir.Value]] = {
    "exp": _exp, "log": _log, "expm1": _expm1, "tanh": _tanh, "erf": _erf}
