"""quantized_matmul, alone or as the anchor of a gemm region: y = g @ W with W (n, k) read packed (quant_decode.py)
and dequantized inside the loop, never as a dense matrix: the input gradient of a packed linear layer.

W's rows are the reduction axis and its columns y's columns, so the kernel walks W as a GEMM walks a row-major B.
Threads split y's columns in tiles of TILE_VECTORS vectors; for each tile, DEPTH rows of W at a time are decoded
into a panel in this thread's scratch (DEPTH x tile floats, L1-sized) that every row of g then reads: a micro-tile
of TILE_ROWS rows of g by the tile's vectors accumulates in registers over the panel's rows, one broadcast of g
and one panel vector per multiply-add, and is added into C after each panel (C starts at zero). Rows of W are
decoded two at a time, so each one's nibble parity is static (an odd row of an odd row length starts at a high
nibble). The region's elementwise epilogue then runs over this thread's columns of C (quant_gemm.py).
"""
from __future__ import annotations

import llvmlite.ir as ir

from braze.ir.graph import Graph, Node
from braze.ir.types import float32

from ..loops import CONTRACT, I1, alloca, for_range, i64, splat, vec, vector_loop
from .base import Kernel, KernelContext, KernelSpec, load, register, round_up, store, thread_share
from .linalg import ANCHORED
from .quant_decode import PackedWeight, decode
from .quant_gemm import PackedProduct, lower_packed_region
from .reduction import single_body

TILE_VECTORS = 2
TILE_ROWS = 4
DEPTH = 256


