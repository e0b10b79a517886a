"""Register-tiled products with a packed weight decoded a panel at a time: C (m, cols) = A (m, depth) @ B with B
(depth, cols) the packed weight W (quantized_matmul) or its transpose (quantized_linear with several rows of x).

Threads split C's columns in tiles of TILE_VECTORS vectors. For each tile, DEPTH rows of B at a time are decoded
into a panel in this thread's scratch (DEPTH x tile floats, L1-sized) by the op's `unpack`, and every row of A then
reads it: a micro-tile of TILE_ROWS rows of A by the tile's vectors accumulates in registers over the panel's rows,
one broadcast of A and one panel vector per multiply-add, and is added into C after each panel (C starts at zero;
with depth 0, C is zeros). A last tile narrower than a whole one is stored through constant masks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

from braze.ir.types import float32

from ..loops import CONTRACT, I1, alloca, for_range, i64, splat, vec, vector_const, zeros
from .base import Kernel, load, round_up, store, thread_share

TILE_VECTORS = 2
TILE_ROWS = 4
DEPTH = 256

# unpack(b, panel, i0, depth, j0, cols, tile): panel[i, :cols] = B[i0 + i, j0:j0 + cols] for i < depth, rows of
# `tile` floats (i0 a multiple of DEPTH, j0 of tile; depth dynamic, cols and tile static).
Unpack = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value, ir.Value, int, int], None]


@dataclass(frozen=True)
class Tiled:
    """One tiled product: A's and C's buffers, the sizes, the vector width and how the op decodes B."""

    a: ir.Value
    c: ir.Value
    m: int
    depth: int
    cols: int
    width: int
    unpack: Unpack

    @property
    def tile(self) -> int:
        return TILE_VECTORS * self.width


def panel_bytes(width: int) -> int:
    """The scratch a panel takes: DEPTH rows of one tile."""
    return round_up(4 * DEPTH * TILE_VECTORS * width)


def minimum(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def _masks(width: int, cols: int) -> list[ir.Constant | None]:
    """Per vector of a tile of `cols` columns: None when whole, else the constant mask of its columns."""
    masks: list[ir.Constant | None] = []
    for v in range(-(-cols // width)):
        lanes = min(width, cols - v * width)
        masks.append(None if lanes == width else
                     vector_const(ir.VectorType(I1, width), [ir.Constant(I1, int(i < lanes)) for i in range(width)]))
    return masks


def _micro(b: ir.IRBuilder, t: Tiled, panel: ir.Value, r0: ir.Value, count: int, i0: ir.Value, depth: ir.Value,
           j0: ir.Value, cols: int, first: ir.Value) -> None:
    """C[r0 + r, j0:j0 + cols] (r < count) = (C or, on the first panel, 0) + A[r0 + r, i0:i0 + depth] @ panel."""
    width, masks = t.width, _masks(t.width, cols)
    zero = zeros(vec(width))
    accumulators = [[alloca(b, vec(width)) for _ in masks] for _ in range(count)]

    def at(r: int, v: int) -> ir.Value:
        return b.add(b.add(b.mul(b.add(r0, i64(r)), i64(t.cols)), j0), i64(v * width))
    for r, row in enumerate(accumulators):
        for v, (slot, mask) in enumerate(zip(row, masks)):
            b.store(b.select(first, zero, load(b, t.c, at(r, v), float32, width, mask)), slot)
    with for_range(b, 0, depth, name="kk") as i:
        panel_row = [load(b, panel, b.add(b.mul(i, i64(t.tile)), i64(v * width)), float32, width)
                     for v in range(len(masks))]
        for r, row in enumerate(accumulators):
            broadcast = splat(b, load(b, t.a, b.add(b.mul(b.add(r0, i64(r)), i64(t.depth)), b.add(i0, i)), float32),
                              width)
            for slot, w in zip(row, panel_row):
                total = b.fadd(b.load(slot, typ=zero.type), b.fmul(broadcast, w, flags=CONTRACT), flags=CONTRACT)
                b.store(total, slot)
    for r, row in enumerate(accumulators):
        for v, (slot, mask) in enumerate(zip(row, masks)):
            store(b, b.load(slot, typ=zero.type), t.c, at(r, v), float32, mask)


def _row_tiles(b: ir.IRBuilder, m: int, micro: Callable[[ir.Value, int], None]) -> None:
    """micro(r0, count) over the rows of A: TILE_ROWS at a time, then the remainder."""
    full = m // TILE_ROWS
    with for_range(b, 0, full, name="mt") as r:
        micro(b.mul(r, i64(TILE_ROWS)), TILE_ROWS)
    if m % TILE_ROWS:
        micro(i64(full * TILE_ROWS), m % TILE_ROWS)


def _tile(b: ir.IRBuilder, t: Tiled, panel: ir.Value, j0: ir.Value, cols: int) -> None:
    """C[:, j0:j0 + cols] = A @ B[:, j0:j0 + cols], DEPTH rows of B per panel."""
    if t.depth == 0:
        yes = ir.Constant(I1, 1)
        _row_tiles(b, t.m, lambda r0, count: _micro(b, t, panel, r0, count, i64(0), i64(0), j0, cols, yes))
        return
    with for_range(b, 0, t.depth, DEPTH, name="depth") as i0:
        depth = minimum(b, b.sub(i64(t.depth), i0), i64(DEPTH))
        t.unpack(b, panel, i0, depth, j0, cols, t.tile)
        first = b.icmp_signed("==", i0, i64(0))
        _row_tiles(b, t.m, lambda r0, count: _micro(b, t, panel, r0, count, i0, depth, j0, cols, first))


def tiled_product(b: ir.IRBuilder, k: Kernel, t: Tiled) -> tuple[ir.Value, ir.Value]:
    """C = A @ B, this thread's tiles of C's columns (the panel at the start of its scratch); returns the columns
    [first, last) it computed."""
    tiles, full = -(-t.cols // t.tile), t.cols // t.tile
    t0, t1 = thread_share(b, k.tid, k.nthreads, tiles)
    with for_range(b, t0, minimum(b, t1, i64(full)), name="tile") as j:
        _tile(b, t, k.scratch, b.mul(j, i64(t.tile)), t.tile)
    if t.cols % t.tile:
        with b.if_then(b.icmp_signed("==", t1, i64(tiles))):
            _tile(b, t, k.scratch, i64(full * t.tile), t.cols % t.tile)
    return b.mul(t0, i64(t.tile)), minimum(b, b.mul(t1, i64(t.tile)), i64(t.cols))


__all__ = ["DEPTH", "Tiled", "minimum", "panel_bytes", "tiled_product"]
