"""pow(x, y) on vectors: float32 computed in float64, float64 in double-double; 2^(y log2|x|), rounded once.

libm's powf, called lane by lane, took 3x torch's time on 1e6 values. Here |x| (a float32, so a normal float64
whatever it was) splits into 2^e m with m in [sqrt(1/2), sqrt(2)), and log(m) = 2 atanh(s) with s = (m - 1) / (m + 1)
by its odd series to s^15 (|s| < 0.1716: relative error below 2^-40); t = y log2|x| is within about 2^-40 |t|, and
2^t = 2^n e^(r ln 2) with n = round(t), |r| <= 1/2, by Taylor's series to degree 10 (below 2^-40). For float32
results |t| < 150, so the float64 result is within about 2^-32 of pow(x, y): rounded to float32 it is pow's correctly
rounded value or, rarely, its neighbour (under 1 ulp), subnormal results included.

float64 (libm's pow per lane, 0.44x torch) needs t = y log2|x| to about 2^-64 of itself, since |t| reaches 1075 for
a finite result: log2|x| is carried as a double-double through s and its remainder, the terms 2s and (2/3) s^3 and
the multiplication by 1/ln 2 (the series to s^29; products exact by FMA, or by Dekker's halves without it), t as
y log2|x| with its error, and 2^t = 2^n e^r with r = (t - n) ln 2 plus its tail: within 1 ulp (POW64_ULPS; 0.90 seen
over 2^20 pairs with FMA, 0.95 without), 1.5x torch.

The special values are C's pow (and numpy's power): pow(x, 0) = 1 and pow(1, y) = 1 even for NaN; a finite
negative x with a non-integer y gives NaN; the result is negative for a negative x (or -0) and an odd integer y; |x|
of 0 and infinity give 0 and infinity by the sign of y (or y's, by |x| against 1, for y infinite); pow(-1, +-inf) = 1.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from .loops import F32, F64, vec
from .vecmath_emit import VectorEmit, log_split

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
    return _c_rules(s, x, y, result, *_integer_odd(d, yd))


def _c_rules(s: VectorEmit, x: ir.Value, y: ir.Value, magnitude: ir.Value, integer: ir.Value,
             odd: ir.Value) -> ir.Value:
    """C's pow from |x|^y (`magnitude`, with the special values of |x| and y already right): the sign of a negative
    x (or -0) to an odd integer y, NaN for a finite negative x to a non-integer y, pow(-1, +-inf) = 1, and pow(x, 0)
    = pow(1, y) = 1 even for NaN."""
    b = s.b
    negative = b.icmp_signed("<", s.bits(x), s.ki(0))    # x < 0 or x = -0
    result = s.select(b.and_(negative, odd), b.fneg(magnitude), magnitude)
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


# float64: |x|^y = 2^(y log2|x|) with log2|x| and the product in double-double, so that t = y log2|x| (up to 1075
# in magnitude for a finite result) keeps about 2^-64 of relative accuracy and 2^t rounds once.
_LN2_DD = (0.6931471805599453, 2.3190468138462996e-17)
_INV_LN2_DD = (1.4426950408889634, 2.0355273740931033e-17)
_TWO_THIRDS_DD = (0.6666666666666666, 3.700743415417188e-17)
# log(1 + f) = 2s + (2/3) s^3 + s^5 P(s^2): 2 / (2k + 1), k = 14 down to 2 (Taylor to s^29: the remainder is below
# 2^-70 of log(1 + f) for |s| <= 0.1716; to s^21 it had been 2^-61, 2 ulp of a result 2^850)
_ATANH_REST = tuple(2.0 / (2 * k + 1) for k in range(14, 1, -1))
# e^r = 1 + r + r^2 Q(r), |r| <= ln2/2 + a little: 1/k!, k = 13 down to 2
_EXP_Q64 = tuple(1.0 / math.factorial(k) for k in range(13, 1, -1))
_T_MOST_64 = 1100.0   # 2^1100 overflows float64 and 2^-1100 rounds to 0: clamping there is exact


def pow64(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """pow(x, y) for float64 scalars or vectors: within 1 ulp (POW64_ULPS), C's special values."""
    vector = isinstance(x.type, ir.VectorType)
    d = VectorEmit(b, b.module, x.type.count if vector else 1, F64)
    a = d.abs(x)
    hi, lo = _log2_dd(d, a)
    t, t_error = d.two_prod(y, hi)
    t_lo = d.add(t_error, d.mul(y, lo))
    finite_t = d.cmp("<", d.abs(t), _T_MOST_64)           # NaN, infinities and the far range: clamped, no tail
    t_lo = d.select(finite_t, t_lo, 0.0)
    t = d.select(d.cmp(">", t, _T_MOST_64), _T_MOST_64, d.select(d.cmp("<", t, -_T_MOST_64), -_T_MOST_64, t))
    shifted = d.add(t, _ROUND)
    n = d.sub(shifted, _ROUND)
    whole = d.sub(t, n)                                   # exact
    g = d.add(whole, t_lo)                                # g + g_lo = t - n + t_lo, in [-1/2, 1/2] and a little
    g_lo = d.sub(t_lo, d.sub(g, whole))
    r, r_error = d.two_prod(g, _LN2_DD[0])                # r + r_lo = (g + g_lo) ln 2, r_lo below ulp(r)
    r_lo = d.add(r_error, d.add(d.mul(g, _LN2_DD[1]), d.mul(g_lo, _LN2_DD[0])))
    p = d.add(d.add(d.fma(d.mul(r, r), d.horner(r, _EXP_Q64), r_lo), r), 1.0)   # e^r (1 + r_lo)
    magnitude = d.times_pow2(p, n, b.sub(d.bits(shifted), d.bits(d.k(_ROUND))))
    magnitude = _special_magnitudes(d, a, y, magnitude)
    return _c_rules(d, x, y, magnitude, *_integer_odd(d, y))


