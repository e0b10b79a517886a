"""Elementary functions torch names that braze composes from registered ops: tan, the inverse trigonometric
functions (atan, asin, acos), the hyperbolic functions and their inverses (sinh, cosh, asinh, acosh, atanh),
base-2 and base-10 logarithms, exp2, the degree conversions deg2rad and rad2deg, the complementary and inverse
error functions erfc and erfinv, and lgamma and digamma, with torch's aliases (arctan, arcsin, ...).

Each is written with ops the registry already defines (sin, cos, atan2, exp, expm1, log, log1p, sqrt, pow, ...), so
it traces, differentiates and compiles as those do. The forms are chosen to keep float32 results within a few ulp
of the exact values: no cancellation near 0, no early overflow for large |x|, torch's values at the domain edges.
The gamma functions compute in float64 (float32 results round once). Integer and bool inputs compute in float32, as
torch's.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from braze.ir.types import float32, float64

from .dispatch import apply
from .functions import _floating, abs, logical_and, where
from .promotion import as_tensor
from .tensor import Tensor

_LN2 = math.log(2.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


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
    return apply("add", r, where(close, apply("sub", n, r), as_tensor(0.0, r.dtype)).detach())


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
    s = where(big, apply("sqrt", where(big, w, as_tensor(0.25, a.dtype))), a)  # the root sees only its branch's range
    return big, apply("add", s, apply("mul", s, apply("mul", w, _polynomial(w, _ASIN_P))))


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
    s = where(apply("lt", x, 0.0), as_tensor(-1.0, x.dtype), as_tensor(1.0, x.dtype))
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
        u = apply("expm1", apply("sub", a, where(far, as_tensor(limit, a.dtype), as_tensor(0.0, a.dtype))))
        e = apply("add", u, 1.0)
        return where(far, apply("mul", e, half_exp), apply("mul", apply("add", u, apply("div", u, e)), 0.5))
    return _odd(_floating(input), magnitude)


def cosh(input: Tensor) -> Tensor:
    """Elementwise hyperbolic cosine, e / 2 + 1 / (2 e) with e = e^|x|; beyond 88 (709 in float64), where e^|x|
    would overflow first, e^(|x| - 88) e^88 / 2 (finite up to 89.4)."""
    a = abs(_floating(input))
    limit, half_exp = _exp_limit(a)
    far = apply("gt", a, limit)
    e = apply("exp", apply("sub", a, where(far, as_tensor(limit, a.dtype), as_tensor(0.0, a.dtype))))
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


# R(z) = e^(z^2) erfc(z) for z >= 1/2 as t P(t), t = 1 / (1 + z/2) in (0, 0.8], P's coefficients lowest degree first:
# our Chebyshev fits (in 50-digit arithmetic, on all of (0, 0.8], so that z may be arbitrarily large) of R(z) / t,
# absolute error 9.7e-9 for degree 9 (float32) and 3.5e-17 for degree 22 (float64)
_ERFCX = {
    float32: (0.2820947899158297, 0.2820952420597838, 0.24681733241980325, 0.17647058125818404, 0.08353990724649557,
              -0.010757541520382883, -0.010686072160481437, -0.1959478892618533, 0.21134270737691,
              -0.06504275081950459),
    float64: (0.2820947917738781, 0.2820947917739251, 0.24683294279175705, 0.1763092457760629, 0.0837468481427118,
              -0.004406479843214608, -0.056773913301193725, -0.05310600351552773, -0.007248895460490267,
              0.07661642024786335, -0.10881044087591948, 0.7625231214659697, -2.9661883871052472, 8.469323694524912,
              -19.855028428446605, 36.36325624960691, -50.054281043933116, 51.07777252452088, -38.20247127413583,
              20.44561798501353, -7.445389164486265, 1.6585505882437404, -0.1710351890403826)}
_ERFC_TAIL = 0.5  # where erfc switches from 1 - erf(x) to e^(-x^2) R(x)
# (s, limit) per dtype: h = round(x s) / s has an exact square (of 24 or 52 bits) for |x| <= limit; e^(-x^2 / 2) is 0
# from 14.4 in float32 and 38.6 in float64
_SPLIT = {float32: (2.0 ** 8, 16.0), float64: (2.0 ** 20, 64.0)}
# e^(20 - x^2) and e^-20 R(x) are normal numbers where their product, erfc(x), is subnormal (up to x = 10.3 in float32,
# 27.0 in float64): the product rounds once there
_SHIFT = 20.0
_UNSHIFT = math.exp(-_SHIFT)


def _polynomial(u: Tensor, coefficients: tuple[float, ...]) -> Tensor:
    """sum c_k u^k by Horner's rule, coefficients lowest degree first."""
    p = as_tensor(coefficients[-1], u.dtype)
    for c in reversed(coefficients[:-1]):
        p = apply("add", apply("mul", p, u), c)
    return p


