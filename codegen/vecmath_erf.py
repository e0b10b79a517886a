"""erf on x86 vectors of 8 or 16 float32 lanes: one polynomial per interval of |x|, its coefficients looked up per
lane by permutes (vpermps), so every lane runs the same FMAs and no exp.

For a = |x| < 4 the interval is i = floor(s a) and u = s a - i (exact), and erf(a) = P0[i] + u Q_i(u); on the first
interval the form is a + u Q_0(u) (P0 replaced by a itself), which keeps the relative error small down to the
subnormals. AVX2 takes 8 intervals of a half (s = 2, Q of degree 6: 8 lookups, 7 FMAs); AVX-512 16 intervals of a
quarter (s = 4, Q of degree 4: 6 lookups, 5 FMAs), since one vpermps there reads 16 entries as cheaply as 8. Past
3.95 erf rounds to 1, which the last interval's polynomial gives by itself with t clamped below its end. The
coefficients are a weighted least-squares fit in float64 (relative to erf; for the quarters reweighted towards the
minimax fit), each rounded to float32 from the lowest degree up with the higher ones refitted after it; in float32
FMA arithmetic the halves are within 1 ulp of erf, the quarters within 1.2. The general form in vecmath (two
polynomials, one of them through exp, blended) stays for scalars and other widths.

gelu (erf form) is x (1/2 + 1/2 erf(|x| / sqrt 2) with x's sign) from the same intervals, the tables halved (exact)
and interval 0 in the uniform form u (Q_0(u) + 1/s), so that no select is needed: 20 vector instructions on
AVX-512 (about 25 on AVX2) against the 33 of 0.5 x (1 + erf(x / sqrt 2)) through erf, which made GELU 14% of a
transformer's first feed-forward GEMM. Against the halves, the quarters ran GELU alone 18% faster on AVX-512 and
the transformer's GELU feed-forward GEMM 1%, with gelu's largest error 2.3 ulp instead of 2.5 (erf's 1.13 for 0.92).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import llvmlite.ir as ir

from .loops import F32, I32
from .target import is_x86_triple
from .vecmath_emit import VectorEmit

ERF_ONE = 3.95   # erf(x) rounds to 1.0f for x >= 3.92

class _Tables(NamedTuple):
    """One interval split: t = scale |x| picks interval floor(t) of len(p0); p0[i] = erf(i / scale) rounded to float32
    (p0[0] unused: interval 0 adds a), q[i] Q_i's coefficients, lowest degree first."""

    scale: float
    p0: tuple[float, ...]
    q: tuple[tuple[float, ...], ...]

    def halved(self) -> _Tables:
        """gelu's tables: halved, interval 0's constant term holding the 1/2 that erf's form adds as a = u / scale."""
        first = ((self.q[0][0] + 1 / self.scale) / 2, *(c / 2 for c in self.q[0][1:]))
        return _Tables(self.scale, (0.0,) + tuple(p / 2 for p in self.p0[1:]),
                       (first, *(tuple(c / 2 for c in row) for row in self.q[1:])))


_HALVES = _Tables(2.0, (0.0, 0.5204998850822449, 0.8427007794380188, 0.9661051630973816, 0.9953222870826721,
                        0.9995930194854736, 0.9999778866767883, 0.9999992847442627), (
    (0.12837918102741241 / 2, -9.376105936098611e-07 / 2, -0.0940183699131012 / 2, -7.316230767173693e-05 / 2,
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
     -0.00014601358270738274, 9.789523028302938e-05, -2.61929180851439e-05)))

