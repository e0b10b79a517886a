"""Data movement: reshape, squeeze, unsqueeze and copy (a threaded memcpy), transpose, flip, slice, concat and stack
(strided copies) and pad. broadcast_to is an elementwise nest (elementwise.py).

A strided copy walks the destination box with its axes coalesced; rows are the units threads split and their
coordinates advance like an odometer (no division per element or row). When the source is contiguous along the
innermost axis the row is a vector copy; when it is broadcast the row is a splatted store; otherwise (transposes
that move the innermost axis) the copy goes tile by tile, W x W elements of the two axes involved at a time, so
reads and writes each touch W cache lines per tile instead of one line per element.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import llvmlite.ir as ir
import numpy as np

from braze.ir.graph import Graph, Node
from braze.ir.registry import get_op
from braze.ir.views import body_views
from braze.ir.ops._common import normalize_axis
from braze.ir.types import DType

from ..gemm_pack import transpose
from ..loops import I1, I8, PTR, for_range, i64, vector_loop
from .base import (Kernel, KernelContext, KernelSpec, Unfusable, begin_kernel, claimed_unit_loop, coalesce, constant,
                   contiguous_strides, load, offset_of, register, store, thread_share, unit_loop, widen)

TILE_ROWS = 4096  # bytes per unit of a flat copy


@dataclass(frozen=True)
class View:
    """A buffer read or written as a strided box: element (i0, i1, ...) at ptr[base + sum(i_d * strides_d)]."""

    ptr: ir.Value
    base: int
    strides: tuple[int, ...]


def flat_copy(k: Kernel, src: ir.Value, dst: ir.Value, nbytes: int) -> None:
    """dst[0:nbytes] = src[0:nbytes], split between threads in 4 KiB pieces."""
    if nbytes == 0:
        return
    b = k.builder
    pieces = -(-nbytes // TILE_ROWS)
    first, last = thread_share(b, k.tid, k.nthreads, pieces)
    start = b.mul(first, i64(TILE_ROWS))
    end = b.mul(last, i64(TILE_ROWS))
    end = b.select(b.icmp_signed("<", end, i64(nbytes)), end, i64(nbytes))
    count = b.select(b.icmp_signed("<", start, end), b.sub(end, start), i64(0))
    memcpy = k.fn.module.globals.get("llvm.memcpy.p0.p0.i64") or ir.Function(
        k.fn.module, ir.FunctionType(ir.VoidType(), [PTR, PTR, ir.IntType(64), I1]), "llvm.memcpy.p0.p0.i64")
    b.call(memcpy, [b.gep(dst, [start], source_etype=I8), b.gep(src, [start], source_etype=I8), count,
                    ir.Constant(I1, 0)])


def strided_copy(k: Kernel, shape: tuple[int, ...], src: View, dst: View, dtype: DType) -> None:
    """dst box = src box for a box of `shape`, threads splitting the rows."""
    if prod(shape) == 0:
        return
    dims, (s_walk, d_walk), _ = coalesce(shape, [src.strides, dst.strides])
    if not dims:
        dims, s_walk, d_walk = [1], [0], [0]
    if s_walk[-1] in (0, 1) or 1 not in s_walk:
        _row_copy(k, dims, View(src.ptr, src.base, tuple(s_walk)), View(dst.ptr, dst.base, tuple(d_walk)), dtype)
    else:
        _tile_copy(k, dims, View(src.ptr, src.base, tuple(s_walk)), View(dst.ptr, dst.base, tuple(d_walk)), dtype)


def _row_copy(k: Kernel, dims: list[int], src: View, dst: View, dtype: DType) -> None:
    b, width = k.builder, k.width
    outer, n = dims[:-1], dims[-1]
    with claimed_unit_loop(k, outer, name="row") as index:
        s0 = offset_of(b, index, src.strides[:-1], src.base)
        d0 = offset_of(b, index, dst.strides[:-1], dst.base)
        s_step, d_step = src.strides[-1], dst.strides[-1]
        fixed = load(b, src.ptr, s0, dtype) if s_step == 0 else None
        if d_step == 1 and s_step in (0, 1):
            def body(i: ir.Value, lanes: int) -> None:
                value = widen(b, fixed, lanes) if fixed is not None else load(b, src.ptr, b.add(s0, i), dtype, lanes)
                store(b, value, dst.ptr, b.add(d0, i), dtype)
            vector_loop(b, 0, n, width, body, name="c")
        else:
            with for_range(b, 0, n, name="c") as i:
                value = fixed if fixed is not None else load(b, src.ptr, b.add(s0, b.mul(i, i64(s_step))), dtype)
                store(b, value, dst.ptr, b.add(d0, b.mul(i, i64(d_step))), dtype)


def _tile_copy(k: Kernel, dims: list[int], src: View, dst: View, dtype: DType) -> None:
    """A copy whose source is contiguous along axis p but not along the last axis: W x W tiles of (p, last)."""
    b, t = k.builder, k.width
    p = src.strides.index(1)
    last = len(dims) - 1
    outer = [d for d in range(len(dims)) if d not in (p, last)]
    tiles_p, tiles_q = -(-dims[p] // t), -(-dims[last] // t)
    with claimed_unit_loop(k, [dims[d] for d in outer] + [tiles_p], name="tile") as index:
        s0 = offset_of(b, index[:-1], [src.strides[d] for d in outer], src.base)
        d0 = offset_of(b, index[:-1], [dst.strides[d] for d in outer], dst.base)
        a0 = b.mul(index[-1], i64(t))
        a_end = _min(b, b.add(a0, i64(t)), i64(dims[p]))
        with for_range(b, 0, tiles_q, name="tq") as tq:
            c0 = b.mul(tq, i64(t))
            c_end = _min(b, b.add(c0, i64(t)), i64(dims[last]))
            edge = ((p, last), (a0, a_end), (c0, c_end), (s0, d0))
            if dst.strides[last] != 1 or t & (t - 1) or t == 1:
                _scalar_tile(b, src, dst, dtype, *edge)
            else:
                full = b.and_(b.icmp_signed("==", b.sub(a_end, a0), i64(t)),
                              b.icmp_signed("==", b.sub(c_end, c0), i64(t)))
                with b.if_else(full) as (then, otherwise):
                    with then:
                        _vector_tile(b, src, dst, dtype, (p, last), a0, c0, (s0, d0), t)
                    with otherwise:
                        _scalar_tile(b, src, dst, dtype, *edge)


def _scalar_tile(b: ir.IRBuilder, src: View, dst: View, dtype: DType, axes, rows, cols, bases) -> None:
    """One tile (a partial one at the edges) element by element."""
    (p, last), (s0, d0) = axes, bases
    with for_range(b, *rows, name="ta") as a:
        s_row = b.add(s0, a)
        d_row = b.add(d0, b.mul(a, i64(dst.strides[p])))
        with for_range(b, *cols, name="tc") as c:
            value = load(b, src.ptr, b.add(s_row, b.mul(c, i64(src.strides[last]))), dtype)
            store(b, value, dst.ptr, b.add(d_row, b.mul(c, i64(dst.strides[last]))), dtype)


def _vector_tile(b: ir.IRBuilder, src: View, dst: View, dtype: DType, axes, a0, c0, bases, t: int) -> None:
    """A full t x t tile: t vector loads along the source's unit axis, a transpose in registers, t vector stores
    along the destination's (no scalar access to rows a cache-conflicting stride apart)."""
    (p, last), (s0, d0) = axes, bases
    start = b.add(s0, a0)
    rows = [load(b, src.ptr, b.add(start, b.mul(b.add(c0, i64(c)), i64(src.strides[last]))), dtype, t)
            for c in range(t)]
    for i, row in enumerate(transpose(b, rows)):
        store(b, row, dst.ptr, b.add(b.add(d0, b.mul(b.add(a0, i64(i)), i64(dst.strides[p]))), c0), dtype)