def _wide(x: Tensor) -> Tensor:
    """x in float64, where the gamma functions and the error functions' polynomials compute, so that float32 results
    round once (float64 arithmetic vectorizes; its exp, log and erf do not, so those stay in x's dtype)."""
    return apply("cast", x, dtype=float64) if x.dtype != float64 else x


def _narrow(r: Tensor, like: Tensor) -> Tensor:
    """A float64 result of _wide's computation back in like's dtype."""
    return apply("cast", r, dtype=like.dtype) if like.dtype != float64 else r


def _square_limit(x: Tensor) -> float:
    """|x| up to which _exp_neg_square is exact in x's dtype."""
    return _SPLIT[x.dtype][1]


# 1 / k!, k = 0 .. 9: e^r for |r| < 1/16 within 3e-19
_EXP_SMALL = tuple(1.0 / math.factorial(k) for k in range(10))


def _exp_neg_square(w: Tensor, scale: float, shift: float = 0.0) -> Tensor:
    """e^(shift - scale w^2) in float64 for |w| <= _square_limit(w), scale 1, 1/2 or -1 and shift 0 or _SHIFT (-1
    with 0), without the error of rounding w^2 (w^2 ulp relative in the result, 5e-6 at 9 in float32): w^2 = h^2 +
    (w - h)(w + h) with h = w rounded to 8 fraction bits (20 in float64), so that shift - scale h^2 is exact for the
    exp in w's dtype, and e^(-scale (w - h)(w + h)), whose argument is below 1/16, from its Taylor series."""
    s = _SPLIT[w.dtype][0]
    h = apply("mul", apply("round", apply("mul", w, s)), 1.0 / s)
    rest = apply("mul", apply("mul", apply("sub", w, h), apply("add", w, h)), -scale)
    head = apply("exp", apply("sub", shift, apply("mul", apply("mul", h, h), scale)))
    return apply("mul", _wide(head), _polynomial(_wide(rest), _EXP_SMALL))


def _with_derivative(value: Tensor, x: Tensor, derivative: Tensor) -> Tensor:
    """value, with the gradient `derivative` (elementwise) with respect to x in place of the gradient of value's own
    ops: value - (x - x) derivative, the difference taken from x detached (so exactly +0 for finite x, which keeps a
    -0 value where the derivative is positive); 0 where the derivative is infinite (0 inf would make the value NaN).
    For functions whose derivative has a closed form more accurate than differentiating their approximation."""
    d = derivative.detach()
    d = where(apply("eq", abs(d), math.inf), as_tensor(0.0, d.dtype), d)
    return apply("sub", value.detach(), apply("mul", apply("sub", x.detach(), x), d))


def _finite(x: Tensor) -> Tensor:
    """x with +-inf replaced by the dtype's largest finite values: an x for _with_derivative, whose x - x must be 0."""
    largest = float(np.finfo(x.dtype.numpy).max)
    return apply("clamp", x, min=-largest, max=largest)


def _erfcx(z: Tensor, factor: float = 1.0) -> Tensor:
    """factor e^(z^2) erfc(z) in float64 for z >= 1/2 (z clamped there), from the fit for z's dtype (_ERFCX), the
    factor folded into its coefficients so that it costs no rounding of its own."""
    t = apply("div", 1.0, apply("add", apply("mul", _wide(apply("clamp", z, min=_ERFC_TAIL, max=None)), 0.5), 1.0))
    return apply("mul", t, _polynomial(t, tuple(c * factor for c in _ERFCX[z.dtype])))


def _erfc(x: Tensor) -> Tensor:
    """erfc of a floating-point x: 1 - erf(x) below 1/2 (no cancellation: erf(x) < 0.53), above it e^(-x^2) R(x) as
    e^(20 - x^2) e^-20 R(x) (_SHIFT) rounded once to x's dtype, with the gradient -2/sqrt(pi) e^(-x^2) itself."""
    a = apply("clamp", x, min=_ERFC_TAIL, max=_square_limit(x))
    gaussian = _exp_neg_square(a, 1.0, _SHIFT)
    value = _narrow(apply("mul", gaussian, _erfcx(a, _UNSHIFT)), x)
    tail = _with_derivative(value, a, _narrow(apply("mul", gaussian, -_TWO_OVER_SQRT_PI * _UNSHIFT), x))
    return where(apply("lt", x, _ERFC_TAIL), apply("sub", 1.0, apply("erf", x)), tail)


