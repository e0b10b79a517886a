"""Vectorizable float32 and float64 math: exp, log, tanh, erf, sigmoid, log1p, expm1 and the activations built on
exp (gelu, silu); sin and cos are in vecmath_trig.py and the float64 bodies of exp, log, expm1, tanh and erf in
vecmath64.py, each described there.

LLVM's llvm.exp/llvm.log and libm's tanhf/erff become one scalar library call per lane, which stops a vectorized
loop cold. These are straight-line IR (float arithmetic, integer bit manipulation and selects, no branches, no
calls, no table lookups; sin/cos branch to libm for rare inputs, and a vector log to its special values only where
a lane needs them), emitted once per module, width and element type
as internal alwaysinline functions over float (`braze.vm.exp.f32`) or <W x float> (`braze.vm.exp.v16f32`), so
they inline into the kernel's loop and a scalar call in a loop vectorizes. Arithmetic carries only the `contract`
flag (FMA where the target has it); every special case (NaN, infinities, zeros, subnormals, overflow) is handled
by explicit selects, never by fast-math assumptions.

Method and accuracy. The bounds are the max error in float32 ulp over all inputs, measured against float64
references by tests/codegen/test_vecmath.py on 2^20 bit patterns strided over all 2^32, every 256th subnormal,
dense samples in [-20, 20] and near each threshold, with and without FMA; ACCURACY holds what the tests assert.
- exp, <= 1 ulp: Cody-Waite reduction x = n ln2 + r (ln2 split into a 9-bit head and a tail), |r| <= ln2/2,
  then 1 + r + r^2 P(r) with the degree-5 P of Cephes expf (S. Moshier). 2^n is applied as two exact powers of
  two, so overflow gives inf and subnormal results are rounded once; on AVX-512 vectors by one vscalefps, which
  rounds the same way in one instruction instead of eight (exp 1.28x, softmax 1.23x, sigmoid 1.20x faster).
  Below -104, where exp rounds to 0, a lane computes exp(0) and takes 0 after (_EXP_ZERO), so that masked scores
  (-inf, -1e4) never underflow on the way. exp(-inf) = 0, exp(+inf) = inf.
- log, <= 1 ulp: x = 2^e m with m in [sqrt(1/2), sqrt(2)) by integer arithmetic on the bits (subnormals are
  first scaled by 2^23), log(1 + f) = f - f^2/2 + f^3 P(f) with the P of Cephes logf, and e ln2 added as a
  head and a tail (Cody-Waite). log(+-0) = -inf, log(x < 0) = NaN, log(+inf) = +inf. A vector of positive normal
  numbers only branches past the scaling and the special values.
- tanh, <= 2 ulp: q = h / (h + 1) with h = expm1(2|x|) / 2 (expm1's reduction and polynomial, below, without its
  special cases: 2|x| is clamped to [0, 18.5], past which tanh rounds to 1), refined below |x| = 0.55 as h (1 - q),
  with x's sign. One formula for all x: the form 1 - 2 / (exp(2|x|) + 1) cancels near 0 and needed a second
  polynomial there (Cephes tanhf's for |x| < 0.625): 34 vector instructions a vector against 26 (AVX-512, load and
  store included), 1.24x the time on 2^17 values in cache, for 1.28 ulp against 1.85.
  tanh(+-inf) = +-1, tanh(-0) = -0.
- erf, <= 1.5 ulp: for |x| < 1, x + x R(x^2) with R of degree 6 fitted to erf(x)/x - 1 on [0, 1] (our
  Lawson-weighted minimax fit, relative error 1.2e-9 before rounding); for 1 <= |x| < 3.95,
  1 - exp(G(|x| - 1)) with G of degree 7 fitted to log(erfc(x)), weighted by erfc(x) (error 2.1e-11 in erf);
  1 beyond (erf rounds to 1.0f from 3.92). erf(+-inf) = +-1, erf(-0) = -0. On x86 vectors of 8 or 16 lanes,
  one polynomial per interval of a half (AVX2) or a quarter (AVX-512) with its coefficients looked up by permutes
  instead (vecmath_erf, 1 and 1.2 ulp).
- sigmoid, <= 2.5 ulp: e = exp(-|x|), then 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, so neither tail
  cancels and results stay accurate down to the subnormals. sigmoid(-inf) = 0, sigmoid(+inf) = 1.
- silu = x sigmoid(x): <= 3.5 ulp for x >= -87; below, sigmoid(x) is subnormal.
- gelu_tanh = x sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)), equal to 0.5 x (1 + tanh(...)) without its
  cancellation: <= 3 ulp for x >= -1.
- gelu_erf = 0.5 x (1 + erf(x / sqrt(2))), as torch computes it in float32: <= 3 ulp for x >= -1. On x86 vectors
  of 8 or 16 lanes, x (1/2 + erf(|x| / sqrt 2) / 2 with x's sign) from vecmath_erf's halved tables (8 to 13 fewer
  instructions).
- log1p, <= 2.5 ulp: log(u) x / (u - 1) with u = 1 + x rounded (Goldberg's correction of u's rounding error); x
  itself where u rounds to 1. log1p(-1) = -inf, log1p(x < -1) = NaN, log1p(+inf) = +inf, log1p(-0) = -0.
- expm1, <= 2 ulp (1.65 over every float32 input, 1.76 without FMA): reduced as exp is, x = n ln2 + r, then
  expm1(r) = r + r^2/2 + r^3 Q(r) (Taylor to degree 7) and 2^n expm1(r) + (2^n - 1) in one FMA where 2^n - 1 is
  exact (|n| <= 24), else 2^n (1 + expm1(r)) - 1: no log and no division (Kahan's (u - 1) x / log(u) with u = exp(x)
  took both, 2.8x numpy's time on AVX-512, to 2.4 ulp). The result takes x's sign, as expm1's always has.
  expm1(-inf) = -1, expm1(+inf) = +inf, expm1(-0) = -0.
For the activations outside ACCURATE_RANGE the result is a tiny number whose float32 argument is ill-conditioned
(or a cancellation, for gelu_erf); there the absolute error is below 2^-24 |x|. NaN in gives NaN out everywhere;
at -inf the activations give NaN (x times 0), exactly as the registry's reference does.
"""
from __future__ import annotations

