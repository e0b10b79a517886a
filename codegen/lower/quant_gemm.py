"""quantized_linear, alone or as the anchor of a gemm region: y = x @ W^T with W read packed (quant_decode.py) and
dequantized inside the loop, never as a dense matrix.

With one row of x (batch 1, GEMV: memory-bound, the case that matters most) threads claim W's rows (y's columns)
in chunks of groups of ROWS (codegen/claims.py), and the packed weight streams through once: each decoded vector
is multiplied into its row's accumulator in registers (a 4-bit block's sum is scaled once, an int8 row's once per
row; a group's rows are decoded together so each vector of x is loaded once for all of them, except on AVX2's byte
plane path, which decodes them one after another; x is first permuted into the planes' element order on both plane
paths, AVX2's and AVX-512's).
Several rows of x stream W the same way, X_TILE rows at a time and a chunk of K at a time (so that the tile's rows
of x stay in L1), where W is int8 or its 4-bit blocks are whole vectors, for up to STREAMED_ROWS rows of x or long
rows of W; otherwise (blocks across vectors, many rows of x against short rows of W) the product is tiled
(quant_tiles.py): W^T is decoded DEPTH rows at a time into a panel that register tiles of x's rows read, threads
taking C's columns by tiles. Each thread runs the region's elementwise epilogue over the columns of C it has
computed (the gemm epilogue of linalg.py, on masked vectors).
What surrounds the product (the region's plan, where C lives, the epilogue) is shared with quantized_matmul
(quant_matmul.py): each op states its product as a PackedProduct and registers it with register_packed.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import lcm, prod
from typing import Callable

import llvmlite.ir as ir

from braze.ir.graph import Graph, Node
from braze.ir.types import float32, int8

from ..claims import claimed_chunks
from ..gemm import TilePos
from ..loops import (CONTRACT, F32, I32, I64, alloca, for_range, i64, lane_mask, splat, vec, vector_const, vector_loop,
                     vector_registers, zeros)
from .base import (Kernel, KernelContext, KernelSpec, Unfusable, begin_kernel, broadcast_strides, claim_words, coalesce,
                   iota, load, register, round_up, store)
from .linalg import ANCHORED, anchor_of, epilogue_of, plan_region
from .quant_decode import (PackedWeight, decode, decode_lane_planes, decode_planes, packed_weight, plane_order,
                           row_scale)
from .quant_tiles import Tiled, minimum, panel_bytes, tiled_product
from .reduction import single_body

ROWS = 4
# Several rows of x stream W through registers as one row does, wherever W is int8 or its 4-bit blocks are whole
# vectors, up to STREAMED_ROWS of them or past that with rows of STREAMED_DEPTH and more (_streams), a tile of X_TILE
# rows of x at a time: each decoded vector of W, scaled by its block's (row's)
# scale, is multiplied into the accumulator of every row of the tile; a group takes as many rows of W (at least one)
# as keep their accumulators and decoded vectors in registers (_group), so each vector of x is loaded once per
# group. 4096 x 4096 on one Xeon thread (benchmarks/quantized_gemv.py), ms for 2 / 8 / 16 / 32 / 64
# / 128 rows of x, the tiled product (below) against this: NF4 7.0 / 8.5 / 11.7 / 16.7 / 25 / 61 against 1.1 / 2.4
# / 4.7 / 11 / 19-20 / 39-40, int8 6.9 / 7.7 / 10.3 / 15.5 / 24.6 / 56 against 1.0 / 3.0 / 5.8 / 12 / 23 / 48 (the
# dense kernel: 2.7 / 2.8 / 5.0 / 9.3-9.9 / 17-18 / 32-34); the tiled product's panel decode, element by element
# into scratch, cost it as much as its multiply-adds. AVX2 (BRAZE_CPU=haswell on that Xeon) streams NF4 at 2 / 8 rows
# in 2.4 / 4.1 ms with its byte planes, 2.9 / 5.6 decoding a vector at a time (dense: 2.7-2.8 / 7.2-7.8).
X_TILE = 8
FEW_REGISTERS = 28  # of AVX-512's 32 (12 of 16 below it)
# Streaming decodes W again for each tile of rows of x and sums each (row of W, row of x) pair across its vector's
# lanes once per chunk of K; the tiled product decodes a panel once for all rows: with many rows of x and short rows
# of W it is the faster. NF4 on one thread, ms streamed / tiled: K x N = 256 x 1024 at 32 / 64 / 256 / 1024 rows of
# x 0.15 / 0.30 / 1.25 / 5.2 against 0.20 / 0.30 / 0.90 / 4.0 (int8 alike), 1024 x 256 at 64 / 256 / 1024 0.26 /
# 1.11 / 4.2 against 0.30 / 0.96 / 4.1, 1024 x 1024 at 128 / 512 2.2 / 9.2 against 2.2 / 8.8, 2048 x 1024 at 128 / 512
# 4.3 / 17.7 against 4.2 / 22.2, 4096 x 4096 at 256 / 512 85 / 148 against 121 / 214. A QLoRA training step of the
# benchmark transformer at batch 8 (1024 rows of x, K of 256 and 1024) took 27.4 ms streamed, 20.8 tiled.
STREAMED_ROWS = 64
STREAMED_DEPTH = 2048
# The most scratch x permuted for plane decodes takes (per thread); more rows of x decode W interleaved instead, which
# ran NF4 4096 x 4096 10-20% slower at 2-64 rows of x (ms, planes / interleaved: 1.37 / 1.51 at 2, 3.6 / 4.3 at 8,
# 21.8 / 23.7 at 64).
PERMUTED_BYTES = 1 << 20
# The most of its rows of x a streamed tile reads at a time, in bytes: they stay in L1 while every group of W's rows
# meets them, where each group read all of them again from L2 (_chunk). NF4 / int8 4096 x 4096 at 8 and 16 rows of x
# on one thread: 2.5 / 4.0 and 5.1 / 5.2 ms with whole rows, 2.5 / 3.1 and 4.8 / 5.7 in chunks of 1024 elements; two
# rows (32 KB) ran 1.0 / 0.94 whole, 1.3 / 1.2 chunked (W read a chunk of every row at a time).
STREAMED_X_BYTES = 32 << 10


def _hsum(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """The sum of a vector's lanes, halving it."""
    lanes = v.type.count
    while lanes > 1:
        half = lanes // 2
        low = b.shuffle_vector(v, v, vector_const(ir.VectorType(I32, half), list(range(half))))
        high = b.shuffle_vector(v, v, vector_const(ir.VectorType(I32, half), list(range(half, lanes))))
        v, lanes = b.fadd(low, high, flags=CONTRACT), half
    return b.extract_element(v, ir.Constant(I32, 0))