def _min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


# --- lowerings ------------------------------------------------------------------------------------------------


@register("reshape", "squeeze", "unsqueeze", "copy")
def lower_flat_copy(node: Node, ctx: KernelContext) -> KernelSpec:
    """Ops that keep the row-major order of the elements: a memcpy of the operand."""
    k = begin_kernel(ctx, node.outputs, node.inputs)
    flat_copy(k, k.ins[0], k.outs[0], node.out.type.nbytes)
    return k.finish(node.op)


@register("transpose")
def lower_transpose(node: Node, ctx: KernelContext) -> KernelSpec:
    x, perm = node.inputs[0], node.attr["perm"]
    k = begin_kernel(ctx, node.outputs, node.inputs)
    own = contiguous_strides(x.shape)
    strided_copy(k, node.out.shape, View(k.ins[0], 0, tuple(own[p] for p in perm)),
                 View(k.outs[0], 0, contiguous_strides(node.out.shape)), x.dtype)
    return k.finish(node.op)


@register("flip")
def lower_flip(node: Node, ctx: KernelContext) -> KernelSpec:
    """A strided copy reading each flipped axis backwards: from its last element, with a negated stride."""
    x = node.inputs[0]
    flipped = {normalize_axis("flip", a, x.type.rank) for a in node.attr["axes"]}
    own = contiguous_strides(x.shape)
    base = sum((d - 1) * s for a, (d, s) in enumerate(zip(x.shape, own)) if a in flipped and d)
    k = begin_kernel(ctx, node.outputs, node.inputs)
    strided_copy(k, x.shape, View(k.ins[0], base, tuple(-s if a in flipped else s for a, s in enumerate(own))),
                 View(k.outs[0], 0, own), x.dtype)
    return k.finish(node.op)