from typing import Callable

import llvmlite.ir as ir

from braze.ir.ops.elementwise import GELU_CUBIC, SQRT_2_OVER_PI, SQRT_HALF

from . import vecmath_erf
from .loops import F32, F64, vec
from .vecmath64 import ACCURACY64, BODIES64
from .vecmath_emit import VectorEmit, log_of_any
from .vecmath_trig import ACCURACY_TRIG, TRIG_BODIES

# Max error in ulp over all float32 inputs in ACCURATE_RANGE (default: all of them), asserted by the tests.
# Outside that range the absolute error is below 2^-24 |x| (OUTSIDE_ABS_ERROR * |x|).
ACCURACY: dict[str, float] = {"exp": 1.0, "log": 1.0, "tanh": 2.0, "erf": 1.5, "sigmoid": 2.5,
                              "silu": 3.5, "gelu_tanh": 3.0, "gelu_erf": 3.0, "log1p": 2.5, "expm1": 2.0,
                              **{name: ulps for (name, dtype), ulps in ACCURACY_TRIG.items() if dtype == "f32"}}
ACCURATE_RANGE: dict[str, tuple[float, float]] = {"silu": (-87.0, float("inf")),
                                                  "gelu_tanh": (-1.0, float("inf")),
                                                  "gelu_erf": (-1.0, float("inf"))}
OUTSIDE_ABS_ERROR = 2.0 ** -24

_INF = float("inf")
_LN2_HI = 0.693359375          # 355/512: n * _LN2_HI is exact for |n| < 2^15
_LN2_LO = -2.12194440e-4       # ln 2 - _LN2_HI
_LOG2E = 1.44269504088896341
_ROUND_MAGIC = 12582912.0      # 1.5 * 2^23: (v + M) - M rounds v to the nearest integer, |v| < 2^22

