"""Where the GEMM's operands come from, and how blocks of them are packed into contiguous panels.

Packed A holds MR-row panels: panel q, step k at dst + q*kc*MR + k*MR (one row per lane). Packed B holds
NR-column panels: panel q, step k at dst + q*kc*NR + k*NR, with zeros in the lanes past N. A pre-packed
(constant) operand uses the same layout with kc = K, so packing a whole matrix once gives the pre-packed form.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Callable, Protocol, Sequence

import llvmlite.ir as ir

from .gemm_kernel import (F32, I1, I32, I64, L2, PTR, Tiling, const64, elem_ptr, intrinsic, lane_mask, load_vec,
                          prefetch, store_vec, vec_type)
from .loops import for_range, store_prefix, undef, vector_const, zeros

# Reads one packed row of a B panel: (builder, k) -> ceil(lanes / W) vectors, zero past the panel's lanes.
RowReader = Callable[[ir.IRBuilder, ir.Value], list]

_I32_LIMIT = 2 ** 31


@dataclass(frozen=True)
class Strided:
    """A matrix in memory: element (i, j) of batch b at base + offset(b) + i*rs + j*cs (elements; 0 broadcasts)."""

    rs: int
    cs: int
    batch_strides: tuple[int, ...] = ()
    k_unit = 1

    def pack_panel(self, builder: ir.IRBuilder, base: ir.Value, col: ir.Value, lanes: int, tiling: Tiling,
                   panel: ir.Value, k0: ir.Value, kc: ir.Value) -> None:
        """Pack rows [k0, k0+kc) of the `lanes` columns from `col` into the NR-wide panel rows at `panel`."""
        w, nr = tiling.width, tiling.nr
        k_from = const64(0)
        if self.rs == 1 and self.cs != 1 and w & (w - 1) == 0:
            k_from = _pack_b_transposed(builder, self, base, col, lanes, panel, k0, kc, tiling)
        read = self.panel(builder, base, col, lanes, tiling)
        with for_range(builder, k_from, kc, name="pb.k") as k:
            row = elem_ptr(builder, panel, builder.mul(k, const64(nr)))
            for v, value in enumerate(read(builder, builder.add(k0, k))):
                store_vec(builder, value, elem_ptr(builder, row, v * w))

    def panel(self, builder: ir.IRBuilder, base: ir.Value, col: ir.Value, lanes: int, tiling: Tiling) -> RowReader:
        """Read B rows of `lanes` columns from `col`: vector loads when columns are adjacent, else gathers."""
        w = tiling.width
        nvec = -(-lanes // w)
        masks = [lane_mask(w, lanes - v * w) if lanes - v * w < w else None for v in range(nvec)]
        start = elem_ptr(builder, base, builder.mul(col, const64(self.cs)))
        offsets = None if self.cs == 1 else lane_offsets(w, self.cs)

        def row(b: ir.IRBuilder, k: ir.Value) -> list:
            ptr = elem_ptr(b, start, b.mul(k, const64(self.rs)))
            if offsets is None:
                return [load_vec(b, elem_ptr(b, ptr, v * w), w, masks[v]) for v in range(nvec)]
            return [gather(b, elem_ptr(b, ptr, v * w * self.cs), offsets, masks[v]) for v in range(nvec)]
        return row


@dataclass(frozen=True)
class Prepacked:
    """A constant operand already in the packed layout with kc = K (see emit_prepack_a / emit_prepack_b)."""

    batch_strides: tuple[int, ...] = ()


class PanelSource(Protocol):
    """Anything the driver can pack B panels from (a strided matrix, or conv's implicit im2col matrix).

    K blocks are cut at multiples of `k_unit`, so a source may treat groups of that many rows alike.
    """

    batch_strides: tuple[int, ...]
    k_unit: int

    def pack_panel(self, builder: ir.IRBuilder, base: ir.Value, col: ir.Value, lanes: int, tiling: Tiling,
                   panel: ir.Value, k0: ir.Value, kc: ir.Value) -> None: ...


class ABlockSource(Protocol):
    """An A operand the driver cannot read by strides, which packs its own blocks into MR-row panels (the layout
    pack_a_block writes); K blocks are cut at multiples of `k_unit`."""

    batch_strides: tuple[int, ...]
    k_unit: int

    def pack_a_block(self, builder: ir.IRBuilder, base: ir.Value, dst: ir.Value, i0: ir.Value, mc: ir.Value,
                     k0: ir.Value, kc: ir.Value, m: int, tiling: Tiling) -> None: ...


def lane_offsets(width: int, stride: int) -> ir.Constant:
    """The i32 vector (0, stride, 2*stride, ...)."""
    if abs(stride) * width >= _I32_LIMIT:
        raise ValueError(f"column stride {stride} too large for 32-bit gather offsets")
    return vector_const(ir.VectorType(I32, width), [i * stride for i in range(width)])


def gather(builder: ir.IRBuilder, base: ir.Value, offsets: ir.Value, mask: ir.Value | None) -> ir.Value:
    """Load base[offsets[i]] into lane i for the lanes in `mask` (all when None); the others are 0.0."""
    width = offsets.type.count
    ptrs = builder.gep(base, [offsets], source_etype=F32)
    ptrs.type = ir.VectorType(PTR, width)  # llvmlite types a vector-indexed gep as a scalar pointer
    if mask is None:
        mask = vector_const(ir.VectorType(I1, width), [1] * width)
    vt = vec_type(width)
    fn = intrinsic(builder.module, f"llvm.masked.gather.v{width}f32.v{width}p0", vt,
                   [ptrs.type, I32, mask.type, vt])
    return builder.call(fn, [ptrs, ir.Constant(I32, 4), mask, zeros(vt)])


def batch_offset(builder: ir.IRBuilder, index: ir.Value, dims: Sequence[int], strides: Sequence[int]) -> ir.Value:
    """The element offset of linear batch `index` over batch `dims` (row-major) with per-dimension strides."""
    if len(strides) != len(dims):
        raise ValueError(f"{len(strides)} batch strides for {len(dims)} batch dimensions")
    total = const64(0)
    inner = 1
    for dim, stride in reversed(list(zip(dims, strides))):
        if stride and dim > 1:
            coord = builder.udiv(index, const64(inner)) if inner > 1 else index
            if inner * dim < prod(dims):
                coord = builder.urem(coord, const64(dim))
            total = builder.add(total, builder.mul(coord, const64(stride)))
        inner *= dim
    return total


def smin(builder: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed("<", x, y), x, y)


def smax(builder: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed(">", x, y), x, y)


def pack_b_block(builder: ir.IRBuilder, source: PanelSource, base: ir.Value, dst: ir.Value, k0: ir.Value,
                 kc: ir.Value, j0: ir.Value, nc: ir.Value, n: int, tiling: Tiling) -> None:
    """Pack B[k0:k0+kc, j0:j0+nc] into NR-column panels at dst; the panel past N is zero-padded."""
    nr = tiling.nr
    edge = n % nr

    def pack_panel(col: ir.Value, panel: ir.Value, lanes: int) -> None:
        source.pack_panel(builder, base, col, lanes, tiling, panel, k0, kc)

    with for_range(builder, j0, builder.add(j0, nc), nr, name="pb") as col:
        panel = elem_ptr(builder, dst, builder.mul(builder.sub(col, j0), kc))
        if edge == 0:
            pack_panel(col, panel, nr)
        elif n < nr:
            pack_panel(col, panel, edge)
        else:
            full = builder.icmp_signed("<=", builder.add(col, const64(nr)), const64(n))
            with builder.if_else(full) as (then, otherwise):
                with then:
                    pack_panel(col, panel, nr)
                with otherwise:
                    pack_panel(col, panel, edge)


def _pack_b_transposed(builder: ir.IRBuilder, source: Strided, base, col, lanes: int, panel, k0, kc,
                       tiling: Tiling) -> ir.Value:
    """B whose columns are contiguous (W^T of a row-major weight): W steps of each column at once, transposed
    in registers into W packed rows. Returns the first step left for the row-by-row loop (kc rounded down to W).
    """
    w, nr = tiling.width, tiling.nr
    zero = zeros(vec_type(w))
    start = elem_ptr(builder, base, builder.mul(col, const64(source.cs)))
    chunks = builder.mul(builder.sdiv(kc, const64(w)), const64(w))
    with for_range(builder, 0, chunks, w, name="pb.t") as k:
        first = elem_ptr(builder, start, builder.add(k0, k))
        for v in range(-(-lanes // w)):
            columns = [load_vec(builder, elem_ptr(builder, first, (v * w + j) * source.cs), w)
                       if v * w + j < lanes else zero for j in range(w)]
            for step, value in enumerate(transpose(builder, columns)):
                row = builder.add(builder.mul(builder.add(k, const64(step)), const64(nr)), const64(v * w))
                store_vec(builder, value, elem_ptr(builder, panel, row))
    return chunks


def pack_a_block(builder: ir.IRBuilder, source: Strided, base: ir.Value, dst: ir.Value, i0: ir.Value,
                 mc: ir.Value, k0: ir.Value, kc: ir.Value, m: int, tiling: Tiling) -> None:
    """Pack A[i0:i0+mc, k0:k0+kc] into MR-row panels at dst (rows past M are left unwritten: never read)."""
    mr = tiling.mr
    with for_range(builder, i0, builder.add(i0, mc), mr, name="pa") as row:
        panel = elem_ptr(builder, dst, builder.mul(builder.sub(row, i0), kc))
        rows = smin(builder, const64(mr), builder.sub(const64(m), row))
        start = elem_ptr(builder, base, builder.mul(row, const64(source.rs)))
        pack_a_panel(builder, source, start, panel, rows, m % mr, k0, kc, tiling)


def pack_a_panel(builder: ir.IRBuilder, source: Strided, start: ir.Value, panel: ir.Value, rows: ir.Value,
                 edge: int, k0: ir.Value, kc: ir.Value, tiling: Tiling) -> None:
    """Steps [k0, k0+kc) of the `rows` rows of A from `start` into one MR-row panel: MR rows, or `edge` (M % MR) in
    the last panel. Rows with unit column stride are loaded W steps at a time and transposed in registers."""
    mr, w = tiling.mr, tiling.width
    if not (mr <= w and source.cs == 1 and w & (w - 1) == 0):
        _pack_a_rest(builder, source, start, panel, rows, k0, const64(0), kc, tiling)
        return
    if edge == 0:
        _pack_a_transposed(builder, source, start, panel, k0, kc, tiling, mr)
        return
    with builder.if_else(builder.icmp_signed("==", rows, const64(mr))) as (then, otherwise):
        with then:
            _pack_a_transposed(builder, source, start, panel, k0, kc, tiling, mr)
        with otherwise:
            _pack_a_transposed(builder, source, start, panel, k0, kc, tiling, edge)


def _pack_a_rest(builder: ir.IRBuilder, source: Strided, start, panel, rows, k0, k_from, kc, tiling: Tiling) -> None:
    """Steps [k_from, kc) of one panel, one k step at a time."""
    mr, w = tiling.mr, tiling.width
    if mr <= w and source.rs * w < _I32_LIMIT:
        _pack_a_vector(builder, source, start, panel, rows, k0, k_from, kc, tiling)
    else:
        _pack_a_scalar(builder, source, start, panel, rows, k0, k_from, kc, mr)


def transpose(builder: ir.IRBuilder, rows: list) -> list:
    """Transpose a W x W block held as W row vectors (W a power of two): swap row bit s with lane bit s."""
    width = len(rows)
    s = width // 2
    while s:
        keep = [j if j & s == 0 else width + j - s for j in range(width)]
        take = [j + s if j & s == 0 else width + j for j in range(width)]
        for i in range(width):
            if i & s == 0:
                low, high = rows[i], rows[i + s]
                rows[i] = builder.shuffle_vector(low, high, vector_const(ir.VectorType(I32, width), keep))
                rows[i + s] = builder.shuffle_vector(low, high, vector_const(ir.VectorType(I32, width), take))
        s //= 2
    return rows


def _pack_a_transposed(builder: ir.IRBuilder, source: Strided, start, panel, k0, kc, tiling: Tiling,
                       count: int) -> None:
    """A panel of `count` rows of row-major A: load W steps of each row, transpose in registers, store MR lanes a
    step (those past `count` undefined: never read). The remaining kc % W steps go one at a time. The same steps of
    the next panel's rows are prefetched into L2 as each W steps are read: a panel's rows are short streams (kc
    floats each) that the hardware prefetchers barely learn, and where A comes from L3 (a transformer's 4 MB
    feed-forward activation) packing it waited on each line: GEMMs reading such an A ran 3-6% faster with the
    prefetch (AVX-512 and AVX2 code on Zen 4), those whose A sits in L2 about 1%. Into L1 instead it cost 2-10%."""
    mr, w = tiling.mr, tiling.width
    blank = undef(vec_type(w))
    chunks = builder.mul(builder.sdiv(kc, const64(w)), const64(w))
    with for_range(builder, 0, chunks, w, name="pa.t") as k:
        col = builder.add(k0, k)
        rows = [load_vec(builder, elem_ptr(builder, start, builder.add(col, const64(r * source.rs))), w)
                for r in range(count)] + [blank] * (w - count)
        for r in range(mr, 2 * mr):  # past the block or the matrix's end the hint reads nothing: it never faults
            prefetch(builder, elem_ptr(builder, start, builder.add(col, const64(r * source.rs))), L2)
        for step, value in enumerate(transpose(builder, rows)):
            dst = elem_ptr(builder, panel, builder.mul(builder.add(k, const64(step)), const64(mr)))
            store_step(builder, value, dst, mr, last=step == w - 1)
    _pack_a_rest(builder, source, start, panel, const64(count), k0, chunks, kc, tiling)


def _pack_a_vector(builder: ir.IRBuilder, source: Strided, start, panel, rows, k0, k_from, kc,
                   tiling: Tiling) -> None:
    """One (gathered or contiguous) vector of MR row elements per k step, stored with the MR-lane mask."""
    mr, w = tiling.mr, tiling.width
    iota = vector_const(ir.VectorType(I64, w), list(range(w)))
    limit = builder.insert_element(undef(ir.VectorType(I64, w)), rows, ir.Constant(I32, 0))
    limit = builder.shuffle_vector(limit, limit, zeros(ir.VectorType(I32, w)))
    mask = builder.icmp_signed("<", iota, limit)
    offsets = None if source.rs == 1 else lane_offsets(w, source.rs)

    def step(k: ir.Value, last: bool) -> None:
        src = elem_ptr(builder, start, builder.mul(builder.add(k0, k), const64(source.cs)))
        value = load_vec(builder, src, w, mask) if offsets is None else gather(builder, src, offsets, mask)
        store_step(builder, value, elem_ptr(builder, panel, builder.mul(k, const64(mr))), mr, last)

    if mr == w:
        with for_range(builder, k_from, kc, name="pa.k") as k:
            step(k, last=False)
        return
    final = builder.sub(kc, const64(1))
    with for_range(builder, k_from, final, name="pa.k") as k:
        step(k, last=False)
    with builder.if_then(builder.icmp_signed("<", k_from, kc)):
        step(final, last=True)


def store_step(builder: ir.IRBuilder, value: ir.Value, dst: ir.Value, mr: int, last: bool) -> None:
    """Store one k step's MR lanes of a W-lane vector into its panel, the steps in increasing order. Where MR < W a
    step's store is whole and its extra lanes land on the next step's slots, which that step's store overwrites;
    the panel's last step stores its MR lanes alone. A masked store in their place (AVX2's vmaskmovps, microcoded on
    AMD) made packing A about 12% of a 1024 x 1024 -> 256 GEMM on AVX2: compiled side by side on one Zen 4 thread,
    AVX2 code, that GEMM 100 -> 110 GFLOP/s, SGEMM n = 512 105 -> 110, the transformer 2-3% faster; AVX-512, whose
    masked stores are native, unchanged."""
    if last and value.type.count > mr:
        store_prefix(builder, value, dst, mr)
    else:
        store_vec(builder, value, dst)


def _pack_a_scalar(builder: ir.IRBuilder, source: Strided, start, panel, rows, k0, k_from, kc, mr: int) -> None:
    with for_range(builder, 0, rows, name="pa.r") as r:
        src_row = elem_ptr(builder, start, builder.mul(r, const64(source.rs)))
        with for_range(builder, k_from, kc, name="pa.k") as k:
            src = elem_ptr(builder, src_row, builder.mul(builder.add(k0, k), const64(source.cs)))
            value = builder.load(src, typ=F32, align=4)
            dst = elem_ptr(builder, panel, builder.add(builder.mul(k, const64(mr)), r))
            builder.store(value, dst, align=4)