def erfc(input: Tensor) -> Tensor:
    """Elementwise complementary error function 1 - erf(x), accurate in the right tail down to the subnormals:
    e^(-x^2) R(x) from x = 1/2 (R a fit, see _ERFCX; e^(-x^2) from x's exact square), within 2.5 ulp in float32 and
    5 in float64; the gradient is -2/sqrt(pi) e^(-x^2) itself."""
    return _erfc(_floating(input))


# erfinv(a) / a for a in [0, 1) as P(u), lowest degree first: our Chebyshev fits in Giles's variables (M. Giles,
# "Approximating the erfinv function", GPU Computing Gems, 2011), u = w - 5/2 for w = -log(1 - a^2) < 5 (relative
# error 6.2e-7) and u = sqrt(w) - 3 from 5 to 36.05, the largest w in float64 (1.4e-6)
_ERFINV_CENTRAL = (1.5014090909660742, 0.24664038783754394, -0.004175992616376222, -0.0012532781863537248,
                   0.00021721999192199742, -4.533462917885738e-06, -3.173345401025414e-06, 3.561808433218279e-07)
_ERFINV_TAIL = (2.832978546495422, 1.0016942586492776, 0.009429739317897942, -0.007785276079067748,
                0.005772933429439199, -0.003272112655868894, 0.001175873742059869, -0.0002318481223239986,
                1.8982720177209825e-05)


def _erfinv_magnitude(a: Tensor) -> Tensor:
    """erfinv(a) for a >= 0 (or -0): the fit (_ERFINV_CENTRAL, _ERFINV_TAIL) refined by one Halley step on erf(x) =
    a, whose residual is erf(x) - a below 1/2 and (1 - a) - erfc(x) above (1 - a exact), so that it stays accurate
    relative to erfc(x) as a nears 1; inf at 1, NaN beyond."""
    w = apply("neg", apply("log", apply("mul", apply("sub", 1.0, a), apply("add", a, 1.0))))
    central = apply("lt", w, 5.0)
    near = _polynomial(apply("sub", w, 2.5), _ERFINV_CENTRAL)
    far = _polynomial(apply("sub", apply("sqrt", where(central, as_tensor(5.0, w.dtype), w)), 3.0), _ERFINV_TAIL)
    x = apply("mul", a, where(central, near, far))
    low = apply("lt", a, 0.5)
    residual = where(low, apply("sub", apply("erf", x), a),
                     apply("sub", apply("sub", 1.0, a), _erfc(where(low, as_tensor(1.0, x.dtype), x))))
    q = apply("mul", apply("mul", residual, 1.0 / _TWO_OVER_SQRT_PI), apply("exp", apply("mul", x, x)))
    refined = apply("sub", x, apply("div", q, apply("add", apply("mul", x, q), 1.0)))
    return where(apply("eq", a, 1.0), as_tensor(math.inf, a.dtype), refined)


def erfinv(input: Tensor) -> Tensor:
    """Elementwise inverse error function on [-1, 1] (+-inf at +-1, NaN beyond), from a fit and one Halley step
    (_erfinv_magnitude): within 2.5 ulp in float32 and 4 in float64. Its gradient is sqrt(pi)/2 e^(erfinv(x)^2),
    from the result (0 at +-1, where it is infinite)."""
    x = _floating(input)
    r = _odd(x.detach(), _erfinv_magnitude)
    slope = apply("mul", apply("exp", apply("mul", r, r)), 1.0 / _TWO_OVER_SQRT_PI)
    return _with_derivative(r, x, slope)


# lgamma(2 + z) = (1 - gamma) z + S(z) on |z| <= 1/2 (radius 2: the pole at y = 0), S's coefficients of z^2 .. z^26:
# (-1)^k (zeta(k) - 1) / k, the Taylor series of lgamma at 2 (the omitted terms are below 3e-18)
_LGAMMA_AT_2 = (0.3224670334241132, -0.0673523010531981, 0.020580808427784546, -0.007385551028673986,
                0.0028905103307415234, -0.001192753911703261, 0.0005096695247430425, -0.00022315475845357939,
                9.945751278180853e-05, -4.492623673813314e-05, 2.050721277567069e-05, -9.439488275268397e-06,
                4.374866789907488e-06, -2.039215753801366e-06, 9.55141213040742e-07, -4.492469198764566e-07,
                2.1207184805554665e-07, -1.0043224823968099e-07, 4.7698101693639804e-08, -2.2711094608943164e-08,
                1.0838659214896955e-08, -5.183475041970047e-09, 2.4836745438024785e-09, -1.1921401405860912e-09,
                5.731367241678862e-10)