@register("slice")
def lower_slice(node: Node, ctx: KernelContext) -> KernelSpec:
    x, attrs = node.inputs[0], node.attr
    own = contiguous_strides(x.shape)
    base = sum(start * s for start, s in zip(attrs["starts"], own))
    k = begin_kernel(ctx, node.outputs, node.inputs)
    strided_copy(k, node.out.shape, View(k.ins[0], base, tuple(step * s for step, s in zip(attrs["steps"], own))),
                 View(k.outs[0], 0, contiguous_strides(node.out.shape)), x.dtype)
    return k.finish(node.op)


@register("concat", "stack")
def lower_join(node: Node, ctx: KernelContext) -> KernelSpec:
    k = begin_kernel(ctx, node.outputs, node.inputs)
    join(k, node, [View(ptr, 0, contiguous_strides(x.shape)) for ptr, x in zip(k.ins, node.inputs)])
    return k.finish(node.op)


def join(k: Kernel, node: Node, sources: list[View]) -> None:
    """Each operand of a concat or stack, read through its view, copied into its box of the result (stack: a box of
    thickness 1 along the new axis)."""
    out = node.out
    axis = normalize_axis(node.op, node.attr["axis"], out.type.rank)
    strides = contiguous_strides(out.shape)
    start = 0
    for src, x in zip(sources, node.inputs):
        box, read = x.shape, src.strides
        if node.op == "stack":
            box, read = box[:axis] + (1,) + box[axis:], read[:axis] + (0,) + read[axis:]
        strided_copy(k, box, View(src.ptr, src.base, read), View(k.outs[0], start * strides[axis], strides), x.dtype)
        start += box[axis]


def lower_movement_region(node: Node, ctx: KernelContext, body: Graph) -> KernelSpec:
    """A movement region (ir/ops/fused.py): its last op, a join or a view op, copying each operand straight from
    the buffer its chain of view ops starts in, through the composed view."""
    at, rest = body_views(body, get_op)
    result, last = body.outputs[0], rest[-1] if rest else None
    if result.name in at:   # a view op last: one copy through the composed view
        reads = [at[result.name]]
    elif last is not None and get_op(last.op).joins and all(v.name in at for v in last.inputs):
        reads = [at[v.name] for v in last.inputs]
    else:   # a view op that needs a copy, or a join reading a leaf: op by op
        raise Unfusable("the region's last op does not read views of the region's inputs")
    k = begin_kernel(ctx, node.outputs, node.inputs)
    sources = [View(k.ins[operand], view.offset, view.strides) for operand, view in reads]
    if result.name in at:
        strided_copy(k, result.shape, sources[0], View(k.outs[0], 0, contiguous_strides(result.shape)),
                     result.dtype)
    else:
        join(k, last, sources)
    return k.finish("fused")