def _minimum(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def _unpack_rows(b: ir.IRBuilder, p: PackedWeight, panel: ir.Value, i0: ir.Value, depth: ir.Value, j0: ir.Value,
                 cols: int, tile: int) -> None:
    """panel[i, :cols] = W[i0 + i, j0:j0 + cols] for i < depth (i0 even), decoded two rows at a time."""
    def row(i: ir.Value, parity: int) -> None:
        def unpack(j: ir.Value, lanes: int) -> None:
            w = decode(b, p, b.add(i0, i), parity, b.add(j0, j), lanes)
            store(b, w, panel, b.add(b.mul(i, i64(tile)), j), float32)
        vector_loop(b, 0, cols, p.width, unpack, name="unpack")
    with for_range(b, 0, b.lshr(depth, i64(1)), name="pair") as q:
        even = b.shl(q, i64(1))
        row(even, p.parity(0))
        row(b.add(even, i64(1)), p.parity(1))
    with b.if_then(b.trunc(depth, I1)):
        row(b.sub(depth, i64(1)), p.parity(0))


def _masks(width: int, cols: int) -> list[ir.Constant | None]:
    """Per vector of a tile of `cols` columns: None when whole, else the constant mask of its columns."""
    masks: list[ir.Constant | None] = []
    for v in range(-(-cols // width)):
        lanes = min(width, cols - v * width)
        masks.append(None if lanes == width else
                     ir.Constant(ir.VectorType(I1, width), [ir.Constant(I1, int(i < lanes)) for i in range(width)]))
    return masks


def _micro(b: ir.IRBuilder, p: PackedWeight, g: ir.Value, c: ir.Value, panel: ir.Value, r0: ir.Value, count: int,
           i0: ir.Value, depth: ir.Value, j0: ir.Value, cols: int, tile: int, first: ir.Value) -> None:
    """C[r0 + r, j0:j0 + cols] (r < count) = (C or, on the first panel, 0) + g[r0 + r, i0:i0 + depth] @ panel."""
    width, masks = p.width, _masks(p.width, cols)
    zero = ir.Constant(vec(width), None)
    accumulators = [[alloca(b, vec(width)) for _ in masks] for _ in range(count)]
    for r, row in enumerate(accumulators):
        for v, (slot, mask) in enumerate(zip(row, masks)):
            at = b.add(b.add(b.mul(b.add(r0, i64(r)), i64(p.k)), j0), i64(v * width))
            b.store(b.select(first, zero, load(b, c, at, float32, width, mask)), slot)
    with for_range(b, 0, depth, name="kk") as i:
        panel_row = [load(b, panel, b.add(b.mul(i, i64(tile)), i64(v * width)), float32, width)
                     for v in range(len(masks))]
        for r, row in enumerate(accumulators):
            scalar = load(b, g, b.add(b.mul(b.add(r0, i64(r)), i64(p.n)), b.add(i0, i)), float32)
            broadcast = splat(b, scalar, width)
            for slot, w in zip(row, panel_row):
                total = b.fadd(b.load(slot, typ=zero.type), b.fmul(broadcast, w, flags=CONTRACT), flags=CONTRACT)
                b.store(total, slot)
    for r, row in enumerate(accumulators):
        for v, (slot, mask) in enumerate(zip(row, masks)):
            at = b.add(b.add(b.mul(b.add(r0, i64(r)), i64(p.k)), j0), i64(v * width))
            store(b, b.load(slot, typ=zero.type), c, at, float32, mask)


def _row_tiles(b: ir.IRBuilder, m: int, micro) -> None:
    """micro(r0, count) over the rows of g: TILE_ROWS at a time, then the remainder."""
    full = m // TILE_ROWS
    with for_range(b, 0, full, name="mt") as t:
        micro(b.mul(t, i64(TILE_ROWS)), TILE_ROWS)
    if m % TILE_ROWS:
        micro(i64(full * TILE_ROWS), m % TILE_ROWS)


def _tile(b: ir.IRBuilder, p: PackedWeight, m: int, g: ir.Value, c: ir.Value, panel: ir.Value, j0: ir.Value,
          cols: int) -> None:
    """C[:, j0:j0 + cols] = g @ W[:, j0:j0 + cols], DEPTH rows of W per panel (zeros when W has no rows)."""
    tile = TILE_VECTORS * p.width
    if p.n == 0:
        yes = ir.Constant(I1, 1)
        _row_tiles(b, m, lambda r0, count: _micro(b, p, g, c, panel, r0, count, i64(0), i64(0), j0, cols, tile, yes))
        return
    with for_range(b, 0, p.n, DEPTH, name="depth") as i0:
        depth = _minimum(b, b.sub(i64(p.n), i0), i64(DEPTH))
        _unpack_rows(b, p, panel, i0, depth, j0, cols, tile)
        first = b.icmp_signed("==", i0, i64(0))
        _row_tiles(b, m, lambda r0, count: _micro(b, p, g, c, panel, r0, count, i0, depth, j0, cols, tile, first))


def _scratch(p: PackedWeight, m: int) -> int:
    """The decoded panel: DEPTH rows of one tile."""
    return round_up(4 * DEPTH * TILE_VECTORS * p.width)


def _emit(b: ir.IRBuilder, k: Kernel, p: PackedWeight, m: int, g: ir.Value,
          c: ir.Value) -> tuple[ir.Value, ir.Value]:
    """C = g @ W: threads take C's columns in tiles; the last tile may be narrower."""
    tile = TILE_VECTORS * p.width
    tiles, full = -(-p.k // tile), p.k // tile
    t0, t1 = thread_share(b, k.tid, k.nthreads, tiles)
    with for_range(b, t0, _minimum(b, t1, i64(full)), name="tile") as t:
        _tile(b, p, m, g, c, k.scratch, b.mul(t, i64(tile)), tile)
    if p.k % tile:
        with b.if_then(b.icmp_signed("==", t1, i64(tiles))):
            _tile(b, p, m, g, c, k.scratch, i64(full * tile), p.k % tile)
    return b.mul(t0, i64(tile)), _minimum(b, b.mul(t1, i64(tile)), i64(p.k))


TRANSPOSED = PackedProduct(_scratch, _emit)


def lower_quantized_matmul_region(node: Node, ctx: KernelContext, body: Graph) -> KernelSpec:
    """The kernel of a gemm region anchored by quantized_matmul (or of the op alone)."""
    return lower_packed_region(node, ctx, body, TRANSPOSED)


@register("quantized_matmul")
def lower_quantized_matmul(node: Node, ctx: KernelContext) -> KernelSpec:
    """quantized_matmul alone: a region of one node without epilogue."""
    return lower_quantized_matmul_region(node, ctx, single_body(node))


ANCHORED["quantized_matmul"] = lower_quantized_matmul_region


__all__ = ["lower_quantized_matmul", "lower_quantized_matmul_region"]