# Cephes expf: e^r = 1 + r + r^2 P(r), |r| <= ln2/2.
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
# Cephes logf: log(1 + f) = f - f^2/2 + f^3 P(f), f in [sqrt(1/2) - 1, sqrt(2) - 1).
_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
          -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
# erf(x) = x + x R(x^2) for |x| < 1: weighted minimax fit of erf(x)/x - 1 in z = x^2 on [0, 1].
_ERF_R = (7.853900762182311e-05, -0.0008010206647209215, 0.005188329342266027, -0.026853812948194767,
          0.11283585178783126, -0.3761262582809612, 0.12837916572813035)
# log(erfc(x)) = G(x - 1) for 1 <= x <= 3.95: minimax fit weighted by erfc(x).
_ERFC_G = (-2.1686764177766627e-05, 0.00028952796407418234, -0.002011966500740186, 0.010046452307475862,
           -0.04156348082585896, -0.8431070817217715, -2.6389675145313753, -1.8496055100665425)
_ERF_ONE = vecmath_erf.ERF_ONE
_GELU_TANH_A = 2 * SQRT_2_OVER_PI
_GELU_TANH_B = 2 * SQRT_2_OVER_PI * GELU_CUBIC


# exp(x) rounds to 0 below this (ln 2^-150 = -103.97). Such lanes (-inf, a mask's -1e4) compute exp(0) instead and
# take 0 after: a result that underflows costs an x86 core a microcode assist of about a hundred cycles (without
# flush-to-zero), for the whole vector, and made a softmax over rows half masked that way 9x slower.
_EXP_ZERO = -104.0


def _exp(m: VectorEmit, x: ir.Value) -> ir.Value:
    """exp(x) to 1 ulp: Cody-Waite reduction, Cephes polynomial, scaling by two exact powers of two."""
    xc = m.select(m.cmp(">", x, 89.0), 89.0, x)          # exp(89) overflows; NaN fails both compares and propagates
    zero = m.cmp("<", x, _EXP_ZERO)
    xc = m.select(zero, 0.0, xc)
    t = m.fma(xc, _LOG2E, _ROUND_MAGIC)
    n = m.sub(t, _ROUND_MAGIC)
    n_int = m.b.sub(m.bits(t), m.bits(m.k(_ROUND_MAGIC)))
    r = m.fma(n, -_LN2_HI, xc)
    r = m.fma(n, -_LN2_LO, r)
    p = m.add(m.fma(m.mul(r, r), m.horner(r, _EXP_P), r), 1.0)
    return m.select(zero, 0.0, m.times_pow2(p, n, n_int))


# 2^f = 1 + f P(f) on [-1/2, 1/2]: P's coefficients, highest degree first (a weighted least-squares fit of the
# relative error in float64, rounded to float32 from the lowest degree up with the higher ones refitted after each):
# within 0.76 ulp of 2^f in float32 FMA arithmetic.
_EXP2_P = (1.5197097673080862e-4, 1.3391304528340697e-3, 9.619001299142838e-3, 5.5503588169813156e-2,
           0.24022643268108368, 0.6931471824645996)
_EXP2_LOW = -150.0   # 2^-150 rounds to 0 (to even): everything below, -inf included, gives exactly 0 (as exp's)


def exp2_nonpositive(m: VectorEmit, y: ir.Value) -> ir.Value:
    """2^y for float32 y <= 0 (as a softmax's exponents are, in base 2), NaN for NaN, 0 for -inf, to 1 ulp of 2^y:
    y = n + f with n an integer and |f| <= 1/2, 2^f by one polynomial, scaled by 2^n. 12 vector instructions with
    AVX-512's vscalefps, against exp's 16: no upper clamp, no two-part ln 2 reduction."""
    zero = m.cmp("<", y, _EXP2_LOW)                       # NaN fails the compare and propagates
    return m.select(zero, 0.0, _exp2_core(m, m.select(zero, 0.0, y)))


_EXP2_HIGH = 128.0   # 2^y overflows float32 above (2^128 itself rounds to inf)


