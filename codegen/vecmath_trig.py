"""Vectorizable sin and cos for float32 and float64: Cody-Waite reduction by pi/2, minimax polynomials on
[-pi/4, pi/4], quadrant select; libm for the rare vector holding an |x| >= LIMIT, a NaN or an infinity.

Method. n = round(x 2/pi) and the reduced argument x - n pi/2 are computed in float64 for both dtypes, with pi/2
split into fdlibm's 33-bit pieces so that every n * piece is exact for |n| < 2^20 (hence LIMIT = 2^20):
- float64: three pieces and a tail (152 bits of pi/2), the differences accumulated as a double-double y0 + y1 by
  error-free sums, so x - n pi/2 keeps full precision even where it cancels (|x| near a multiple of pi/2); then
  fdlibm's kernels sin(y0 + y1) and cos(y0 + y1) (degree-13/14 minimax polynomials that take the tail y1).
- float32: x widened to float64, one piece and its tail (86 bits, plenty for float32 inputs), the reduced argument
  rounded to float32 and Cephes sinf/cosf's polynomials.
The quadrant n mod 4 picks sin or cos of the reduced argument and the sign. sin(-0) = -0.

Accuracy (asserted by tests/codegen/test_vecmath.py against float64 references for float32 and long double ones
for float64, over dense sweeps to 1e5, multiples of pi/2, random values and special values): see ACCURACY_TRIG.
Beyond LIMIT libm decides (glibc: correctly rounded in practice); sin/cos of +-inf and NaN are NaN.
"""
from __future__ import annotations

from typing import Callable

import llvmlite.ir as ir

from .loops import F32, F64
from .vecmath_emit import VectorEmit, libm

LIMIT = 2.0 ** 20
# Max error in ulp of the result's dtype for |x| < LIMIT, asserted by the tests.
ACCURACY_TRIG: dict[tuple[str, str], float] = {("sin", "f32"): 2.0, ("cos", "f32"): 2.0,
                                              ("sin", "f64"): 1.0, ("cos", "f64"): 1.0}

_ROUND_MAGIC = 6755399441055744.0                 # 1.5 * 2^52: (v + M) - M rounds v to an integer, |v| < 2^51
_INV_PIO2 = 6.36619772367581382433e-01
_PIO2 = (1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624871116645580e-21)  # 33 bits each
_PIO2_TAIL = 8.47842766036889956997e-32           # pi/2 - sum(_PIO2)
_PIO2_1_TAIL = 6.07710050650619224932e-11         # pi/2 - _PIO2[0]

# fdlibm __kernel_sin / __kernel_cos, |x| <= pi/4.
_SIN64 = (1.58969099521155010221e-10, -2.50507602534068634195e-08, 2.75573137070700676789e-06,
          -1.98412698298579493134e-04, 8.33333333332248946124e-03)
_SIN64_S1 = -1.66666666666666324348e-01
_COS64 = (-1.13596475577881948265e-11, 2.08757232129817482790e-09, -2.75573143513906633035e-07,
          2.48015872894767294178e-05, -1.38888888888741095749e-03, 4.16666666666666019037e-02)
# Cephes sinf / cosf, |x| <= pi/4.
_SIN32 = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
_COS32 = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)


