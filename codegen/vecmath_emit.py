"""Emitting straight-line float math on scalars or vectors: the arithmetic vecmath's functions are written with,
and libm calls lane by lane for what has no vector form.
"""
from __future__ import annotations

from typing import Callable, Sequence

import llvmlite.ir as ir

from .loops import CONTRACT, F32, I32, I64, vec, undef, vector_const
from .target import is_x86_triple, target_of


class VectorEmit:
    """Arithmetic on float32/float64 scalars or <W x T> vectors, with constants splatted to the right type.

    `i` is the integer type of the same width and lane count, for bit manipulation of the floats.
    """

    def __init__(self, builder: ir.IRBuilder, module: ir.Module, width: int, element: ir.Type = F32) -> None:
        self.b, self.module, self.width, self.element = builder, module, width, element
        self.bits_per_lane = 32 if element == F32 else 64
        self.f, self.i = vec(width, element), vec(width, I32 if element == F32 else I64)

    def k(self, value: float) -> ir.Constant:
        return self._const(self.f, self.element, value)

    def ki(self, value: int) -> ir.Constant:
        return self._const(self.i, self.i.element if self.width > 1 else self.i, value)

    def _const(self, typ: ir.Type, element: ir.Type, value: float | int) -> ir.Constant:
        scalar = ir.Constant(element, value)
        return vector_const(typ, scalar) if self.width > 1 else scalar

    def _v(self, value: ir.Value | float) -> ir.Value:
        return self.k(value) if isinstance(value, (int, float)) else value

    def add(self, a, b) -> ir.Value:
        return self.b.fadd(self._v(a), self._v(b), flags=CONTRACT)

    def sub(self, a, b) -> ir.Value:
        return self.b.fsub(self._v(a), self._v(b), flags=CONTRACT)

    def mul(self, a, b) -> ir.Value:
        return self.b.fmul(self._v(a), self._v(b), flags=CONTRACT)

    def div(self, a, b) -> ir.Value:
        return self.b.fdiv(self._v(a), self._v(b), flags=CONTRACT)

    def fma(self, a, b, c) -> ir.Value:
        """a * b + c; fused into one rounding where the target has FMA."""
        return self.add(self.mul(a, b), c)

    def horner(self, x: ir.Value, coeffs: tuple[float, ...]) -> ir.Value:
        """The polynomial with `coeffs` (highest degree first) at x."""
        acc = self.k(coeffs[0])
        for c in coeffs[1:]:
            acc = self.fma(acc, x, c)
        return acc

    def cmp(self, op: str, a, b, *, ordered: bool = True) -> ir.Value:
        fcmp = self.b.fcmp_ordered if ordered else self.b.fcmp_unordered
        return fcmp(op, self._v(a), self._v(b))

    def select(self, cond: ir.Value, a, b) -> ir.Value:
        return self.b.select(cond, self._v(a), self._v(b))

    def bits(self, x: ir.Value) -> ir.Value:
        return self.b.bitcast(x, self.i)

    def float(self, i: ir.Value) -> ir.Value:
        return self.b.bitcast(i, self.f)

    def abs(self, x: ir.Value) -> ir.Value:
        return self.float(self.b.and_(self.bits(x), self.ki((1 << (self.bits_per_lane - 1)) - 1)))

    def copysign(self, magnitude: ir.Value, sign: ir.Value) -> ir.Value:
        """|magnitude| with the sign bit of `sign`."""
        sign_bit = -(1 << (self.bits_per_lane - 1))
        mag = self.b.and_(self.bits(magnitude), self.ki(~sign_bit))
        return self.float(self.b.or_(mag, self.b.and_(self.bits(sign), self.ki(sign_bit))))

    def pow2(self, n: ir.Value) -> ir.Value:
        """2^n for integer n in the normal exponent range, built from its exponent bits."""
        bias, mantissa = (127, 23) if self.element == F32 else (1023, 52)
        return self.float(self.b.shl(self.b.add(n, self.ki(bias)), self.ki(mantissa)))

    def can_scale(self) -> bool:
        """Whether scale() is one instruction here: vectors of 16 float32 or 8 float64 lanes in a module for an x86
        target with AVX-512 (8 float64 lanes are also two AVX2 registers)."""
        target = target_of(self.module)
        return (self.width * self.bits_per_lane == 512 and target is not None and target.vector_width == 16
                and is_x86_triple(target.triple))

    def scale(self, x: ir.Value, n: ir.Value) -> ir.Value:
        """x 2^floor(n) per lane, rounded once (vscalefps/pd: overflow to inf, underflow through the subnormals to
        0); only where can_scale()."""
        name = f"llvm.x86.avx512.mask.scalef.{'ps' if self.element == F32 else 'pd'}.512"
        mask = ir.IntType(self.width)
        fn = self.module.globals.get(name) or ir.Function(
            self.module, ir.FunctionType(self.f, [self.f, self.f, self.f, mask, I32]), name)
        current_rounding = 4  # _MM_FROUND_CUR_DIRECTION: the MXCSR's round-to-nearest
        return self.b.call(fn, [x, n, x, ir.Constant(mask, -1), ir.Constant(I32, current_rounding)])

    def times_pow2(self, p: ir.Value, n: ir.Value, n_int: ir.Value) -> ir.Value:
        """p 2^n for an integer n (as float n and as integer n_int) whose halves 2^(n/2) are normal, rounded once:
        one vscalef on AVX-512, else two exact powers of two."""
        if self.can_scale():
            return self.scale(p, n)
        half = self.b.ashr(n_int, self.ki(1))
        return self.mul(self.mul(p, self.pow2(half)), self.pow2(self.b.sub(n_int, half)))

    def fused(self, a, c, d) -> ir.Value:
        """a c + d rounded once (llvm.fma), for exact error terms: only where Target.fma holds (elsewhere LLVM would
        make it a libm call per lane)."""
        name = f"llvm.fma.{'v%d' % self.width if self.width > 1 else ''}{'f32' if self.element == F32 else 'f64'}"
        fn = self.module.globals.get(name) or ir.Function(self.module, ir.FunctionType(self.f, [self.f] * 3), name)
        return self.b.call(fn, [self._v(a), self._v(c), self._v(d)])

    def two_prod(self, a: ir.Value, c: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(p, e) with p + e = a c exactly, p = fl(a c): one FMA where the target has it, else Dekker's product of
        Veltkamp's halves (float64; plain operations, never contracted)."""
        b, a, c = self.b, self._v(a), self._v(c)
        p = b.fmul(a, c)
        target = target_of(self.module)
        if target is not None and target.fma:
            return p, self.fused(a, c, b.fneg(p))
        split = self.k(134217729.0 if self.element != F32 else 4097.0)   # 2^27 + 1 (2^12 + 1 for float32)

        def halves(v: ir.Value) -> tuple[ir.Value, ir.Value]:
            t = b.fmul(split, v)
            high = b.fsub(t, b.fsub(t, v))
            return high, b.fsub(v, high)
        (ah, al), (ch, cl) = halves(a), halves(c)
        e = b.fadd(b.fadd(b.fadd(b.fsub(b.fmul(ah, ch), p), b.fmul(ah, cl)), b.fmul(al, ch)), b.fmul(al, cl))
        return p, e

    def lookup(self, table: list[float], index: ir.Value) -> ir.Value:
        """table[index] per lane (see permute_lookup)."""
        return permute_lookup(self.b, table, index)

    def any(self, mask: ir.Value) -> ir.Value:
        """Whether any lane of an i1 mask (or the i1 itself) is set."""
        if self.width == 1:
            return mask
        fn = self.module.globals.get(f"llvm.vector.reduce.or.v{self.width}i1") or ir.Function(
            self.module, ir.FunctionType(ir.IntType(1), [mask.type]), f"llvm.vector.reduce.or.v{self.width}i1")
        return self.b.call(fn, [mask])


    def unless_rare(self, rare: ir.Value, fast: ir.Value, slow: Callable[[], ir.Value], name: str,
                    odds: int) -> ir.Value:
        """`fast`, or where some lane of the mask `rare` is set, slow() (emitted in a block of its own that runs
        only then, weighted as taken once in `odds`): a vector function's uncommon inputs cost the common ones one
        check."""
        entry = self.b.block
        branch = self.b.append_basic_block(f"{name}.rare")
        done = self.b.append_basic_block(f"{name}.done")
        self.b.cbranch(self.any(rare), branch, done).set_weights([1, odds])
        self.b.position_at_end(branch)
        other = slow()
        taken = self.b.block
        self.b.branch(done)
        self.b.position_at_end(done)
        out = self.b.phi(fast.type)
        out.add_incoming(fast, entry)
        out.add_incoming(other, taken)
        return out


LogCore = Callable[[VectorEmit, ir.Value, ir.Value], ir.Value]


def log_of_any(m: VectorEmit, x: ir.Value, core: LogCore) -> ir.Value:
    """log(x) from core(m, e, f), log(2^e (1 + f)) for 1 + f in [sqrt(1/2), sqrt(2)) (e as a float), for either float
    dtype: a vector whose lanes are all positive normal numbers (nearly every one) checks that at once and skips the
    subnormal scaling and the special values (log's vector 1.25x faster in float32); any other takes the full form,
    the same arithmetic."""
    if m.width == 1:
        return _log_any(m, x, core)
    smallest = m.k(2.0 ** -126 if m.element == F32 else 2.0 ** -1022)
    normal = m.b.and_(m.cmp(">=", x, smallest), m.cmp("<", x, float("inf")))   # NaN fails both
    return m.unless_rare(m.b.not_(normal), core(m, *log_split(m, x, None)), lambda: _log_any(m, x, core), "log",
                         1 << 10)


def _log_any(m: VectorEmit, x: ir.Value, core: LogCore) -> ir.Value:
    """log(x) for any x: subnormals scaled by 2^mantissa first, log(+-0) = -inf, log(x < 0) = NaN, log(+inf) =
    +inf."""
    mantissa = 23 if m.element == F32 else 52
    tiny = m.cmp("<", x, 2.0 ** -126 if m.element == F32 else 2.0 ** -1022)   # subnormal (zero or negative: below)
    r = core(m, *log_split(m, m.select(tiny, m.mul(x, 2.0 ** mantissa), x), tiny))
    r = m.select(m.cmp("==", x, float("inf")), float("inf"), r)
    r = m.select(m.cmp("==", x, 0.0), -float("inf"), r)
    return m.select(m.cmp("<", x, 0.0, ordered=False), float("nan"), r)   # negative or NaN


def log_split(m: VectorEmit, x: ir.Value, tiny: ir.Value | None) -> tuple[ir.Value, ir.Value]:
    """(e, f) with x = 2^e (1 + f), 1 + f in [sqrt(1/2), sqrt(2)), by integer arithmetic on the bits of a positive
    normal x, or of a subnormal one scaled by 2^mantissa in the lanes of `tiny`; e as a float."""
    mantissa, sqrt_half = (23, 0x3F3504F3) if m.element == F32 else (52, 0x3FE6A09E667F3BCD)
    bits = m.bits(x)
    e = m.b.ashr(m.b.sub(bits, m.ki(sqrt_half)), m.ki(mantissa))
    f = m.sub(m.float(m.b.sub(bits, m.b.shl(e, m.ki(mantissa)))), 1.0)
    if tiny is not None:
        e = m.b.add(e, m.b.select(tiny, m.ki(-mantissa), m.ki(0)))
    return m.b.sitofp(e, m.f), f


def permute_lookup(builder: ir.IRBuilder, table: Sequence[float], index: ir.Value) -> ir.Value:
    """table[index] per lane of an x86 float32 vector of 8 or 16 lanes (i32 indices in [0, len(table)), at most 16
    entries), by vpermps: one on AVX-512, on AVX2 one per 8 entries and a blend on bit 3 of the index. The tables
    are constant operands."""
    lanes = index.type.count
    if lanes not in (8, 16) or len(table) > 16:
        raise ValueError(f"permute_lookup takes 8 or 16 lanes and at most 16 entries, not {lanes} and {len(table)}")
    typ = vec(lanes, F32)

    def permute(first: int, name: str) -> ir.Value:
        part = list(table[first:first + lanes])
        values = [ir.Constant(F32, v) for v in part + [0.0] * (lanes - len(part))]
        fn = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(typ, [typ, index.type]),
                                                             name)
        return builder.call(fn, [vector_const(typ, values), index])
    if lanes == 16:
        return permute(0, "llvm.x86.avx512.permvar.sf.512")
    low = permute(0, "llvm.x86.avx2.permps")
    if len(table) <= 8:
        return low
    high = permute(8, "llvm.x86.avx2.permps")
    # bit 3 moved to the sign bit: the blend reads the sign directly
    upper = builder.icmp_signed("<", builder.shl(index, vector_const(index.type, 28)), vector_const(index.type, 0))
    return builder.select(upper, high, low)


def libm(builder: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
    """A libm function applied lane by lane (LLVM has no vector form of these without a vector math library)."""
    first = args[0]
    element = first.type.element if isinstance(first.type, ir.VectorType) else first.type
    fn = builder.module.globals.get(name) or ir.Function(
        builder.module, ir.FunctionType(element, [element] * len(args)), name)
    if not isinstance(first.type, ir.VectorType):
        return builder.call(fn, list(args))
    out = undef(first.type)
    for lane in range(first.type.count):
        index = ir.Constant(I32, lane)
        out = builder.insert_element(out, builder.call(fn, [builder.extract_element(a, index) for a in args]), index)
    return out