def exp2(m: VectorEmit, y: ir.Value) -> ir.Value:
    """2^y for any float32 y, to 1 ulp and exact at the integers: exp2_nonpositive's method with the overflow to
    +inf as well (2 ** y with a constant base 2 runs here instead of pow's float64 logarithm)."""
    zero, over = m.cmp("<", y, _EXP2_LOW), m.cmp(">", y, _EXP2_HIGH)   # NaN fails both and propagates
    p = _exp2_core(m, m.select(m.b.or_(zero, over), 0.0, y))
    return m.select(zero, 0.0, m.select(over, float("inf"), p))


def _exp2_core(m: VectorEmit, y: ir.Value) -> ir.Value:
    """2^y for y in [-150, 128] (or NaN): y rounded to an integer n exactly, 2^(y - n) by the polynomial, times 2^n."""
    t = m.add(y, _ROUND_MAGIC)
    n = m.sub(t, _ROUND_MAGIC)
    f = m.sub(y, n)
    p = m.fma(m.horner(f, _EXP2_P), f, 1.0)
    return m.times_pow2(p, n, m.b.sub(m.bits(t), m.bits(m.k(_ROUND_MAGIC))))


def _log(m: VectorEmit, x: ir.Value) -> ir.Value:
    """log(x) to 1 ulp: exponent and mantissa from the bits, Cephes polynomial for log(1 + f) (vecmath_emit's
    log_of_any: 28 vector instructions a vector against 33 for a vector of positive normal numbers, AVX-512)."""
    return log_of_any(m, x, _log_core)


def _log_core(m: VectorEmit, e: ir.Value, f: ir.Value) -> ir.Value:
    """log(2^e (1 + f)) for 1 + f in [sqrt(1/2), sqrt(2))."""
    z = m.mul(f, f)
    y = m.mul(m.mul(f, z), m.horner(f, _LOG_P))
    y = m.fma(e, _LN2_LO, y)
    y = m.fma(z, -0.5, y)
    return m.fma(e, _LN2_HI, m.add(f, y))


# tanh(x) rounds to +-1 in float32 for |x| >= 9.01; its argument to expm1 is clamped at 2 x 9.25.
_TANH_CLAMP = 18.5


def _tanh(m: VectorEmit, x: ir.Value) -> ir.Value:
    """tanh(x) to 2 ulp as q = h / (h + 1) with h = expm1(2|x|) / 2, x's sign: expm1 is accurate down to 0, so one
    formula serves every |x| (no second polynomial near 0), and h + 1 never cancels. Below |x| = 0.55 the quotient is
    refined once as h (1 - q), which is q again with the rounding of h + 1 and of the division mostly undone."""
    y = m.mul(m.abs(x), 2.0)
    y = m.select(m.cmp(">", y, _TANH_CLAMP), _TANH_CLAMP, y)   # NaN fails the compare and propagates
    h = _half_expm1(m, y)
    q = m.div(h, m.add(h, 1.0))
    q = m.select(m.cmp("<", y, 1.1), m.fma(m.b.fneg(q), h, h), q)
    return m.copysign(q, x)                                    # also keeps tanh(-0) = -0


def _erf(m: VectorEmit, x: ir.Value) -> ir.Value:
    """erf(x) to 1.5 ulp: odd polynomial below 1, 1 - exp(log erfc fit) up to 3.95, 1 beyond; on x86 vectors
    of 8 or 16 lanes the interval polynomials of vecmath_erf instead (no exp, about half the instructions)."""
    if vecmath_erf.applies(m):
        return vecmath_erf.emit(m, x)
    a = m.abs(x)
    small = m.fma(x, m.horner(m.mul(x, x), _ERF_R), x)
    t = m.sub(m.select(m.cmp(">", a, _ERF_ONE), _ERF_ONE, a), 1.0)
    large = m.sub(1.0, call(m.b, "exp", m.horner(t, _ERFC_G)))
    large = m.copysign(m.select(m.cmp(">=", a, _ERF_ONE), 1.0, large), x)
    return m.select(m.cmp("<", a, 1.0), small, large)


