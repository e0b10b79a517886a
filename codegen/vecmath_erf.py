"""erf on x86 vectors of 8 or 16 float32 lanes: one polynomial per half-unit interval of |x|, its coefficients
looked up per lane by permutes (vpermps), so every lane runs the same 7 FMAs and no exp.

For a = |x| < 4 the interval is i = floor(2a) and u = 2a - i (exact), and erf(a) = P0[i] + u Q_i(u) with Q_i of
degree 6; on [0, 0.5) the form is a + a R(a) (P0 is replaced by a itself and Q_0 is R halved, since u = 2a), which
keeps the relative error small down to the subnormals. Beyond 3.95 erf rounds to 1. The coefficients are a weighted
least-squares fit in float64 (relative to erf), each rounded to float32 from the lowest degree up with the higher
ones refitted after it; in float32 FMA arithmetic the result is within 1 ulp of erf on every interval. The general
form in vecmath (two polynomials, one of them through exp, blended) stays for scalars and other widths.

gelu (erf form) is x (1/2 + 1/2 erf(|x| / sqrt 2) with x's sign) from the same intervals, the tables halved (exact)
and interval 0 in the uniform form u (Q_0(u) + 1/2), so that no select is needed: 26 vector instructions against
the 33 of 0.5 x (1 + erf(x / sqrt 2)) through erf, which made GELU 14% of a transformer's first feed-forward GEMM.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from .loops import F32, I32
from .target import is_x86_triple
from .vecmath_emit import VectorEmit

ERF_ONE = 3.95   # erf(x) rounds to 1.0f for x >= 3.92

# erf(i / 2) rounded to float32 (interval 0 adds a instead).
_P0 = (0.0, 0.5204998850822449, 0.8427007794380188, 0.9661051630973816, 0.9953222870826721, 0.9995930194854736,
       0.9999778866767883, 0.9999992847442627)
# Q_i's coefficients, lowest degree first, for i = 0..7 (Q_0 already halved).
_Q = ((0.12837918102741241 / 2, -9.376105936098611e-07 / 2, -0.0940183699131012 / 2, -7.316230767173693e-05 / 2,
       0.007245311047881842 / 2, -0.00025148101849481463 / 2, -0.0002807967539411038 / 2),
      (0.43939104676246643, -0.10984562337398529, -0.01831512339413166, 0.011445368640124798,
       0.00026353710563853383, -0.0008681310573592782, 0.0001298318529734388),
      (0.2075541615486145, -0.1037803441286087, 0.0173066146671772, 0.004320275038480759, -0.0022049027029424906,
       0.00016449917166028172, 4.406561129144393e-05),
      (0.05946457386016846, -0.0445929653942585, 0.01731673814356327, -0.002721985802054405,
       -0.0005503100110217929, 0.00036335623008199036, -6.230654253158718e-05),
      (0.010332739911973476, -0.010325814597308636, 0.005993136204779148, -0.002073123585432768,
       0.00031526718521490693, 5.527429311769083e-05, -2.6720386813394725e-05),
      (0.0010901284404098988, -0.0013717012479901314, 0.0010917403269559145, -0.0006549236713908613,
       0.0003422426525503397, -0.00014452930190600455, 3.193503289367072e-05),
      (7.041609933366999e-05, -0.00011265685316175222, 0.0001369566161883995, -0.0001576854265294969,
       0.00015136681031435728, -8.99788283277303e-05, 2.295357990078628e-05),
      (1.7352384702462587e-06, 5.332300133886747e-06, -4.1743205656530336e-05, 0.00010968463175231591,
       -0.00014601358270738274, 9.789523028302938e-05, -2.61929180851439e-05))


def applies(m: VectorEmit) -> bool:
    """Whether this form can be emitted: float32 vectors of 8 (AVX2) or 16 (AVX-512) lanes on x86."""
    return m.element == F32 and m.width in (8, 16) and is_x86_triple(str(m.module.triple))


# gelu's tables: halved, interval 0's constant term holding the 1/2 that erf's form adds as a (= u / 2).
_HALF_P0 = (0.0,) + tuple(p / 2 for p in _P0[1:])
_HALF_Q = (((_Q[0][0] + 0.5) / 2, *(q / 2 for q in _Q[0][1:])), *(tuple(q / 2 for q in row) for row in _Q[1:]))
_BELOW_EIGHT = 7.9999995  # the largest float32 below 8: t clamped to it (vminps) keeps the interval index <= 7


def _interval(m: VectorEmit, t: ir.Value) -> tuple[ir.Value, ir.Value]:
    """The interval index floor(t) and u = t minus it, for t clamped below 8 (one vminps that keeps a NaN, which
    then reaches u): past 3.95 the last interval's polynomial itself rounds to erf = 1, so no select is needed."""
    t = m.select(m.cmp(">=", t, _BELOW_EIGHT), _BELOW_EIGHT, t)
    index = _truncate(m, t)
    return index, m.sub(t, m.b.sitofp(index, m.f))


def _truncate(m: VectorEmit, t: ir.Value) -> ir.Value:
    """t rounded toward zero to i32 lanes by cvttps2dq itself, which gives INT_MIN for NaN (whose interval's
    coefficients are then looked up at its low bits, 0: harmless, u is NaN); LLVM's fptosi would be poison there."""
    if m.width == 16:
        name, args = "llvm.x86.avx512.mask.cvttps2dq.512", [m.f, m.i, ir.IntType(16), I32]
        operands = [t, ir.Constant(m.i, None), ir.Constant(ir.IntType(16), -1), ir.Constant(I32, 4)]
    else:
        name, args, operands = "llvm.x86.avx.cvtt.ps2dq.256", [m.f], [t]
    fn = m.module.globals.get(name) or ir.Function(m.module, ir.FunctionType(m.i, args), name)
    return m.b.call(fn, operands)


def _polynomial(m: VectorEmit, q: tuple[tuple[float, ...], ...], index: ir.Value, u: ir.Value) -> ir.Value:
    """Q_index(u), its coefficients looked up per lane."""
    acc = m.lookup([row[-1] for row in q], index)
    for k in range(len(q[0]) - 2, -1, -1):
        acc = m.fma(acc, u, m.lookup([row[k] for row in q], index))
    return acc


def emit(m: VectorEmit, x: ir.Value) -> ir.Value:
    """erf(x) by the interval polynomials; NaN propagates through u, +-inf and |x| >= 3.95 give +-1, -0 gives -0."""
    a = m.abs(x)
    index, u = _interval(m, m.mul(a, 2.0))
    first = m.b.icmp_signed("==", index, ir.Constant(index.type, [ir.Constant(I32, 0)] * m.width))
    r = m.fma(_polynomial(m, _Q, index, u), u, m.select(first, a, m.lookup(list(_P0), index)))
    return m.copysign(r, x)


def emit_gelu(m: VectorEmit, x: ir.Value) -> ir.Value:
    """gelu(x) = x Phi(x) as x (1/2 + copysign(erf(|x| / sqrt 2) / 2, x)): +inf and huge x give x, -inf NaN (as
    0.5 x (1 + erf) does), NaN propagates, x below about -5.6 gives -0."""
    t = m.mul(m.abs(x), 2.0 * math.sqrt(0.5))  # 2 |x| / sqrt 2
    index, u = _interval(m, t)
    half_erf = m.fma(_polynomial(m, _HALF_Q, index, u), u, m.lookup(list(_HALF_P0), index))
    return m.mul(x, m.add(m.copysign(half_erf, x), 0.5))