_EULER_GAMMA = 0.5772156649015329
# B_2k / (2k (2k - 1)) and B_2k / (2k), k = 1 .. 8: Stirling's series of lgamma and the asymptotic series of digamma
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156, -3617 / 122400)
_DIGAMMA_ASYMPTOTIC = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12, -3617 / 8160)
_ASYMPTOTIC_FROM = 10.0  # where digamma's series is within 1e-17; below, the argument is shifted up by 10
_STIRLING_FROM = 10.5  # where Stirling's is; below, the recurrence takes lgamma down to the Taylor series at 2
# digamma's positive root (rounded) and digamma's Taylor coefficients there, psi^(k)(root) / k!, k = 0 .. 22 (the
# omitted terms are below 2e-18 for |z| <= 1/4)
_DIGAMMA_ROOT = 1.4616321449683622
_DIGAMMA_AT_ROOT = (-9.241265521729427e-17, 0.9676722454476212, -0.4427631689835922, 0.2584997609556511,
                    -0.16394270544240658, 0.10782405069126241, -0.07219956125645474, 0.04880428816414313,
                    -0.033161126474847376, 0.022597648232218118, -0.01542476590494897, 0.010538791616612184,
                    -0.007204534386356875, 0.004926781395729858, -0.0033698016554393312, 0.00230512632673493,
                    -0.001576936771430199, 0.0010788252019162978, -0.000738070938996006, 0.0005049532658346027,
                    -0.0003454680251063082, 0.00023635601564027086, -0.00016170622091974827)