def _logistic(m: VectorEmit, v: ir.Value, scale: ir.Value | float) -> ir.Value:
    """scale / (1 + exp(-v)) with one division: e = exp(-|v|), then scale / (1 + e) for v >= 0 and scale e / (1 + e)
    below, so neither tail cancels (the numerator is chosen before dividing, not one of two quotients after)."""
    e = call(m.b, "exp", m.b.fneg(m.abs(v)))
    numerator = m.select(m.cmp(">=", v, 0.0), scale, m.mul(scale, e))   # NaN: e is NaN, so is scale e
    return m.div(numerator, m.add(e, 1.0))


def _sigmoid(m: VectorEmit, x: ir.Value) -> ir.Value:
    """1 / (1 + exp(-x)) to 2.5 ulp, stable on both tails."""
    return _logistic(m, x, 1.0)


def _silu(m: VectorEmit, x: ir.Value) -> ir.Value:
    """x sigmoid(x), to 3.5 ulp for x >= -87."""
    return _logistic(m, x, x)


def _gelu_tanh(m: VectorEmit, x: ir.Value) -> ir.Value:
    """The tanh approximation of gelu as x sigmoid(2u), to 3 ulp for x >= -1."""
    v = m.mul(x, m.fma(m.mul(x, x), _GELU_TANH_B, _GELU_TANH_A))
    return _logistic(m, v, x)


def _gelu_erf(m: VectorEmit, x: ir.Value) -> ir.Value:
    """0.5 x (1 + erf(x / sqrt 2)), to 3 ulp for x >= -1."""
    if vecmath_erf.applies(m):
        return vecmath_erf.emit_gelu(m, x)
    cdf = m.add(call(m.b, "erf", m.mul(x, SQRT_HALF)), 1.0)
    return m.mul(m.mul(x, 0.5), cdf)


def _log1p(m: VectorEmit, x: ir.Value) -> ir.Value:
    """log(1 + x) as log(u) x / (u - 1) with u = fl(1 + x) (Goldberg), which cancels u's rounding error."""
    u = m.add(x, 1.0)
    d = m.sub(u, 1.0)
    r = m.mul(call(m.b, "log", u), m.div(x, d))
    r = m.select(m.cmp("==", d, 0.0), x, r)                          # |x| below half an ulp of 1 (also +-0)
    return m.select(m.cmp("==", u, _INF), u, r)                      # x = +inf or 1 + x overflows


# expm1(r) = r + r^2/2 + r^3 Q(r) on |r| <= ln2/2: the Taylor coefficients 1/3! .. 1/7!, highest degree first (the
# series' remainder is below 0.2 ulp of expm1(r) there).
_EXPM1_Q = (1 / 5040, 1 / 720, 1 / 120, 1 / 24, 1 / 6)
# 2^n - 1 is exact for |n| <= 24 in float32: there expm1(x) = 2^n expm1(r) + (2^n - 1) rounds once, and past it
# 2^n (1 + expm1(r)) - 1 loses nothing to cancellation.
_EXPM1_EXACT_N = 24.0


def _expm1(m: VectorEmit, x: ir.Value) -> ir.Value:
    """exp(x) - 1 to 2 ulp: x = n ln2 + r as in exp, expm1(r) by its Taylor polynomial, then 2^n expm1(r) +
    (2^n - 1) in one FMA (|n| <= 24) or 2^n (1 + expm1(r)) - 1; no log, no division."""
    xc = m.select(m.cmp(">", x, 89.0), 89.0, x)          # expm1(89) overflows, expm1(-20) rounds to -1 (and
    xc = m.select(m.cmp("<", xc, -20.0), -20.0, xc)      # 2^n stays normal); NaN fails both compares
    n, n_int, p = _expm1_reduced(m, xc)
    two_n = m.pow2(n_int)                                # only used where |n| <= 24
    near = m.fma(two_n, p, m.sub(two_n, 1.0))
    whole = m.times_pow2(m.add(p, 1.0), n, n_int)      # n in [-29, 128]
    r = m.select(m.cmp("<=", m.abs(n), _EXPM1_EXACT_N), near, m.sub(whole, 1.0))
    return m.copysign(r, x)                              # expm1 has x's sign: keeps expm1(-0) = -0