def _dot_rows(b: ir.IRBuilder, count: int, length: ir.Value | int, width: int, x_at, w_at) -> list[ir.Value]:
    """sum_k w_at(r, k, lanes) * x_at(k, lanes) over k < length for r < count: vector accumulators, scalar tail."""
    zero = zeros(vec(width))
    vectors = [alloca(b, vec(width)) for _ in range(count)]
    tails = [alloca(b, F32) for _ in range(count)]
    for v, t in zip(vectors, tails):
        b.store(zero, v)
        b.store(ir.Constant(F32, 0.0), t)

    def body(k: ir.Value, lanes: int) -> None:
        xv = x_at(k, lanes)
        for r in range(count):
            slot = vectors[r] if lanes > 1 else tails[r]
            product = b.fmul(w_at(r, k, lanes), xv, flags=CONTRACT)
            b.store(b.fadd(b.load(slot, typ=product.type), product, flags=CONTRACT), slot)
    vector_loop(b, 0, length, width, body, name="k")
    return [b.fadd(_hsum(b, b.load(v, typ=vec(width))), b.load(t, typ=F32)) for v, t in zip(vectors, tails)]


def _streams(p: PackedWeight, m: int) -> bool:
    """Whether m rows of x stream W's rows through registers (the GEMV form) rather than a tiled product: one row,
    or up to STREAMED_ROWS rows or rows of STREAMED_DEPTH elements and more, where W is int8 or its 4-bit blocks
    are whole vectors."""
    if m == 1:
        return True
    if p.four_bit and not p.block_per_vector:
        return False
    return m <= STREAMED_ROWS or p.k >= STREAMED_DEPTH