_QUARTERS = _Tables(4.0, (
    0.0, 0.27632638812065125, 0.5204998850822449, 0.7111556529998779, 0.8427007794380188, 0.9229001402854919,
    0.9661051630973816, 0.9866716861724854, 0.9953222870826721, 0.9985373020172119, 0.9995930194854736,
    0.9998993873596191, 0.9999778866767883, 0.9999957084655762, 0.9999992847442627, 0.9999998807907104), (
    (0.03209478408098221, 4.152693691139575e-07, -0.0058801136910915375, 7.804805136402138e-06,
     0.00010350908269174397),
    (0.26500335335731506, -0.016559507697820663, -0.004847132135182619, 0.0005306274979375303,
     4.615786747308448e-05),
    (0.21969513595104218, -0.027456272393465042, -0.0023115379735827446, 0.0007573870243504643,
     -2.8973901862627827e-05),
    (0.1607317328453064, -0.03012843057513237, 0.00039071906940080225, 0.0006266712443903089,
     -7.557476783404127e-05),
    (0.10377760976552963, -0.025950705632567406, 0.002182444091886282, 0.0002427028230158612,
     -5.268781751510687e-05),
    (0.059129808098077774, -0.018475420773029327, 0.002613701857626438, -2.7280028007226065e-05,
     -3.581515557016246e-05),
    (0.029731828719377518, -0.011144449934363365, 0.0021559533197432756, -0.00016628131561446935,
     -1.0559102520346642e-05),
    (0.013193034566938877, -0.005766779650002718, 0.0013942705700173974, -0.00017351657152175903,
     3.555279590727878e-06),
    (0.005165652837604284, -0.002574593760073185, 0.0007287212065421045, -0.0001059117930708453,
     1.1063376632591826e-06),
    (0.0017846499104052782, -0.0009968460071831942, 0.0003178399056196213, -4.878260369878262e-05,
     -1.1333302154525882e-06),
    (0.0005459620733745396, -0.0003513384726829827, 0.00016074924496933818, -6.736507930327207e-05,
     1.8378499589744024e-05),
    (0.00014610702055506408, -9.703029354568571e-05, 3.247474887757562e-05, -8.820660468700225e-08,
     -2.9501418339350494e-06),
    (3.593393921619281e-05, -3.501728497212753e-05, 3.7131772842258215e-05, -3.219280552002601e-05,
     1.1977084795944393e-05),
    (6.743269295839127e-06, -1.508066361566307e-06, -9.324020538770128e-06, 1.3082903933536727e-05,
     -5.456569397210842e-06),
    (-2.0135500378160032e-08, 9.736105312185828e-06, -2.9854576496290974e-05, 3.45868211297784e-05,
     -1.387372049066471e-05),
    (4.900107910543738e-07, -2.354559001105372e-06, 6.1249224927451e-06, -6.898916126374388e-06,
     2.747656708379509e-06)))

_ERF = {8: _HALVES, 16: _QUARTERS}          # by vector width
_GELU = {width: tables.halved() for width, tables in _ERF.items()}


def applies(m: VectorEmit) -> bool:
    """Whether this form can be emitted: float32 vectors of 8 (AVX2) or 16 (AVX-512) lanes on x86."""
    return m.element == F32 and m.width in (8, 16) and is_x86_triple(str(m.module.triple))


def _interval(m: VectorEmit, t: ir.Value, intervals: int) -> tuple[ir.Value, ir.Value]:
    """The interval index floor(t) and u = t minus it, for t clamped below `intervals` (one vminps that keeps a
    NaN, which then reaches u): past 3.95 the last interval's polynomial itself rounds to erf = 1."""
    below = intervals * (1 - 2.0 ** -24)  # the largest float32 below a power of two
    t = m.select(m.cmp(">=", t, below), below, t)
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
    tables = _ERF[m.width]
    a = m.abs(x)
    index, u = _interval(m, m.mul(a, tables.scale), len(tables.p0))
    first = m.b.icmp_signed("==", index, ir.Constant(index.type, [ir.Constant(I32, 0)] * m.width))
    r = m.fma(_polynomial(m, tables.q, index, u), u, m.select(first, a, m.lookup(list(tables.p0), index)))
    return m.copysign(r, x)


def emit_gelu(m: VectorEmit, x: ir.Value) -> ir.Value:
    """gelu(x) = x Phi(x) as x (1/2 + copysign(erf(|x| / sqrt 2) / 2, x)): +inf and huge x give x, -inf NaN (as
    0.5 x (1 + erf) does), NaN propagates, x below about -5.6 gives -0."""
    tables = _GELU[m.width]
    t = m.mul(m.abs(x), tables.scale * math.sqrt(0.5))  # scale |x| / sqrt 2
    index, u = _interval(m, t, len(tables.p0))
    half_erf = m.fma(_polynomial(m, tables.q, index, u), u, m.lookup(list(tables.p0), index))
    return m.mul(x, m.add(m.copysign(half_erf, x), 0.5))
