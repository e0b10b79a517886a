"""The elementwise loop nest: the threaded iteration of an output shape with every operand read through broadcast
strides, which elementwise kernels, fused elementwise regions, batch norm and dequantization share.

Axes are coalesced first, so the innermost loop is as long as possible; it is contiguous for every operand that is
not broadcast along it (the others are loaded once per row and splatted) and runs W lanes at a time, the row's
last n % W elements as one vector whose lanes past the row are neither read nor written (a lone last element as a
scalar: base.masked_tail). One by one, those elements made gelu(x * bias) over rows of 77 float32 6.5x slower per
element than over rows of 64, rows of 13 35x (a scalar erf each; AVX-512, one Zen 4 thread: 1.82 and 9.27 ns
against 0.27); as one vector, 0.28 and 0.38 (AVX2 code: 1.13 and 4.05 -> 0.52 and 0.87, rows of 64 0.53). Rows
are the units threads split; when there are few long rows, the rows are cut into chunks so every thread gets
work. Outer coordinates advance like an odometer: no division or modulo per element or per row.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Callable, Sequence

import llvmlite.ir as ir

from braze.ir.errors import CodegenError
from braze.ir.types import DType, TensorType
from braze.ir.views import View, broadcast, contiguous

from ..loops import i64, lane_mask, vector_loop
from .base import (Kernel, claimed_unit_loop, coalesce, contiguous_strides, load, masked_tail, offset_of,
                   store, store_first, widen)


@dataclass(frozen=True)
class Operand:
    """A buffer pointer and the type of the array it holds: dense, or where `view` says in the buffer (an operand
    read through slices or transposes)."""

    ptr: ir.Value
    type: TensorType
    view: View | None = None

    def walk(self, shape: Sequence[int]) -> View:
        """Where the operand's elements lie when read broadcast to `shape`."""
        return broadcast(self.view or contiguous(self.type.shape), self.type.shape, shape)


@dataclass(frozen=True)
class Table:
    """An operand read where indices point (a gather's x): `walk` is, over the nest's domain, the position each
    element's index adds to (the indexed axis's stride is 0 in it), in elements of `dtype`."""

    ptr: ir.Value
    dtype: DType
    walk: View


@dataclass(frozen=True)
class TableRow:
    """A table at one lane group of the nest: lane j's position is `offset + j * step`, lanes outside `mask` (when
    there is one) lie past the row and must not be read."""

    table: Table
    offset: ir.Value
    step: int
    mask: ir.Value | None


def _chunks(rows: int, inner: int, width: int) -> int:
    """Chunk length of the inner axis: whole rows unless there are too few rows to share among threads."""
    if rows >= 32 or inner < 8192:
        return inner
    pieces = min(-(-inner // 4096), -(-64 // rows))
    per_piece = -(-inner // pieces)
    return -(-per_piece // width) * width


def reads_rows(shape: Sequence[int], operands: Sequence[tuple[TensorType, View | None]]) -> bool:
    """Whether a nest over `shape` reads every operand (its type and view, None for dense): each broadcasts to
    `shape` and, after the axes are coalesced, is contiguous or broadcast along the innermost (loaded as vectors)."""
    try:
        strides = [broadcast(view or contiguous(t.shape), t.shape, shape).strides for t, view in operands]
    except ValueError:   # a region whose body's inputs do not broadcast to its stated domain (IR from outside)
        return False
    _, walks, _ = coalesce(shape, strides + [contiguous_strides(shape)])
    return all(not w or w[-1] in (0, 1) for w in walks)


def elementwise_nest(k: Kernel, shape: tuple[int, ...], inputs: Sequence[Operand], outputs: Sequence[Operand],
                     compute: Callable[[ir.IRBuilder, Sequence, int], Sequence[ir.Value]],
                     tables: Sequence[Table] = ()) -> None:
    """Emit the threaded loop nest computing outputs (dense, of `shape`) from broadcast inputs, lane group by lane
    group: every input of a lane group is loaded before any output of it is stored, so results may overwrite an
    operand of the same shape (the memory plan's in-place rule). compute(builder, values, lanes) gets the inputs'
    values, then a TableRow per table."""
    if prod(shape) == 0:
        return
    if not reads_rows(shape, [(o.type, o.view) for o in inputs]):
        raise CodegenError(f"elementwise nest over {list(shape)}: an operand does not broadcast to it or its view is "
                           f"strided along the innermost axis (check reads_rows first)")
    b, width = k.builder, k.width
    reads = [o.walk(shape) for o in inputs] + [t.walk for t in tables]
    strides = [r.strides for r in reads] + [contiguous_strides(shape)] * len(outputs)
    dims, walks, _ = coalesce(shape, strides)
    if not dims:
        dims, walks = [1], [[0] for _ in strides]
    starts = [r.offset for r in reads] + [0] * len(outputs)
    inner, outer = dims[-1], dims[:-1]
    chunk = _chunks(prod(outer), inner, width)
    pieces = -(-inner // chunk)
    with claimed_unit_loop(k, outer + ([pieces] if pieces > 1 else []), name="row") as index:
        bases = [offset_of(b, index[:len(outer)], w[:-1], start) for w, start in zip(walks, starts)]
        start: ir.Value = i64(0)
        stop: ir.Value = i64(inner)
        if pieces > 1:
            start = b.mul(index[-1], i64(chunk))
            end = b.add(start, i64(chunk))
            stop = b.select(b.icmp_signed("<", end, i64(inner)), end, i64(inner))
        fixed = {i: load(b, o.ptr, bases[i], o.type.dtype) for i, o in enumerate(inputs) if walks[i][-1] == 0}

        def body(i: ir.Value, lanes: int, valid: int | None = None) -> None:
            """`lanes` elements from i, the first `valid` of them only when given (a row's partial last vector)."""
            mask = None if valid is None else lane_mask(lanes, valid)
            values: list = [widen(b, fixed[n], lanes) if n in fixed else
                            load(b, o.ptr, b.add(bases[n], i), o.type.dtype, lanes, mask) for n, o in enumerate(inputs)]
            for n, t in enumerate(tables, len(inputs)):
                values.append(TableRow(t, b.add(bases[n], b.mul(i, i64(walks[n][-1]))), walks[n][-1], mask))
            results = compute(b, values, lanes)
            for n, (o, value) in enumerate(zip(outputs, results)):
                at = b.add(bases[len(reads) + n], i)
                if valid is None:
                    store(b, value, o.ptr, at, o.type.dtype)
                else:
                    store_first(b, value, o.ptr, at, o.type.dtype, valid, k.target)
        # chunks are whole vectors: only a row's last one ends in the row's tail
        vector_loop(b, start, stop, width, body, name="e", partial=masked_tail(inner, width))


__all__ = ["Operand", "Table", "TableRow", "elementwise_nest"]