def _permuted(p: PackedWeight, m: int) -> bool:
    """Whether the rows of x are first permuted into the order of a plane decode (_permute_x): for one row of x
    wherever W decodes by planes, for several where the streamed spans do (_planes)."""
    return p.lane_planes or p.byte_planes if m == 1 else _planes(p) > 0


def _planes(p: PackedWeight) -> int:
    """Elements the blocked forms decode at a time as planes: 32 (AVX-512's even and odd planes), 64 (AVX2's byte
    planes, where the blocks are whole 64s, so a span has one scale), else 0 (a vector at a time)."""
    if p.lane_planes:
        return 32
    return 64 if p.byte_planes and p.block % 64 == 0 else 0


def _group(p: PackedWeight, m: int) -> int:
    """Rows of W a group of the streaming form decodes together, for m rows of x: as many as keep, per row of W, an
    accumulator per row of the tile of x and the span's decoded vectors in the registers FEW_REGISTERS leaves."""
    if m == 1:
        return ROWS
    budget = vector_registers(p.width) - (32 - FEW_REGISTERS)
    return max(1, budget // (min(m, X_TILE) + _span(p) // p.width))


def _direct(b, p: PackedWeight, x: ir.Value, c: ir.Value, n0: ir.Value, count: int) -> None:
    """C[0, n0 + r] for r < count: one row of x against `count` rows of W decoded in registers. Scales multiply
    sums where they can: a block's once per block, an int8 row's once per row."""
    def row(r: int) -> ir.Value:
        return b.add(n0, i64(r))

    def x_at(k: ir.Value, lanes: int) -> ir.Value:
        return load(b, x, k, float32, lanes)
    if p.byte_planes:
        sums = _plane_sums(b, p, x_at, row, count)
    elif p.four_bit and p.block_per_vector:
        sums = _blocked(b, p, lambda i, k, lanes, mask=None: x_at(k, lanes), row, count)
    else:
        sums = _dot_rows(b, count, p.k, p.width, x_at,
                         lambda r, k, lanes: decode(b, p, row(r), p.parity(r), k, lanes, scaled=p.four_bit))
        if not p.four_bit:
            sums = [b.fmul(total, row_scale(b, p, row(r))) for r, total in enumerate(sums)]
    for r, total in enumerate(sums):
        store(b, total, c, row(r), float32)


def _blocked(b, p: PackedWeight, x_at, row, count: int) -> list[ir.Value]:
    """The row sums block by block: levels times x summed over a block, then times the block's scale; a vector at a
    time, or 32 elements at a time as even and odd planes (decode_lane_planes, x_at reading x permuted by
    _permute_x). One row of x keeps this form (int8 rows _dot_rows') rather than _few_rows' (each decoded vector
    scaled): through _few_rows, NF4 and int8 4096 x 4096 at batch 1 ran 10-15% slower (0.68 / 0.74 ms against
    0.57-0.61 / 0.63-0.68 on one Xeon thread)."""
    zero = zeros(vec(p.width))
    totals = [alloca(b, vec(p.width)) for _ in range(count)]
    parts = [alloca(b, vec(p.width)) for _ in range(count)]
    for t in totals:
        b.store(zero, t)
    per_row = p.k // p.block
    with for_range(b, 0, per_row, name="block") as block:
        for part in parts:
            b.store(zero, part)
        start = b.mul(block, i64(p.block))
        with for_range(b, 0, p.block, _span(p), name="kb") as j:
            k = b.add(start, j)
            xs = _x_span(b, p, x_at, 0, k)
            for r in range(count):
                part = b.load(parts[r], typ=zero.type)
                for w, xv in zip(_w_span(b, p, row(r), k), xs):
                    part = b.fadd(part, b.fmul(w, xv, flags=CONTRACT), flags=CONTRACT)
                b.store(part, parts[r])
        for r in range(count):
            scale = load(b, p.scales, b.add(b.mul(row(r), i64(per_row)), block), float32)
            _accumulate(b, totals[r], b.load(parts[r], typ=zero.type), scale)
    return [_hsum(b, b.load(t, typ=zero.type)) for t in totals]


def _few_rows(b, p: PackedWeight, x_at, row, count: int, m: int, k0: ir.Value, k1: ir.Value) -> list[list[ir.Value]]:
    """The sums over k in [k0, k1) (whole blocks, or whole vectors for int8 up to the row's end) of `count` rows of W
    against each of the m rows of x (x_at(i, k, lanes, mask)), per row of W a list of m: each decoded vector of W
    times its scale (the dequantized weight: its block's, or its row's for int8, whose rows of any length end in a
    masked vector), multiplied into every row's sum."""
    zero = zeros(vec(p.width))
    sums = [[alloca(b, vec(p.width)) for _ in range(m)] for _ in range(count)]
    for slot in (s for row_sums in sums for s in row_sums):
        b.store(zero, slot)

    def span(k: ir.Value, scales: list[ir.Value], mask: ir.Value | None = None) -> None:
        ws = [[b.fmul(w, scale) for w in _w_span(b, p, row(r), k, mask)] for r, scale in enumerate(scales)]
        for i in range(m):
            xs = _x_span(b, p, x_at, i, k, mask)
            for r in range(count):
                total = b.load(sums[r][i], typ=zero.type)
                for w, xv in zip(ws[r], xs):
                    total = b.fadd(total, b.fmul(w, xv, flags=CONTRACT), flags=CONTRACT)
                b.store(total, sums[r][i])
    if p.four_bit:
        per_row = p.k // p.block
        first, last = (b.udiv(bound, i64(p.block)) for bound in (k0, k1))
        with for_range(b, first, last, name="block") as block:
            scales = [splat(b, load(b, p.scales, b.add(b.mul(row(r), i64(per_row)), block), float32), p.width)
                      for r in range(count)]
            start = b.mul(block, i64(p.block))
            with for_range(b, 0, p.block, _span(p), name="kb") as j:
                span(b.add(start, j), scales)
    else:
        scales = [splat(b, row_scale(b, p, row(r)), p.width) for r in range(count)]
        full = p.k // p.width * p.width
        with for_range(b, k0, minimum(b, k1, i64(full)), p.width, name="kv") as k:
            span(k, scales)
        if p.k % p.width:
            with b.if_then(b.icmp_signed("==", k1, i64(p.k))):
                span(i64(full), scales, lane_mask(p.width, p.k % p.width))
    return [[_hsum(b, b.load(s, typ=zero.type)) for s in row_sums] for row_sums in sums]


def _chunk(p: PackedWeight, rows: int) -> int:
    """Elements of k a streamed tile of `rows` rows of x takes at a time: all of a row where the tile's rows fit in
    STREAMED_X_BYTES (W's rows then stream whole, as for one row of x), else as many whole blocks (whole vectors for
    int8) as fit there, one block at least."""
    if 4 * rows * p.k <= STREAMED_X_BYTES:
        return max(p.k, 1)
    unit = lcm(p.block, _span(p)) if p.four_bit else p.width
    return max(unit, STREAMED_X_BYTES // (4 * rows) // unit * unit)


def _streamed_rows(b, p: PackedWeight, x: ir.Value, c: ir.Value, g0: ir.Value, g1: ir.Value, m: int) -> None:
    """C[:, the columns of groups g0..g1] for m rows of x: per tile of X_TILE rows of x and chunk of k (_chunk),
    every group's rows of W against the tile, the chunk's sums added into C (stored by the first chunk)."""
    n, rows = p.n, _group(p, m)
    groups, whole = -(-n // rows), n // rows

    def tile(i0: ir.Value, tile_rows: int) -> None:
        chunk = _chunk(p, tile_rows)

        def x_at(i: int, k: ir.Value, lanes: int, mask: ir.Value | None = None) -> ir.Value:
            return load(b, x, b.add(b.mul(b.add(i0, i64(i)), i64(p.k)), k), float32, lanes, mask)

        def group(n0: ir.Value, count: int, k0: ir.Value, k1: ir.Value, first: ir.Value) -> None:
            def row(r: int) -> ir.Value:
                return b.add(n0, i64(r))
            for r, row_sums in enumerate(_few_rows(b, p, x_at, row, count, tile_rows, k0, k1)):
                for i, value in enumerate(row_sums):
                    at = b.add(b.mul(b.add(i0, i64(i)), i64(n)), row(r))
                    old = load(b, c, at, float32)
                    store(b, b.select(first, value, b.fadd(old, value)), c, at, float32)
        # one chunk at least, so that K = 0 stores zeros
        with for_range(b, 0, max(p.k, 1), chunk, name="kc") as k0:
            k1 = minimum(b, b.add(k0, i64(chunk)), i64(p.k))
            first = b.icmp_signed("==", k0, i64(0))
            with for_range(b, g0, minimum(b, g1, i64(whole)), name="group") as g:
                group(b.mul(g, i64(rows)), rows, k0, k1, first)
            if n % rows:
                with b.if_then(b.icmp_signed("==", g1, i64(groups))):
                    group(i64(whole * rows), n % rows, k0, k1, first)
    tiles = m // X_TILE
    with for_range(b, 0, tiles, name="xt") as t:
        tile(b.mul(t, i64(X_TILE)), X_TILE)
    if m % X_TILE:
        tile(i64(tiles * X_TILE), m % X_TILE)


def _span(p: PackedWeight) -> int:
    """Elements of a row of W decoded at a time by the blocked forms: as planes (_planes), else a vector."""
    return _planes(p) or p.width


def _x_span(b, p: PackedWeight, x_at, i: int, k: ir.Value, mask: ir.Value | None = None) -> list[ir.Value]:
    """Row i of x over the span at k (a masked vector: its lanes only), as the vectors _w_span's match lane for
    lane."""
    return [x_at(i, b.add(k, i64(at)), p.width, mask) for at in range(0, _span(p), p.width)]


def _w_span(b, p: PackedWeight, row: ir.Value, k: ir.Value, mask: ir.Value | None = None) -> list[ir.Value]:
    """The levels (int8: the codes) of W[row] over the span at k, before their scale: planes (_planes), or one
    vector (int8 masked by `mask`, its other lanes 0; 4-bit spans start at even elements of whole vectors)."""
    if p.lane_planes:
        return decode_lane_planes(b, p, row, k)
    if _planes(p):
        return decode_planes(b, p, row, k, 64)
    if not p.four_bit:
        codes = load(b, p.codes, b.add(b.mul(row, i64(p.k)), k), int8, p.width, mask)
        return [b.sitofp(codes, vec(p.width))]
    return [decode(b, p, row, 0, k, p.width, scaled=False)]


def _accumulate(b, total: ir.Value, part: ir.Value, scale: ir.Value) -> None:
    """total += part * scale (a vector slot, a vector, a scalar or a vector of per-lane scales)."""
    if not isinstance(scale.type, ir.VectorType):
        scale = splat(b, scale, part.type.count)
    b.store(b.fadd(b.load(total, typ=part.type), b.fmul(part, scale, flags=CONTRACT), flags=CONTRACT), total)


def _plane_sums(b, p: PackedWeight, x_at, row, count: int) -> list[ir.Value]:
    """The row sums 64 elements at a time (a last 32 where the row length is an odd multiple of 32; decode_planes,
    x_at reading x permuted by _permute_x), each span's sum times its scales. One row after the other: x is read
    again for each (from L1), since the decode of several rows at once left too few registers for them."""
    full = p.k // 64 * 64
    sums = []
    for r in range(count):
        total = alloca(b, vec(8))
        b.store(zeros(vec(8)), total)
        with for_range(b, 0, full, 64, name="k") as k:
            _plane_span(b, p, x_at, row(r), k, 64, total)
        if p.k % 64:
            _plane_span(b, p, x_at, row(r), i64(full), 32, total)
        sums.append(_hsum(b, b.load(total, typ=vec(8))))
    return sums


def _plane_span(b, p: PackedWeight, x_at, row: ir.Value, k: ir.Value, span: int, total: ir.Value) -> None:
    """total += the decoded W[row, k:k+span] times x there, in two chains of multiply-adds, then times the scale
    of each 32 elements (one block's, or two where a 64 may cross a block's end: blocks of an odd multiple of 32,
    or rows of an odd multiple of 32, which start blocks mid-row; lanes 0-3 of every vector hold the first 32
    elements of a 64, lanes 4-7 the second)."""
    w = decode_planes(b, p, row, k, span)
    chains = [b.fmul(w[q], x_at(b.add(k, i64(8 * q)), 8), flags=CONTRACT) for q in range(2)]
    for q in range(2, len(w)):
        product = b.fmul(w[q], x_at(b.add(k, i64(8 * q)), 8), flags=CONTRACT)
        chains[q % 2] = b.fadd(chains[q % 2], product, flags=CONTRACT)
    element = b.add(b.mul(row, i64(p.k)), k)
    scale = load(b, p.scales, b.udiv(element, i64(p.block)), float32)
    if span == 64 and (p.block % 64 or p.k % 64):
        second = load(b, p.scales, b.udiv(b.add(element, i64(32)), i64(p.block)), float32)
        order = vector_const(ir.VectorType(I32, 8), [0] * 4 + [8] * 4)
        scale = b.shuffle_vector(splat(b, scale, 8), splat(b, second, 8), order)
    _accumulate(b, total, b.fadd(chains[0], chains[1], flags=CONTRACT), scale)


def _permute_x(b, p: PackedWeight, x: ir.Value, out: ir.Value) -> None:
    """out = x with each span of the planes in plane_order, once per call: on AVX2 64 elements at a time and a last
    32 where the row length is an odd multiple of 32, on AVX-512 32 at a time."""
    step = 32 if p.lane_planes else 64
    full = p.k // step * step
    with for_range(b, 0, full, step, name="xp") as k:
        _permute_span(b, x, out, k, step, p.width)
    if p.k % step:
        _permute_span(b, x, out, i64(full), 32, p.width)


def _permute_span(b, x: ir.Value, out: ir.Value, k: ir.Value, span: int, width: int) -> None:
    """out[k + i] = x[k + plane_order(span, width)[i]]: each vector of out is one shuffle of (at most) two of x."""
    order = plane_order(span, width)
    for j in range(span // width):
        lanes = order[width * j:width * (j + 1)]
        first, second = min(lanes) // width, max(lanes) // width
        sources = [load(b, x, b.add(k, i64(width * v)), float32, width) for v in (first, second)]
        mask = [e - width * first if e // width == first else width + e - width * second for e in lanes]
        shuffled = b.shuffle_vector(sources[0], sources[1], vector_const(ir.VectorType(I32, width), mask))
        store(b, shuffled, out, b.add(k, i64(width * j)), float32)


def _mapper(out_shape: tuple[int, ...]):
    """The epilogue's operand offsets: row (of x, leading axes flattened) and column strides of a broadcast shape."""
    def mapper(shape: tuple[int, ...]):
        strides = broadcast_strides(shape, out_shape)
        dims, walks, _ = coalesce(out_shape[:-1], [strides[:-1]])
        if len(dims) > 1:
            raise Unfusable(f"an epilogue operand of shape {shape} is not linear in the row of x")
        rows, cols = (walks[0][0] if dims else 0), strides[-1]

        def offset(b: ir.IRBuilder, pos: TilePos) -> ir.Value:
            return b.add(b.mul(pos.row, i64(rows)), b.mul(pos.col, i64(cols)))
        return offset, cols
    return mapper


def _run_epilogue(b, epilogue, c: ir.Value, m: int, n: int, width: int, first: ir.Value, last: ir.Value,
                  extras: tuple[ir.Value, ...]) -> None:
    """C[i, first:last] = epilogue(C[i, first:last]) for every row i, on masked vectors of `width` columns."""
    with for_range(b, 0, m, name="em") as i, for_range(b, first, last, width, name="ec") as col:
        at = b.add(b.mul(i, i64(n)), col)
        mask = b.icmp_signed("<", b.add(splat(b, col, width), iota(I64, width)), splat(b, last, width))
        acc = load(b, c, at, float32, width, mask)
        store(b, epilogue(b, acc, TilePos(i64(0), i, col, mask, extras)), c, at, float32, mask)


@dataclass(frozen=True)
class PackedProduct:
    """How a packed product fills C (m rows of `cols` columns): the scratch it needs before a scratch-held C, and
    `emit(b, kernel, weight, m, x, c, finish)`, which computes the columns of C this thread takes and calls
    finish(first, last) on each range [first, last) of them it has completed (the epilogue runs there)."""

    scratch: Callable[[PackedWeight, int], int]
    emit: Callable[..., None]


def lower_packed_region(node: Node, ctx: KernelContext, body: Graph, product: PackedProduct) -> KernelSpec:
    """The kernel of a gemm region anchored by a packed product (or of the op alone): the product into C, then
    the region's epilogue over the columns each thread computed."""
    anchor = anchor_of(body)
    index = {v.name: i for i, v in enumerate(body.inputs)}
    if any(v.name not in index for v in anchor.inputs):
        raise Unfusable(f"the {anchor.op}'s operands are not region operands")
    m, cols = prod(anchor.out.shape[:-1]), anchor.out.shape[-1]
    slots, c_name = plan_region(body, anchor)
    epilogue = epilogue_of(body, anchor, _mapper(anchor.out.shape), slots, c_name, None)
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    x, codes, scales = (k.ins[index[v.name]] for v in anchor.inputs)
    p = packed_weight(ctx, anchor.attr, codes, scales)
    panel_bytes = product.scratch(p, m)
    where = {v.name: k.ins[i] for i, v in enumerate(body.inputs)} | \
            {v.name: k.outs[i] for i, v in enumerate(body.outputs)}
    c = where[c_name] if c_name is not None else b.gep(k.scratch, [i64(panel_bytes)], source_etype=ir.IntType(8))
    scratch = panel_bytes + (anchor.out.type.nbytes if c_name is None else 0)
    if m * cols == 0:
        return k.finish(node.op, scratch)
    extras = tuple(where[name] for name, _ in sorted(slots.items(), key=lambda item: item[1]))

    def finish(first: ir.Value, last: ir.Value) -> None:
        if epilogue is not None:
            _run_epilogue(b, epilogue, c, m, cols, p.width, first, last, extras)
    product.emit(b, k, p, m, x, c, finish)
    return k.finish(node.op, scratch)


def _for_rows(p: PackedWeight, m: int) -> PackedWeight:
    """p as m rows of x read it: without plane decodes where x permuted to match would pass PERMUTED_BYTES."""
    return replace(p, planes=False) if 4 * m * p.k > PERMUTED_BYTES else p


def _linear_scratch(p: PackedWeight, m: int) -> int:
    """The rows of x permuted for a plane decode, nothing for another streaming form, else the decoded panel."""
    p = _for_rows(p, m)
    if _streams(p, m):
        return round_up(4 * p.k * m) if _permuted(p, m) else 0
    return panel_bytes(p.width)


def _transposed_rows(p: PackedWeight):
    """The unpack of W^T: panel[i, j] = W[j0 + j, i0 + i], each row of W decoded a vector at a time and its lanes
    stored down the panel's column j (j0 even, so row j's nibble parity is static)."""
    def unpack(b: ir.IRBuilder, panel: ir.Value, i0: ir.Value, depth: ir.Value, j0: ir.Value, cols: int,
               tile: int) -> None:
        for j in range(cols):
            def one(i: ir.Value, lanes: int, j: int = j) -> None:
                w = decode(b, p, b.add(j0, i64(j)), p.parity(j), b.add(i0, i), lanes)
                for lane in range(lanes):
                    value = w if lanes == 1 else b.extract_element(w, ir.Constant(I32, lane))
                    store(b, value, panel, b.add(b.mul(b.add(i, i64(lane)), i64(tile)), i64(j)), float32)
            vector_loop(b, 0, depth, p.width, one, name="unpack")
    return unpack


def _emit_linear(b: ir.IRBuilder, k: Kernel, p: PackedWeight, m: int, x: ir.Value, c: ir.Value, finish) -> None:
    """C = x @ W^T: a row of x, or a few (_streams), stream W's rows through registers, threads claiming them in
    chunks of groups (codegen/claims.py: a thread that lost its core takes fewer); more rows make a tiled product
    with panels of W^T (quant_tiles.py)."""
    if not _streams(p, m):
        finish(*tiled_product(b, k, Tiled(x, c, m, p.k, p.n, p.width, _transposed_rows(p))))
        return
    p = _for_rows(p, m)
    if _permuted(p, m):
        with for_range(b, 0, m, name="xrow") as i:
            at = b.mul(i, i64(p.k))
            _permute_x(b, p, b.gep(x, [at], source_etype=F32), b.gep(k.scratch, [at], source_etype=F32))
        x = k.scratch
    n, rows = p.n, _group(p, m)
    groups = -(-n // rows)
    full = n // rows
    with claimed_chunks(b, claim_words(k), k.tid, k.nthreads, groups, name="groups") as (g0, g1):
        if m > 1:
            _streamed_rows(b, p, x, c, g0, g1, m)
        else:
            with for_range(b, g0, minimum(b, g1, i64(full)), name="group") as g:
                _direct(b, p, x, c, b.mul(g, i64(rows)), rows)
            if n % rows:
                with b.if_then(b.icmp_signed("==", g1, i64(groups))):
                    _direct(b, p, x, c, i64(full * rows), n % rows)
        finish(b.mul(g0, i64(rows)), minimum(b, b.mul(g1, i64(rows)), i64(n)))


def register_packed(op: str, product: PackedProduct) -> None:
    """Register the lowerings of a packed product op: as the anchor of a gemm region, and alone (a region of one
    node without epilogue)."""
    def region(node: Node, ctx: KernelContext, body: Graph) -> KernelSpec:
        return lower_packed_region(node, ctx, body, product)

    def alone(node: Node, ctx: KernelContext) -> KernelSpec:
        return region(node, ctx, single_body(node))
    region.__name__, alone.__name__ = f"lower_{op}_region", f"lower_{op}"
    ANCHORED[op] = region
    register(op)(alone)


register_packed("quantized_linear", PackedProduct(_linear_scratch, _emit_linear))


__all__ = ["PackedProduct", "lower_packed_region", "register_packed"]