@register("pad")
def lower_pad(node: Node, ctx: KernelContext) -> KernelSpec:
    """Row by row over the result, so each thread writes only its own rows: with a constant, rows outside the
    operand are filled and rows inside get the fill on both sides of a copy of the operand's row; the other modes
    map every row to the operand row it reads (_mirror_rows)."""
    x, out, pads = node.inputs[0], node.out, node.attr["pads"]
    fill_value = np.asarray(node.attr["value"]).astype(x.dtype.numpy).item()
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b, width = k.builder, k.width
    shape, xshape = (out.shape, x.shape) if out.shape else ((1,), (1,))
    pads = pads if out.shape else (0, 0)
    if prod(shape) == 0:
        return k.finish(node.op)
    outer = list(shape[:-1])
    xs, os = contiguous_strides(xshape), contiguous_strides(shape)
    fill = constant(x.dtype, fill_value)
    first, last = thread_share(b, k.tid, k.nthreads, prod(outer))

    def fill_range(row: ir.Value, lo: int, hi: int) -> None:
        vector_loop(b, lo, hi, width, lambda i, lanes: store(b, widen(b, fill, lanes), k.outs[0], b.add(row, i),
                                                             x.dtype), name="f")
    if node.attr["mode"] != "constant":
        _mirror_rows(k, node, pads, (shape, xshape), (xs, os), first, last)
        return k.finish(node.op)
    with unit_loop(b, outer, first, last, name="row") as index:
        d_row = offset_of(b, index, os[:-1])
        inside: ir.Value = ir.Constant(I1, 1)
        s_row: ir.Value = i64(0)
        for axis, c in enumerate(index):
            lo = pads[2 * axis]
            inside = b.and_(inside, b.and_(b.icmp_signed(">=", c, i64(lo)), b.icmp_signed("<", c, i64(lo + xshape[axis]))))
            s_row = b.add(s_row, b.mul(b.sub(c, i64(lo)), i64(xs[axis])))
        lo, n = pads[-2], xshape[-1]
        with b.if_else(inside) as (then, otherwise):
            with then:
                fill_range(d_row, 0, lo)
                vector_loop(b, 0, n, width, lambda i, lanes: store(
                    b, load(b, k.ins[0], b.add(s_row, i), x.dtype, lanes), k.outs[0], b.add(d_row, b.add(i, i64(lo))),
                    x.dtype), name="p")
                fill_range(d_row, lo + n, shape[-1])
            with otherwise:
                fill_range(d_row, 0, shape[-1])
    return k.finish(node.op)


def _source(b: ir.IRBuilder, mode: str, i: ir.Value, n: int) -> ir.Value:
    """The position along an axis of n elements that padded position i (counted from the first element) reads:
    ir/ops/indexing.py's pad_sources."""
    below, above = b.icmp_signed("<", i, i64(0)), b.icmp_signed(">=", i, i64(n))
    if mode == "edge":
        low, high = i64(0), i64(n - 1)
    elif mode == "wrap":
        low, high = b.add(i, i64(n)), b.sub(i, i64(n))
    else:   # reflect
        low, high = b.neg(i), b.sub(i64(2 * (n - 1)), i)
    return b.select(below, low, b.select(above, high, i))


def _mirror_rows(k: Kernel, node: Node, pads: tuple[int, ...], shapes: tuple, strides: tuple, first: ir.Value,
                 last: ir.Value) -> None:
    """Padding by reflect, edge or wrap in one pass: each result row reads the operand row its outer coordinates
    map to, its middle copied as vectors and its padded ends element by element."""
    b, width, dtype = k.builder, k.width, node.inputs[0].dtype
    (shape, xshape), (xs, os), mode = shapes, strides, node.attr["mode"]
    lo, n = pads[-2], xshape[-1]
    with unit_loop(b, list(shape[:-1]), first, last, name="row") as index:
        d_row = offset_of(b, index, os[:-1])
        s_row: ir.Value = i64(0)
        for axis, c in enumerate(index):
            source = _source(b, mode, b.sub(c, i64(pads[2 * axis])), xshape[axis])
            s_row = b.add(s_row, b.mul(source, i64(xs[axis])))

        def ends(start: int, stop: int) -> None:
            with for_range(b, start, stop, name="end") as j:
                at = b.add(s_row, _source(b, mode, b.sub(j, i64(lo)), n))
                store(b, load(b, k.ins[0], at, dtype), k.outs[0], b.add(d_row, j), dtype)
        ends(0, lo)
        vector_loop(b, 0, n, width, lambda i, lanes: store(
            b, load(b, k.ins[0], b.add(s_row, i), dtype, lanes), k.outs[0], b.add(d_row, b.add(i, i64(lo))), dtype),
            name="p")
        ends(lo + n, shape[-1])


__all__ = ["View", "flat_copy", "join", "lower_movement_region", "strided_copy"]