def _two_sum(m: VectorEmit, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
    """s + e = a + b exactly, s = fl(a + b) (Knuth; no condition on the magnitudes)."""
    s = m.b.fadd(a, b)
    bb = m.b.fsub(s, a)
    return s, m.b.fadd(m.b.fsub(a, m.b.fsub(s, bb)), m.b.fsub(b, bb))


def _quadrant(m: VectorEmit, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """n = round(x 2/pi) as a float64 and as an integer (its low bits are n mod 4)."""
    t = m.fma(x, _INV_PIO2, _ROUND_MAGIC)
    return m.sub(t, _ROUND_MAGIC), m.b.sub(m.bits(t), m.bits(m.k(_ROUND_MAGIC)))


def _reduce64(m: VectorEmit, x: ir.Value, n: ir.Value) -> tuple[ir.Value, ir.Value]:
    """y0 + y1 = x - n pi/2 to about 2^-100 |y0|, even where the difference cancels."""
    hi = m.b.fsub(x, m.b.fmul(n, m.k(_PIO2[0])))                            # exact: n * piece is exact
    hi, e1 = _two_sum(m, hi, m.b.fmul(n, m.k(-_PIO2[1])))
    hi, e2 = _two_sum(m, hi, m.b.fmul(n, m.k(-_PIO2[2])))
    lo = m.sub(m.b.fadd(e1, e2), m.mul(n, _PIO2_TAIL))
    y0 = m.b.fadd(hi, lo)
    return y0, m.b.fsub(lo, m.b.fsub(y0, hi))


def _sin64(m: VectorEmit, x: ir.Value, y: ir.Value) -> ir.Value:
    """sin(x + y) for |x| <= pi/4, y a tail below ulp(x) (fdlibm __kernel_sin)."""
    z = m.mul(x, x)
    v = m.mul(z, x)
    r = m.horner(z, _SIN64)
    return m.sub(x, m.sub(m.sub(m.mul(z, m.sub(m.mul(y, 0.5), m.mul(v, r))), y), m.mul(v, _SIN64_S1)))


def _cos64(m: VectorEmit, x: ir.Value, y: ir.Value) -> ir.Value:
    """cos(x + y) for |x| <= pi/4 (FreeBSD __kernel_cos: 1 - z/2 with its rounding error recovered)."""
    z = m.mul(x, x)
    r = m.mul(z, m.horner(z, _COS64))
    hz = m.mul(z, 0.5)
    w = m.sub(1.0, hz)
    return m.add(w, m.add(m.sub(m.sub(1.0, w), hz), m.sub(m.mul(z, r), m.mul(x, y))))


def _sin32(m: VectorEmit, x: ir.Value) -> ir.Value:
    z = m.mul(x, x)
    return m.fma(m.mul(x, z), m.horner(z, _SIN32), x)


def _cos32(m: VectorEmit, x: ir.Value) -> ir.Value:
    z = m.mul(x, x)
    return m.fma(m.mul(z, z), m.horner(z, _COS32), m.fma(z, -0.5, 1.0))


def _sin_cos_reduced(m: VectorEmit, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(sin r, cos r, n) with r = x - n pi/2 in [-pi/4, pi/4], computed in x's dtype; n an integer vector."""
    if m.element == F64:
        n, quadrant = _quadrant(m, x)
        y0, y1 = _reduce64(m, x, n)
        return _sin64(m, y0, y1), _cos64(m, y0, y1), quadrant
    wide = VectorEmit(m.b, m.module, m.width, F64)
    xd = m.b.fpext(x, wide.f)
    n, quadrant = _quadrant(wide, xd)
    r = m.b.fsub(m.b.fsub(xd, m.b.fmul(n, wide.k(_PIO2[0]))), m.b.fmul(n, wide.k(_PIO2_1_TAIL)))
    r32 = m.b.fptrunc(r, m.f)
    return _sin32(m, r32), _cos32(m, r32), m.b.trunc(quadrant, m.i)


def _pick(m: VectorEmit, n: ir.Value, s: ir.Value, c: ir.Value, offset: int) -> ir.Value:
    """sin(r + (n + offset) pi/2) from s = sin r and c = cos r: odd quadrants swap, quadrants 2 and 3 negate."""
    q = m.b.add(n, m.ki(offset))
    odd = m.b.icmp_unsigned("!=", m.b.and_(q, m.ki(1)), m.ki(0))
    negate = m.b.icmp_unsigned("!=", m.b.and_(q, m.ki(2)), m.ki(0))
    v = m.select(odd, c, s)
    return m.select(negate, m.b.fneg(v), v)


def _libm_beyond_limit(m: VectorEmit, x: ir.Value, fast: ir.Value, name: str) -> ir.Value:
    """fast, with libm's result in the lanes where |x| >= LIMIT or x is NaN; libm runs only if some lane needs it."""
    bad = m.cmp(">=", m.abs(x), LIMIT, ordered=False)
    return m.unless_rare(bad, fast, lambda: m.select(bad, libm(m.b, name if m.element == F64 else name + "f", x),
                                                     fast), name, 1 << 20)


def _sin(m: VectorEmit, x: ir.Value) -> ir.Value:
    """sin(x): see the module docstring."""
    s, c, n = _sin_cos_reduced(m, x)
    fast = m.select(m.cmp("==", x, 0.0), x, _pick(m, n, s, c, 0))   # keeps sin(-0) = -0
    return _libm_beyond_limit(m, x, fast, "sin")


def _cos(m: VectorEmit, x: ir.Value) -> ir.Value:
    """cos(x) = sin(x + pi/2): see the module docstring."""
    s, c, n = _sin_cos_reduced(m, x)
    return _libm_beyond_limit(m, x, _pick(m, n, s, c, 1), "cos")


TRIG_BODIES: dict[str, Callable[[VectorEmit, ir.Value], ir.Value]] = {"sin": _sin, "cos": _cos}
TRIG_ELEMENTS = (F32, F64)