POW64_ULPS = 1.0


def _log2_dd(d: VectorEmit, a: ir.Value) -> tuple[ir.Value, ir.Value]:
    """log2(a) as a double-double (hi, lo) for a positive finite a (subnormals scaled first): a = 2^e (1 + f),
    s = f / (2 + f) with its remainder, log(1 + f) = 2s + (2/3) s^3 + s^5 P(s^2) with the first two terms carried
    to double-double, times 1/ln 2 in double-double, plus e."""
    tiny = d.cmp("<", a, 2.0 ** -1022)
    e, f = log_split(d, d.select(tiny, d.mul(a, 2.0 ** 52), a), tiny)
    two_f = d.add(f, 2.0)
    two_f_lo = d.sub(f, d.sub(two_f, 2.0))                # exact: 2 + f in two pieces
    s = d.div(f, two_f)
    product, product_error = d.two_prod(s, two_f)
    s_lo = d.div(d.sub(d.sub(d.sub(f, product), product_error), d.mul(s, two_f_lo)), two_f)
    z, z_error = d.two_prod(s, s)
    cube, cube_error = d.two_prod(s, z)
    cube_error = d.fma(s, z_error, cube_error)
    third, third_error = d.two_prod(cube, _TWO_THIRDS_DD[0])
    third_error = d.add(third_error, d.add(d.mul(cube, _TWO_THIRDS_DD[1]), d.mul(cube_error, _TWO_THIRDS_DD[0])))
    rest = d.mul(d.mul(cube, z), d.horner(z, _ATANH_REST))
    head = d.add(s, s)
    # 2 s_lo (1 + s^2) is s's remainder in the first two terms (without it the cube lost 2^-58 of log); the cube
    # itself is added exactly (rounded in one double with the rest, it lost 2^-60)
    small = d.add(d.fma(d.mul(z, 2.0), s_lo, d.add(s_lo, s_lo)), d.add(third_error, rest))
    partial = d.add(head, third)
    log_hi = d.add(partial, small)                        # |head| > |third|, |partial| > |small|: both errors exact
    log_lo = d.add(d.sub(third, d.sub(partial, head)), d.sub(small, d.sub(log_hi, partial)))
    scaled, scaled_error = d.two_prod(log_hi, _INV_LN2_DD[0])
    scaled_lo = d.add(scaled_error, d.add(d.mul(log_hi, _INV_LN2_DD[1]), d.mul(log_lo, _INV_LN2_DD[0])))
    hi = d.add(e, scaled)                                 # e an integer (or 0) at least |scaled| <= 1/2: exact error
    lo = d.add(d.sub(scaled, d.sub(hi, e)), scaled_lo)
    return hi, lo


def _special_magnitudes(d: VectorEmit, a: ir.Value, y: ir.Value, magnitude: ir.Value) -> ir.Value:
    """|x|^y where |x| is 0 or infinite, or y infinite (by |x| against 1), or either NaN."""
    b = d.b
    y_positive = d.cmp(">", y, 0.0)
    magnitude = d.select(d.cmp("==", a, 0.0), d.select(y_positive, 0.0, math.inf), magnitude)
    magnitude = d.select(d.cmp("==", a, math.inf), d.select(y_positive, math.inf, 0.0), magnitude)
    infinite_y = d.cmp("==", d.abs(y), math.inf)
    grows = b.xor(d.cmp(">", a, 1.0), b.not_(y_positive))   # |x| > 1 to +inf, |x| < 1 to -inf
    magnitude = d.select(b.and_(infinite_y, d.cmp("!=", a, 1.0)), d.select(grows, math.inf, 0.0), magnitude)
    return d.select(d.cmp("uno", a, y, ordered=False), math.nan, magnitude)


__all__ = ["POW64_ULPS", "pow64", "powf"]