def _expm1_reduced(m: VectorEmit, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """x = n ln2 + r with |r| <= ln2/2 (n as float and as integer) and expm1(r), for |x| below 2^22 ln 2."""
    t = m.fma(x, _LOG2E, _ROUND_MAGIC)
    n = m.sub(t, _ROUND_MAGIC)
    n_int = m.b.sub(m.bits(t), m.bits(m.k(_ROUND_MAGIC)))
    r = m.fma(n, -_LN2_HI, x)
    r = m.fma(n, -_LN2_LO, r)
    return n, n_int, m.fma(m.mul(r, r), m.fma(m.horner(r, _EXPM1_Q), r, 0.5), r)


def _half_expm1(m: VectorEmit, x: ir.Value) -> ir.Value:
    """expm1(x) / 2 for x in [0, 18.5] (or NaN): 2^(n-1) expm1(r) + (2^(n-1) - 1/2) in one FMA for every n there
    (2^(n-1) - 1/2 rounds for n > 24, by less than the result's half ulp), no special cases."""
    n, n_int, p = _expm1_reduced(m, x)
    half_n = m.scale(m.k(0.5), n) if m.can_scale() else m.pow2(m.b.sub(n_int, m.ki(1)))
    return m.fma(half_n, p, m.sub(half_n, 0.5))


BODIES: dict[str, Callable[[VectorEmit, ir.Value], ir.Value]] = {
    "exp": _exp, "log": _log, "tanh": _tanh, "erf": _erf, "sigmoid": _sigmoid,
    "silu": _silu, "gelu_tanh": _gelu_tanh, "gelu_erf": _gelu_erf, "log1p": _log1p, "expm1": _expm1, **TRIG_BODIES,
}
FUNCTIONS: tuple[str, ...] = tuple(BODIES)   # each in float32 and float64
# Max error in float64 ulp of each float64 version (over ACCURATE_RANGE where it has one), asserted by the tests.
ACCURACY_F64: dict[str, float] = {**ACCURACY64, "sigmoid": 2.5, "silu": 3.5, "gelu_tanh": 3.0, "gelu_erf": 3.0,
                                  "log1p": 2.5, **{name: ulps for (name, dtype), ulps in ACCURACY_TRIG.items()
                                                   if dtype == "f64"}}
# The libm function a vecmath function calls for the rare inputs it leaves to libm (float32 names).
LIBM_FALLBACK: dict[str, str] = {name: name + "f" for name in TRIG_BODIES}


def function_name(name: str, width: int, element: ir.Type = F32) -> str:
    """The IR name of one version: braze.vm.exp.f32, braze.vm.exp.v16f32, braze.vm.sin.v8f64."""
    suffix = "f32" if element == F32 else "f64"
    return f"braze.vm.{name}.{suffix if width == 1 else f'v{width}{suffix}'}"


def function(module: ir.Module, name: str, width: int = 1, element: ir.Type = F32) -> ir.Function:
    """The internal alwaysinline function computing `name` on float or double (width 1) or <width x T>, emitted
    once per module, width and element type."""
    if name not in BODIES:
        raise KeyError(f"no vector math function {name!r}; available: {', '.join(FUNCTIONS)}")
    symbol = function_name(name, width, element)
    existing = module.globals.get(symbol)
    if existing is not None:
        return existing
    typ = vec(width, element)
    fn = ir.Function(module, ir.FunctionType(typ, [typ]), name=symbol)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    body = BODIES64.get(name, BODIES[name]) if element == F64 else BODIES[name]
    builder.ret(body(VectorEmit(builder, module, width, element), fn.args[0]))
    return fn


def call(builder: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    """Emit a call of `name` on x (a float or double, or a <W x float/double> value) in the builder's module."""
    vector = isinstance(x.type, ir.VectorType)
    width, element = (x.type.count, x.type.element) if vector else (1, x.type)
    return builder.call(function(builder.module, name, width, element), [x])
