"""fmod(x, y) on float32 and float64 vectors, exactly as C's fmod, without a libm call on the common path.

libm's fmodf and fmod, called lane by lane, made torch.fmod, torch.remainder and `x % y` 7-15x torch's time (glibc
reduces by long division, about 20 ns an element). The remainder x - trunc(x / y) y is exactly representable, so
where the quotient fits the mantissa it is computed exactly: q = trunc(x / y) (the division may round q one past the
true quotient, or short of it), r = x - q y with a single rounding of an exact value (float32 in float64, where q y
is exact for |q| < 2^29; float64 by one FMA), then at most one step of |y| back towards x's sign: r of the other
sign gets |y| added, |r| >= |y| gets it taken away, both exact. A zero takes x's sign. Lanes outside that, rare in
practice (y zero, infinite or NaN, x infinite or NaN, |x / y| of 2^29 or more in float32 or 2^51 in float64), take
libm's fmod in a branch that runs only for a vector holding one. float64 without FMA (SSE2 code) keeps libm per lane.
"""
from __future__ import annotations

import llvmlite.ir as ir

from .loops import F32, F64
from .target import target_of
from .vecmath_emit import VectorEmit, libm

# |x / y| below this takes the exact path: q y is exact in float64 for float32 operands up to 2^29; for float64 the
# truncation's shift needs |q| < 2^51 (the FMA then rounds only the exact result)
_QUOTIENT_MOST = {"f32": 2.0 ** 29, "f64": 2.0 ** 51}
_ROUND = 6755399441055744.0    # 1.5 * 2^52: (v + R) - R rounds v to the nearest integer, |v| < 2^51


def has_vector_fmod(b: ir.IRBuilder, element: ir.Type) -> bool:
    """Whether fmod() runs in vectors here: float32 always, float64 where the target has FMA."""
    if element == F32:
        return True
    target = target_of(b.module)
    return target is not None and target.fma


def fmod(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """fmod(x, y) for float32 or float64 scalars or vectors (see the module doc)."""
    vector = isinstance(x.type, ir.VectorType)
    element = x.type.element if vector else x.type
    width = x.type.count if vector else 1
    name = "fmodf" if element == F32 else "fmod"
    if not has_vector_fmod(b, element):
        return libm(b, name, x, y)
    m = VectorEmit(b, b.module, width, element)
    wide = VectorEmit(b, b.module, width, F64)
    xd, yd = (b.fpext(x, wide.f), b.fpext(y, wide.f)) if element == F32 else (x, y)
    ay = wide.abs(yd)
    q = _truncate(wide, wide.div(xd, yd))
    if element == F32:
        r = wide.sub(xd, wide.mul(q, yd))                 # q y exact: |q| < 2^29, y of 24 bits
    else:
        r = wide.fused(b.fneg(q), yd, xd)                 # exact x - q y, rounded once
    toward = wide.copysign(ay, xd)                        # |y| with x's sign
    flipped = b.icmp_signed("<", b.xor(wide.bits(r), wide.bits(xd)), wide.ki(0))   # signs differ (no product:
    wrong_sign = b.and_(flipped, wide.cmp("!=", r, 0.0))                           # it underflows for tiny ones)
    r = wide.select(wrong_sign, wide.add(r, toward), r)   # q one past: r of the wrong sign
    r = wide.select(wide.cmp(">=", wide.abs(r), ay), wide.sub(r, toward), r)       # q one short
    r = wide.copysign(r, xd)                              # a zero takes x's sign (nonzero r has it already)
    fast = b.fptrunc(r, m.f) if element == F32 else r
    ratio_ok = m.cmp("<", m.abs(x), m.mul(m.abs(y), _QUOTIENT_MOST["f32" if element == F32 else "f64"]))
    finite = b.and_(m.cmp("<", m.abs(x), float("inf")), m.cmp("<", m.abs(y), float("inf")))
    common = b.and_(b.and_(ratio_ok, finite), m.cmp("!=", y, 0.0))   # NaN fails every compare
    return m.unless_rare(b.not_(common), fast, lambda: m.select(common, fast, libm(b, name, x, y)), "fmod",
                         1 << 10)


def _truncate(m: VectorEmit, v: ir.Value) -> ir.Value:
    """v rounded toward zero, for |v| < 2^51: |v| rounded to the nearest integer by the 1.5 * 2^52 shift (no
    rounding instruction, which SSE2 lacks), one less where that rounded up, v's sign."""
    a = m.abs(v)
    nearest = m.sub(m.add(a, _ROUND), _ROUND)
    down = m.select(m.cmp(">", nearest, a), m.sub(nearest, 1.0), nearest)
    return m.copysign(down, v)


__all__ = ["fmod", "has_vector_fmod"]
