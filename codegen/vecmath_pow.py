"""float32 pow(x, y) on vectors, computed in float64: 2^(y log2|x|), rounded to float32 once.

libm's powf, called lane by lane, took 3x torch's time on 1e6 values. Here |x| (a float32, so a normal float64
whatever it was) splits into 2^e m with m in [sqrt(1/2), sqrt(2)), and log(m) = 2 atanh(s) with s = (m - 1) / (m + 1)
by its odd series to s^15 (|s| < 0.1716: relative error below 2^-40); t = y log2|x| is within about 2^-40 |t|, and
2^t = 2^n e^(r ln 2) with n = round(t), |r| <= 1/2, by Taylor's series to degree 10 (below 2^-40). For float32
results |t| < 150, so the float64 result is within about 2^-32 of pow(x, y): rounded to float32 it is pow's correctly
rounded value or, rarely, its neighbour (under 1 ulp), subnormal results included.

The special values are C's powf (and numpy's power): pow(x, 0) = 1 and pow(1, y) = 1 even for NaN; a finite
negative x with a non-integer y gives NaN; the result is negative for a negative x (or -0) and an odd integer y; |x|
of 0 and infinity give 0 and infinity by the sign of y (or y's, by |x| against 1, for y infinite); pow(-1, +-inf) = 1.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from .loops import F32, F64, vec
from .vecmath_emit import VectorEmit

# log(1 + f) = 2 s (1 + s^2/3 + s^4/5 + ...), s = f / (2 + f): the series in z = s^2, highest degree first
_ATANH_Z = tuple(1.0 / (2 * k + 1) for k in range(7, -1, -1))
# e^u = sum u^k / k!, k <= 10, highest degree first
_EXP_U = tuple(1.0 / math.factorial(k) for k in range(10, -1, -1))
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD   # float64 bits of sqrt(1/2)
_ROUND = 6755399441055744.0            # 1.5 * 2^52: (t + R) - R rounds t to an integer, |t| < 2^51
_T_MOST = 200.0                        # 2^200 overflows float32 and 2^-200 rounds to 0: clamping there is exact


def powf(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """pow(x, y) for float32 scalars or vectors (see the module doc)."""
    vector = isinstance(x.type, ir.VectorType)
    width = x.type.count if vector else 1
    d = VectorEmit(b, b.module, width, F64)
    s = VectorEmit(b, b.module, width, F32)
    xd, yd = b.fpext(x, d.f), b.fpext(y, d.f)
    t = d.mul(yd, _log2_abs(d, xd))
    nan_t = d.cmp("uno", t, t, ordered=False)
    t = d.select(nan_t, 0.0, t)
    t = d.select(d.cmp(">", t, _T_MOST), _T_MOST, d.select(d.cmp("<", t, -_T_MOST), -_T_MOST, t))
    shifted = d.add(t, _ROUND)
    n = d.sub(shifted, _ROUND)
    r = d.mul(d.sub(t, n), math.log(2.0))
    n_int = b.sub(d.bits(shifted), d.bits(d.k(_ROUND)))   # n from the low bits: no float-to-int64 conversion
    magnitude = d.mul(d.horner(r, _EXP_U), d.pow2(n_int))
    result = b.fptrunc(d.select(nan_t, math.nan, magnitude), s.f)
    integer, odd = _integer_odd(d, yd)
    negative = b.icmp_signed("<", s.bits(x), s.ki(0))    # x < 0 or x = -0
    result = s.select(b.and_(negative, odd), b.fneg(result), result)
    finite_negative = b.and_(s.cmp("<", x, 0.0), s.cmp(">", x, -math.inf))
    result = s.select(b.and_(finite_negative, b.not_(integer)), math.nan, result)
    unit = s.cmp("==", s.abs(x), 1.0)                    # pow(-1, +-inf) = 1; pow(1, anything) below
    result = s.select(b.and_(unit, s.cmp("==", s.abs(y), math.inf)), 1.0, result)
    return s.select(b.or_(s.cmp("==", y, 0.0), s.cmp("==", x, 1.0)), 1.0, result)


def _log2_abs(d: VectorEmit, x: ir.Value) -> ir.Value:
    """log2|x| for a float64 x converted from float32: -inf at 0, +inf at infinity, NaN for NaN."""
    a = d.abs(x)
    bits = d.bits(a)
    e = d.b.ashr(d.b.sub(bits, d.ki(_SQRT_HALF_BITS)), d.ki(52))
    f = d.sub(d.float(d.b.sub(bits, d.b.shl(e, d.ki(52)))), 1.0)
    s = d.div(f, d.add(f, 2.0))
    log_m = d.mul(d.mul(s, 2.0 / math.log(2.0)), d.horner(d.mul(s, s), _ATANH_Z))
    exponent = d.sub(d.float(d.b.add(d.bits(d.k(_ROUND)), e)), _ROUND)   # e as a float64, with no int64 convert
    value = d.add(exponent, log_m)
    value = d.select(d.cmp("==", a, 0.0), -math.inf, value)
    value = d.select(d.cmp("==", a, math.inf), math.inf, value)
    return d.select(d.cmp("uno", a, a, ordered=False), math.nan, value)


def _integer_odd(d: VectorEmit, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Whether y is an integer (+-inf count as even ones, NaN as none) and whether an odd one: y rounded by the
    1.5 * 2^52 shift, whose lowest mantissa bit is the integer's parity (no rounding instruction, which SSE2
    lacks); from 2^51 up every float is an even integer."""
    shifted = d.add(y, _ROUND)
    rounded = d.sub(shifted, _ROUND)
    big = d.cmp(">=", d.abs(y), 2.0 ** 51)
    integer = d.b.or_(big, d.cmp("==", rounded, y))
    low_bit = d.b.trunc(d.bits(shifted), vec(d.width, ir.IntType(1)))
    return integer, d.b.and_(d.b.and_(integer, d.b.not_(big)), low_bit)


__all__ = ["powf"]