def _reflected(w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(w < 1/2, y, r) for float64 w: y = 1 - w below 1/2 (the reflection's argument) else w, so y >= 1/2; r = w -
    round(w) in [-1/2, 1/2], exact, whose sin(pi r) and tan(pi r) are those of pi w up to sign (r is w itself at
    +-0, keeping the sign digamma's pole takes, and 1/2 where w is not reflected, so that nothing there is
    infinite)."""
    reflect = apply("lt", w, 0.5)
    y = where(reflect, apply("sub", 1.0, w), w)
    r = where(reflect, apply("sub", w, apply("round", w)), as_tensor(0.5, w.dtype))
    return reflect, y, where(apply("eq", w, 0.0), w, r)


def _lgamma_positive(y: Tensor) -> Tensor:
    """lgamma of float64 y >= 1/2: on [1/2, 5/2] the Taylor series at 2 (of lgamma(1 + z) = lgamma(2 + z) - log(1 +
    z) below 3/2, 1 + z exact), exact zeros at 1 and 2 and no cancellation near them; up to 10.5 the recurrence down
    to there, log((y - 1) ... (y - m)) + lgamma(y - m) with y - k exact; beyond, Stirling's series. One log serves
    all three."""
    big = apply("gt", y, _STIRLING_FROM)
    z = where(big, y, as_tensor(_STIRLING_FROM, y.dtype))
    near = where(big, as_tensor(1.0, y.dtype), y)
    steps = apply("clamp", apply("ceil", apply("sub", near, 2.5)), min=0.0, max=_STIRLING_FROM - 2.5)
    product = as_tensor(1.0, y.dtype)
    for k in range(1, int(_STIRLING_FROM - 2.5) + 1):
        product = apply("mul", product, where(apply("le", float(k), steps), apply("sub", near, float(k)),
                                              as_tensor(1.0, y.dtype)))
    u = apply("sub", near, steps)
    near_one = apply("lt", u, 1.5)
    logarithm = apply("log", where(big, z, where(near_one, u, product)))
    inverse = apply("div", 1.0, z)
    series = apply("mul", inverse, _polynomial(apply("mul", inverse, inverse), _STIRLING))
    stirling = apply("add", apply("sub", apply("mul", apply("sub", z, 0.5), logarithm), z),
                     apply("add", series, 0.5 * math.log(2.0 * math.pi)))
    v = apply("sub", u, where(near_one, as_tensor(1.0, y.dtype), as_tensor(2.0, y.dtype)))
    taylor = apply("mul", v, apply("add", apply("mul", v, _polynomial(v, _LGAMMA_AT_2)), 1.0 - _EULER_GAMMA))
    small = where(near_one, apply("sub", taylor, logarithm), apply("add", logarithm, taylor))
    return where(big, stirling, small)


def lgamma(input: Tensor) -> Tensor:
    """Elementwise log |Gamma(x)|, in float64: _lgamma_positive from 1/2, below it the reflection log(pi) - log|sin(pi
    x)| - lgamma(1 - x); inf at the poles (0 and the negative integers, where the gradient is NaN) and at +-inf.
    Within 0.5 ulp in float32; in float64 within 1e-14 relative for x > 0 and 1e-15 absolute near the zeros of the
    negative axis. The gradient, digamma, comes from differentiating these series (within 3e-13 relative for x > 0)."""
    x = _floating(input)
    w = _wide(x)
    reflect, y, r = _reflected(w)
    positive = _lgamma_positive(y)
    sine = abs(apply("sin", apply("mul", r, math.pi)))
    reflected = apply("sub", apply("sub", math.log(math.pi), apply("log", sine)), positive)
    out = where(reflect, reflected, positive)
    return _narrow(where(apply("eq", abs(w), math.inf), as_tensor(math.inf, w.dtype), out), x)


def _digamma_positive(y: Tensor) -> Tensor:
    """digamma of float64 y >= 1/2: the asymptotic series at y (from 10) or at y + 10 less 1/y + ... + 1/(y + 9);
    within 1/4 of the positive root, where that cancels, the Taylor series there."""
    low = apply("lt", y, _ASYMPTOTIC_FROM)
    small = where(low, y, as_tensor(1.0, y.dtype))
    z = where(low, apply("add", y, 10.0), y)
    inverse = apply("div", 1.0, z)
    square = apply("mul", inverse, inverse)
    series = apply("add", apply("mul", inverse, 0.5), apply("mul", square, _polynomial(square, _DIGAMMA_ASYMPTOTIC)))
    far = apply("sub", apply("log", z), series)
    total = apply("div", 1.0, small)
    for k in range(1, 10):
        total = apply("add", total, apply("div", 1.0, apply("add", small, float(k))))
    far = where(low, apply("sub", far, total), far)
    u = apply("sub", y, _DIGAMMA_ROOT)
    near = apply("le", abs(u), 0.25)
    return where(near, _polynomial(where(near, u, as_tensor(0.0, u.dtype)), _DIGAMMA_AT_ROOT), far)


def digamma(input: Tensor) -> Tensor:
    """Elementwise digamma, d/dx lgamma(x), in float64: _digamma_positive from 1/2, below it the reflection
    digamma(1 - x) - pi / tan(pi x); as torch -inf at +0, inf at -0, NaN at the negative integers and -inf. Within
    0.5 ulp in float32; in float64 within 1e-14 relative for x > 0 and 1e-15 absolute near the zeros of the
    negative axis. The gradient (trigamma) comes from differentiating these series (within 1e-15 relative)."""
    x = _floating(input)
    w = _wide(x)
    reflect, y, r = _reflected(w)
    positive = _digamma_positive(y)
    angle = apply("mul", r, math.pi)
    cotangent = apply("div", apply("mul", apply("cos", angle), math.pi), apply("sin", angle))
    out = where(reflect, apply("sub", positive, cotangent), positive)
    pole = logical_and(apply("lt", w, 0.0), apply("eq", r, 0.0))
    return _narrow(where(pole, as_tensor(math.nan, w.dtype), out), x)


def deg2rad(input: Tensor) -> Tensor:
    """Degrees to radians: x * (pi / 180), the constant rounded to the dtype as torch's."""
    return apply("mul", _floating(input), math.pi / 180.0)


def rad2deg(input: Tensor) -> Tensor:
    """Radians to degrees: x * (180 / pi), the constant rounded to the dtype as torch's."""
    return apply("mul", _floating(input), 180.0 / math.pi)


arctan, arcsin, arccos = atan, asin, acos
arcsinh, arccosh, arctanh = asinh, acosh, atanh

__all__ = ["tan", "atan", "arctan", "asin", "arcsin", "acos", "arccos", "sinh", "cosh", "asinh", "arcsinh", "acosh",
           "arccosh", "atanh", "arctanh", "log2", "log10", "exp2", "deg2rad", "rad2deg", "erfc", "erfinv", "lgamma",
           "digamma"]
TENSOR_METHODS: tuple[str, ...] = tuple(__all__)  # every name above is also a Tensor method (bound in methods.py)
