"""matmul and linear in float64: packed blocks and a register tile, or dot products for a few rows or columns.

float32 has the GEMM of codegen/gemm.py; float64 had a row kernel with one accumulator vector per step of K (a load,
a multiply, an add and a store through memory for each), 5-20x torch's time. Two forms here (tiled_form):
- packed: the BLIS loops in small. C splits into units of (batch, column block, run of row blocks); for each K block
  of _KC a unit packs its columns of B into panels (of the register tile's width, zeros past N: vector loads where
  B's rows are contiguous, squares of lanes x lanes transposed in registers where its columns are, as a linear's
  weight, else element by element), then for each row block packs A's micro-panel (the block's rows side by side
  at each k) and runs the register tile over every panel: 12 rows x 2 vectors of 8 lanes on AVX-512, 6 x 2 of 4 on
  AVX2 (the float32 GEMM's shapes and its unrolled k loop), B's panel hinted into L1 ahead. B's block takes half of
  L2 and at most half of C's columns, and C's rows split in at most _RUNS runs, so two threads share the work.
- dot: where C has at most _DOT_MOST rows or columns and A's rows and B's columns are contiguous (x @ W^T at batch
  1, a matrix times a vector), nothing is worth packing: R x J dot products, each a vector of partial sums along K
  (4 x 4 on AVX-512, 3 x 3 below), the last partial vector masked, summed by a halving tree at the end.
Every element of C is the same sequence of operations whatever the unit split (one chain of multiply-adds in K's
order, the tile resuming from C after the first K block; or the lanes and the same tree), so results are bitwise
equal on any number of threads. FMA where the target has it (llvm.fma), else a multiply and an add.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from typing import Callable

import llvmlite.ir as ir

from braze.ir.types import DType

from ..cache_sizes import host_cache_sizes
from ..gemm import GemmSpec
from ..gemm_kernel import CACHE_LINE, K_UNROLL, L1, Epilogue, TilePos, carried_loop, mul_add, prefetch
from ..loops import I32, alloca, for_range, i64, lane_mask, splat, vector_const, vector_registers
from .base import (Kernel, KernelSpec, by_size, claimed_unit_loop, constant, contiguous_strides, load, offset_of,
                   pointer, store)

# (rows, vectors) of the register tile of packed blocks and (rows, columns) of the dot tile, by vector registers
_PACKED_TILE = {32: (12, 2), 16: (6, 2)}
_DOT_TILE = {32: (4, 4), 16: (3, 3)}
_DOT_ROW = 4         # lanes of the vector a row of the dot tile goes through an epilogue in (its columns at most)
_DOT_MOST = 4        # the dot tile where C has at most this many rows or columns: nothing to gain from packing
_KC = 256            # K block: a packed micro-panel of A (12 rows) takes 24 KB, B's (16 columns) 32 KB
# A unit takes at least _ROW_BLOCKS row blocks (B's block is packed once per unit: 1-2% of its time at 8 when B's rows
# are contiguous), and C's rows split into at most _RUNS runs of them (a transposing pack costs more)
_ROW_BLOCKS = 8
_RUNS = 2
_PREFETCH_STEPS = 16


def tiled_form(spec: GemmSpec) -> str:
    """"dot" for a few rows or columns of C whose A rows and B columns are contiguous (x @ W^T at batch 1, a
    matrix times a vector) and for an empty K (C is zeros), else "packed" (see the module docstring)."""
    few = spec.m <= _DOT_MOST or spec.n <= _DOT_MOST
    return "dot" if few and spec.b.rs == 1 and spec.a.cs == 1 or spec.k == 0 else "packed"


@dataclass(frozen=True)
class Operands:
    """Where a tiled kernel reads its operands (A and B; a conv's x and w) and writes C, and a fused region's
    epilogue: applied to each vector of C's final values (at its TilePos, whose args are `extras`) before the
    store."""

    a: ir.Value
    b: ir.Value
    c: ir.Value
    epilogue: Epilogue | None = None
    extras: tuple[ir.Value, ...] = ()
    bias: ir.Value | None = None   # a conv2d's, added first (conv_tiled)


def tiled_matmul(op: str, k: Kernel, spec: GemmSpec, dtype: DType, operands: Operands | None = None) -> KernelSpec:
    """The kernel (of a matmul or linear node, or a gemm region, float64) computing `spec` with the tile of
    tiled_form(spec); A, B and C the node's operands and result unless `operands` say otherwise."""
    operands = operands or Operands(k.ins[0], k.ins[1], k.outs[0])
    lanes = max(k.width // 2, 1)   # float64 lanes in one vector register
    registers = vector_registers(k.width)
    fused = k.target.fma
    if tiled_form(spec) == "packed":
        rows, vectors = _PACKED_TILE[registers]
        packed = _Packed(k, spec, dtype, lanes, fused, operands, min(rows, spec.m), vectors * lanes)
        return packed.emit(op)
    rows, cols = _DOT_TILE[registers]
    tile = _Dot(k, spec, dtype, lanes, fused, operands)
    block_rows, block_cols = min(rows, spec.m), min(cols, spec.n)
    row_blocks, col_blocks = ceil(spec.m / block_rows), ceil(spec.n / block_cols)
    b = k.builder
    with claimed_unit_loop(k, list(spec.batch) + [col_blocks, row_blocks], name="tile") as index:
        batch, col_block, row_block = index[:-2], index[-2], index[-1]
        i0, j0 = b.mul(row_block, i64(block_rows)), b.mul(col_block, i64(block_cols))
        tile.at_batch(batch)
        last_rows, last_cols = spec.m - (row_blocks - 1) * block_rows, spec.n - (col_blocks - 1) * block_cols
        by_size(b, row_block, row_blocks, block_rows, last_rows, lambda rows_here: by_size(
            b, col_block, col_blocks, block_cols, last_cols, lambda cols_here: tile.emit(i0, j0, rows_here,
                                                                                          cols_here)))
    return k.finish(op)


class _Tile:
    """What both tiles share: the kernel, the problem, the lanes and the multiply-add."""

    def __init__(self, k: Kernel, spec: GemmSpec, dtype: DType, lanes: int, fused: bool, operands: Operands) -> None:
        self.k, self.b, self.spec, self.dtype, self.lanes, self.fused = k, k.builder, spec, dtype, lanes, fused
        self.ops = operands
        self.vector = constant(dtype, 0, lanes).type

    def at_batch(self, batch: tuple[ir.Value, ...]) -> None:
        """Set the unit's batch index: the operands' offsets for it and its flat index (TilePos.batch)."""
        b = self.b
        self.bases = tuple(offset_of(b, batch, s.batch_strides) for s in (self.spec.a, self.spec.b, self.spec.c))
        self.flat_batch = offset_of(b, batch, contiguous_strides(self.spec.batch))

    def final(self, value: ir.Value, row: ir.Value, col: ir.Value, mask: ir.Value | None) -> ir.Value:
        """A vector of C's final values at (row, col), through the epilogue if there is one."""
        if self.ops.epilogue is None:
            return value
        return self.ops.epilogue(self.b, value, TilePos(self.flat_batch, row, col, mask, self.ops.extras))

    def madd(self, x: ir.Value, y: ir.Value, acc: ir.Value) -> ir.Value:
        """x y + acc: one rounding with FMA, else two (the target has no FMA to contract them into)."""
        return mul_add(self.b, x, y, acc, self.fused)

    def masks(self, cols: int) -> list[ir.Value | None]:
        """The lane masks of the vectors of a row of `cols` columns (None for a full vector)."""
        lanes = self.lanes
        return [lane_mask(lanes, cols - v * lanes) if (v + 1) * lanes > cols else None
                for v in range(ceil(cols / lanes))]


class _Packed(_Tile):
    """The packed form (see the module docstring): C in units of (batch, column block, run of row blocks), K in
    blocks of _KC. Each K block packs the unit's columns of B (panels of panel_cols, zeros past N), then row block by
    row block a micro-panel of A (its rows side by side at each k), and runs the register tile over every panel. The
    tile starts from C after the first K block, so every element of C is one chain of multiply-adds in K's order,
    as unblocked; the epilogue runs on the last K block."""

    def __init__(self, k: Kernel, spec: GemmSpec, dtype: DType, lanes: int, fused: bool, operands: Operands,
                 block_rows: int, panel_cols: int) -> None:
        super().__init__(k, spec, dtype, lanes, fused, operands)
        self.block_rows, self.panel_cols = block_rows, panel_cols
        # B's packed block takes half of L2 (at most 32 panels); where C's rows make fewer than two runs, at most half
        # of N's panels, so that two threads split C's columns. Each micro-panel of A is packed once per block, so
        # wide blocks amortize it (a 1024 x 1024 -> 256 layer ran 54 GFLOP/s in two blocks of 128 columns, 69 in one)
        in_l2 = max(1, min(32, host_cache_sizes().l2 // 2 // (_KC * panel_cols * 8)))
        panels = ceil(spec.n / panel_cols)
        split = ceil(spec.m / block_rows) < 2 * _ROW_BLOCKS
        self.block_cols = max(1, min(in_l2, ceil(panels / 2) if split else panels)) * panel_cols
        self.a_panel = _KC * self.block_cols   # elements of scratch before A's micro-panel

    def emit(self, op: str) -> KernelSpec:
        b, spec, k = self.b, self.spec, self.k
        row_blocks = ceil(spec.m / self.block_rows)
        per_run = max(_ROW_BLOCKS, ceil(row_blocks / _RUNS))
        runs, col_blocks = ceil(row_blocks / per_run), ceil(spec.n / self.block_cols)
        last_rows = spec.m - (row_blocks - 1) * self.block_rows
        last_cols = spec.n - (col_blocks - 1) * self.block_cols
        with claimed_unit_loop(k, list(spec.batch) + [col_blocks, runs], name="unit") as index:
            batch, col_block, run = index[:-2], index[-2], index[-1]
            self.at_batch(batch)
            bases = self.bases
            j0 = b.mul(col_block, i64(self.block_cols))
            first = b.mul(run, i64(per_run))
            whole = (row_blocks if last_rows == self.block_rows else row_blocks - 1) - (runs - 1) * per_run
            is_last_run = b.icmp_unsigned("==", run, i64(runs - 1))
            stop = b.add(first, b.select(is_last_run, i64(whole), i64(per_run)))
            with for_range(b, 0, spec.k, _KC, name="kb") as kb:
                depth = b.select(b.icmp_signed("<", b.sub(i64(spec.k), kb), i64(_KC)), b.sub(i64(spec.k), kb),
                                 i64(_KC))
                by_size(b, col_block, col_blocks, self.block_cols, last_cols,
                         lambda cols: self.pack_b(bases[1], kb, depth, j0, cols))
                with for_range(b, first, stop, name="rows") as row_block:
                    self.row_block(bases, b.mul(row_block, i64(self.block_rows)), self.block_rows, kb, depth, j0,
                                   col_block, col_blocks, last_cols)
                if last_rows != self.block_rows:
                    with b.if_then(is_last_run):
                        self.row_block(bases, i64((row_blocks - 1) * self.block_rows), last_rows, kb, depth, j0,
                                       col_block, col_blocks, last_cols)
        return k.finish(op, scratch_bytes=8 * (self.a_panel + _KC * self.block_rows))

    def pack_b(self, b_base: ir.Value, kb: ir.Value, depth: ir.Value, j0: ir.Value, cols: int) -> None:
        """B[kb : kb + depth, j0 : j0 + cols] as panels of panel_cols columns (each depth rows of them, zeros past
        `cols`), panel p at p _KC panel_cols: by rows of vectors where B's rows are contiguous, by squares of lanes x
        lanes transposed in registers where its columns are (a linear's weight), else element by element."""
        b, spec, lanes, dtype = self.b, self.spec, self.lanes, self.dtype
        start = b.add(b.add(b_base, b.mul(kb, i64(spec.b.rs))), b.mul(j0, i64(spec.b.cs)))
        vectors = [(p * self.panel_cols + v * lanes, p * _KC * self.panel_cols + v * lanes)
                   for p in range(ceil(cols / self.panel_cols)) for v in range(self.panel_cols // lanes)]
        if spec.b.rs == 1 and spec.b.cs != 1 and lanes > 1:
            squares = b.sub(depth, b.urem(depth, i64(lanes)))
            with for_range(b, 0, squares, lanes, name="pack_b") as kk:
                for col, at in vectors:
                    self._pack_square(b.add(start, kk), col, min(max(cols - col, 0), lanes), b.add(
                        i64(at), b.mul(kk, i64(self.panel_cols))))
            rows_from = squares
        else:
            rows_from = i64(0)
        with for_range(b, rows_from, depth, name="pack_b_rows") as kk:
            row = b.add(start, b.mul(kk, i64(spec.b.rs)))
            for col, at in vectors:
                valid = min(max(cols - col, 0), lanes)
                value = self._b_vector(row, col, valid) if valid else constant(dtype, 0, lanes)
                store(b, value, self.k.scratch, b.add(i64(at), b.mul(kk, i64(self.panel_cols))), dtype)

    def _b_vector(self, row: ir.Value, col: int, valid: int) -> ir.Value:
        """B's `valid` elements of a row from its column `col` past `row` (an element offset), zeros after them."""
        b, spec, lanes, dtype = self.b, self.spec, self.lanes, self.dtype
        if spec.b.cs == 1:
            mask = lane_mask(lanes, valid) if valid < lanes else None
            return load(b, self.ops.b, b.add(row, i64(col)), dtype, lanes, mask)
        value = constant(dtype, 0, lanes)
        for lane in range(valid):
            element = load(b, self.ops.b, b.add(row, i64((col + lane) * spec.b.cs)), dtype)
            value = b.insert_element(value, element, ir.Constant(I32, lane))
        return value

    def _pack_square(self, start: ir.Value, col: int, valid: int, at: ir.Value) -> None:
        """lanes rows of B from `start` (an element offset) by `valid` columns from `col`, B's columns contiguous:
        each column a vector load, the square transposed, each row stored at `at` + its row's panel offset."""
        b, spec, lanes, dtype = self.b, self.spec, self.lanes, self.dtype
        zero = constant(dtype, 0, lanes)
        columns = [load(b, self.ops.b, b.add(start, i64((col + c) * spec.b.cs)), dtype, lanes) if c < valid
                   else zero for c in range(lanes)]
        for r, row in enumerate(_transpose(b, columns)):
            store(b, row, self.k.scratch, b.add(at, i64(r * self.panel_cols)), dtype)

    def row_block(self, bases: tuple[ir.Value, ...], i0: ir.Value, rows: int, kb: ir.Value, depth: ir.Value,
                  j0: ir.Value, col_block: ir.Value, col_blocks: int, last_cols: int) -> None:
        """Pack A's micro-panel of `rows` rows for this K block, then the tile over every panel of the block."""
        b, spec, dtype, lanes = self.b, self.spec, self.dtype, self.lanes
        starts = [b.add(bases[0], b.mul(b.add(i0, i64(r)), i64(spec.a.rs))) for r in range(rows)]
        squares = rows - rows % lanes if spec.a.cs == 1 and lanes > 1 else 0
        k_squares = b.sub(depth, b.urem(depth, i64(lanes))) if squares else i64(0)
        with for_range(b, 0, k_squares, lanes, name="pack_a") as kk:   # lanes x lanes squares, transposed
            for r0 in range(0, squares, lanes):
                block = [load(b, self.ops.a, b.add(starts[r0 + r], b.add(kb, kk)), dtype, lanes) for r in range(lanes)]
                for step, column in enumerate(_transpose(b, block)):
                    at = b.add(i64(self.a_panel + r0), b.mul(b.add(kk, i64(step)), i64(rows)))
                    store(b, column, self.k.scratch, at, dtype)
        with for_range(b, k_squares, depth, name="pack_a_tail") as kk:   # the squares' rows past their last square
            for r in range(squares):
                self._pack_a_element(starts[r], kb, kk, r, rows)
        if squares < rows:
            with for_range(b, 0, depth, name="pack_a_rows") as kk:       # the rows past the squares, every column
                for r in range(squares, rows):
                    self._pack_a_element(starts[r], kb, kk, r, rows)

        def panels(cols: int) -> None:
            full, rest = divmod(cols, self.panel_cols)
            with for_range(b, 0, full, name="panel") as p:
                self.tile(bases[2], i0, rows, b.add(j0, b.mul(p, i64(self.panel_cols))), self.panel_cols, p, kb,
                          depth)
            if rest:
                self.tile(bases[2], i0, rows, b.add(j0, i64(full * self.panel_cols)), rest, i64(full), kb, depth)
        by_size(b, col_block, col_blocks, self.block_cols, last_cols, panels)

    def _pack_a_element(self, start: ir.Value, kb: ir.Value, kk: ir.Value, r: int, rows: int) -> None:
        """A's element of row r (from `start`) in column kb + kk, into the micro-panel at (kk, r)."""
        b = self.b
        value = load(b, self.ops.a, b.add(start, b.mul(b.add(kb, kk), i64(self.spec.a.cs))), self.dtype)
        store(b, value, self.k.scratch, b.add(i64(self.a_panel), b.add(b.mul(kk, i64(rows)), i64(r))), self.dtype)

    def tile(self, c_base: ir.Value, i0: ir.Value, rows: int, j: ir.Value, cols: int, panel: ir.Value,
             kb: ir.Value, depth: ir.Value) -> None:
        """C[i0 : i0 + rows, j : j + cols] += A's micro-panel times B's panel `panel`, from 0 on the first K block:
        the float32 micro-kernel's loop (K_UNROLL steps at a time, then one by one) with its accumulators carried."""
        b, spec, lanes, dtype = self.b, self.spec, self.lanes, self.dtype
        masks = self.masks(cols)
        vectors = len(masks)
        c_rows = [b.add(b.add(c_base, b.mul(b.add(i0, i64(r)), i64(spec.c.rs))), j) for r in range(rows)]
        c_at = [(r, v, b.add(c_rows[r], i64(v * lanes))) for r in range(rows) for v in range(vectors)]
        zero = constant(dtype, 0, lanes)
        first = b.icmp_unsigned("==", kb, i64(0))
        entry = b.block
        with b.if_then(b.not_(first)):
            old = [load(b, self.ops.c, at, dtype, lanes, masks[v]) for _, v, at in c_at]
            loaded = b.block
        acc = [b.phi(self.vector) for _ in c_at]
        for phi, value in zip(acc, old):
            phi.add_incoming(zero, entry)
            phi.add_incoming(value, loaded)
        b_panel = b.mul(panel, i64(_KC * self.panel_cols))

        def steps(count: int) -> Callable[[ir.Value, list[ir.Value]], list[ir.Value]]:
            def body(kk: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
                for step in range(count):
                    carried = self._step(b.add(kk, i64(step)), b_panel, rows, vectors, carried)
                return carried
            return body
        at, acc = carried_loop(b, i64(0), depth, K_UNROLL, acc, steps(K_UNROLL), "ku")
        _, acc = carried_loop(b, at, depth, 1, acc, steps(1), "k")

        def store_tile(final: bool) -> None:
            for (r, v, at), value in zip(c_at, acc):
                if final:
                    value = self.final(value, b.add(i0, i64(r)), b.add(j, i64(v * lanes)), masks[v])
                store(b, value, self.ops.c, at, dtype, masks[v])
        if self.ops.epilogue is None or spec.k <= _KC:
            store_tile(self.ops.epilogue is not None)
            return
        with b.if_else(b.icmp_unsigned("==", b.add(kb, depth), i64(spec.k))) as (last, partial):
            with last:
                store_tile(True)
            with partial:
                store_tile(False)

    def _step(self, kk: ir.Value, b_panel: ir.Value, rows: int, vectors: int, acc: list[ir.Value]) -> list[ir.Value]:
        """One k step of the tile: B's vectors of the panel's row kk, each row's element of A broadcast."""
        b, lanes, dtype = self.b, self.lanes, self.dtype
        row = b.add(b_panel, b.mul(kk, i64(self.panel_cols)))
        for line in range(0, self.panel_cols * 8, CACHE_LINE):   # B's panel streams from L2: hint it to L1
            prefetch(b, pointer(b, self.k.scratch, b.add(row, i64(_PREFETCH_STEPS * self.panel_cols + line // 8)),
                                dtype), L1)
        bv = [load(b, self.k.scratch, b.add(row, i64(v * lanes)), dtype, lanes) for v in range(vectors)]
        a_at = b.add(i64(self.a_panel), b.mul(kk, i64(rows)))
        out = []
        for r in range(rows):
            a = splat(b, load(b, self.k.scratch, b.add(a_at, i64(r)), dtype), lanes)
            out += [self.madd(a, bv[v], acc[r * vectors + v]) for v in range(vectors)]
        return out


class _Dot(_Tile):
    """rows x cols elements of C as dot products of A's rows and B's columns, each a vector of partial sums."""

    def accumulators(self, count: int) -> list[ir.Value]:
        """`count` vector slots holding zeros (in the entry block, so that LLVM keeps them in registers)."""
        zero = constant(self.dtype, 0, self.lanes)
        slots = [alloca(self.b, zero.type) for _ in range(count)]
        for slot in slots:
            self.b.store(zero, slot)
        return slots

    def emit(self, i0: ir.Value, j0: ir.Value, rows: int, cols: int) -> None:
        """C[i0 : i0 + rows, j0 : j0 + cols] as rows x cols dot products along K."""
        b, spec, lanes, dtype = self.b, self.spec, self.lanes, self.dtype
        a_base, b_base, c_base = self.bases
        acc = self.accumulators(rows * cols)
        a_rows = [b.add(a_base, b.mul(b.add(i0, i64(r)), i64(spec.a.rs))) for r in range(rows)]
        b_cols = [b.add(b_base, b.mul(b.add(j0, i64(c)), i64(spec.b.cs))) for c in range(cols)]

        def step(kk: ir.Value, mask: ir.Value | None) -> None:
            a = [load(b, self.ops.a, b.add(start, kk), dtype, lanes, mask) for start in a_rows]
            w = [load(b, self.ops.b, b.add(start, kk), dtype, lanes, mask) for start in b_cols]
            for r in range(rows):
                for c in range(cols):
                    slot = acc[r * cols + c]
                    b.store(self.madd(a[r], w[c], b.load(slot, typ=a[r].type)), slot)
        full = spec.k - spec.k % lanes
        with for_range(b, 0, full, lanes, name="k") as kk:
            step(kk, None)
        if spec.k % lanes:
            step(i64(full), lane_mask(lanes, spec.k % lanes))
        for r in range(rows):
            c_row = b.add(b.add(c_base, b.mul(b.add(i0, i64(r)), i64(spec.c.rs))), j0)
            totals = [halving_sum(b, b.load(acc[r * cols + c], typ=self.vector), lanes) for c in range(cols)]
            if self.ops.epilogue is None:
                for c, total in enumerate(totals):
                    store(b, total, self.ops.c, b.add(c_row, i64(c)), dtype)
                continue
            row = constant(dtype, 0, _DOT_ROW)   # the epilogue sees the row's results as one masked vector
            for c, total in enumerate(totals):
                row = b.insert_element(row, total, ir.Constant(I32, c))
            mask = lane_mask(_DOT_ROW, cols) if cols < _DOT_ROW else None
            store(b, self.final(row, b.add(i0, i64(r)), j0, mask), self.ops.c, c_row, dtype, mask)


def _transpose(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The square of len(rows) vectors of as many lanes transposed, in log2(lanes) stages of two-vector shuffles:
    at each stage, with q half of the current block width, row i and row i + q exchange the halves of their blocks
    (q = lanes / 2, then lanes / 4, down to 1)."""
    lanes = len(rows)
    rows = list(rows)
    q = lanes // 2
    while q >= 1:
        index = ir.VectorType(I32, lanes)
        first = [(lane // (2 * q)) * 2 * q + lane % (2 * q) + (0 if lane % (2 * q) < q else lanes - q)
                 for lane in range(lanes)]
        second = [(lane // (2 * q)) * 2 * q + lane % (2 * q) + (q if lane % (2 * q) < q else lanes)
                  for lane in range(lanes)]
        for i in range(lanes):
            if (i // q) % 2 == 0:
                top, bottom = rows[i], rows[i + q]
                rows[i] = b.shuffle_vector(top, bottom, vector_const(index, first))
                rows[i + q] = b.shuffle_vector(top, bottom, vector_const(index, second))
        q //= 2
    return rows


def halving_sum(b: ir.IRBuilder, v: ir.Value, lanes: int) -> ir.Value:
    """The sum of a vector's lanes as a tree: its halves added, then their halves, down to one lane."""
    while lanes > 1:
        half = lanes // 2
        low = b.shuffle_vector(v, v, vector_const(ir.VectorType(I32, half), list(range(half))))
        high = b.shuffle_vector(v, v, vector_const(ir.VectorType(I32, half), list(range(half, lanes))))
        v, lanes = b.fadd(low, high), half
    return b.extract_element(v, ir.Constant(I32, 0))


__all__ = ["Operands", "tiled_form", "tiled_matmul"]
