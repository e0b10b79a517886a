"""Pooling over the last two axes: max_pool2d, avg_pool2d and adaptive_avg_pool2d (torch semantics).

max/avg pooling: the units threads split are output rows of every plane; each row is computed W output columns at
a time, looping over the window's taps with masked loads (stride 1; strides up to 4 load the stride x W elements a
tap spans and keep every stride-th with a shuffle) or masked gathers (larger strides), so taps in the padding or
past a ceil-mode edge are never read: they count as -inf for max and are left out of avg's sum.
Window maxima propagate NaN like the reference. avg_pool2d divides by torch's divisor (count_include_pad and the
ceil-mode rule), computed per output row and column from the geometry, not per tap.

adaptive_avg_pool2d averages torch's bins (row i covers [floor(i H / OH), ceil((i + 1) H / OH))). When every bin
spans whole rows (OW = 1, global pooling included) a bin is one contiguous run, summed W lanes at a time.
"""
from __future__ import annotations

from math import prod

import llvmlite.ir as ir

from braze.ir.graph import Node
from braze.ir.types import DType

from ..loops import I32, I64, alloca, for_range, i64, vector_loop
from .base import (Kernel, KernelContext, KernelSpec, begin_kernel, claimed_unit_loop, constant, gather, iota, load,
                   register, store, widen)
from .elementwise import fmax
from .reducers import Reducer


# Strides up to this read a window tap's lanes with one wide masked load and a shuffle; larger ones gather (a
# gather of 16 lanes costs about as much as 16 loads, what the wide load spends only at stride 16).
MOST_SPREAD = 4


def divisor(b: ir.IRBuilder, first: ir.Value, kernel: int, size: int, pad: int, include_pad: bool) -> ir.Value:
    """Elements of a window starting at padded coordinate `first` along one axis (torch's avg_pool2d rule)."""
    def smin(x, y):
        return b.select(b.icmp_signed("<", x, y), x, y)

    def smax(x, y):
        return b.select(b.icmp_signed(">", x, y), x, y)
    def like(v: int) -> ir.Value:
        return widen(b, i64(v), first.type.count) if isinstance(first.type, ir.VectorType) else i64(v)
    end = smin(b.add(first, like(kernel)), like(size + pad))
    if include_pad:
        return b.sub(end, first)
    return b.sub(smin(end, like(size)), smax(first, like(0)))


def _pool(node: Node, ctx: KernelContext, kind: str) -> KernelSpec:
    x, out = node.inputs[0], node.out
    attrs = node.attr
    (kh, kw), (sh, sw), (ph, pw) = attrs["kernel_size"], attrs["stride"], attrs["padding"]
    dh, dw = attrs.get("dilation", (1, 1))
    h, w = x.shape[-2:]
    oh_count, ow_count = out.shape[-2:]
    planes = prod(x.shape[:-2])
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b, dtype = k.builder, x.dtype
    fill = constant(dtype, float("-inf") if kind == "max" else 0.0)
    with claimed_unit_loop(k, [planes, oh_count], name="row") as (plane, oh):
        src = b.mul(plane, i64(h * w))
        dst = b.mul(b.add(b.mul(plane, i64(oh_count)), oh), i64(ow_count))
        ih0 = b.sub(b.mul(oh, i64(sh)), i64(ph))

        def body(ow: ir.Value, lanes: int) -> None:
            acc = alloca(b, widen(b, fill, lanes).type)
            b.store(widen(b, fill, lanes), acc)
            iw0 = b.sub(b.mul(ow, i64(sw)), i64(pw))
            with for_range(b, 0, kh, name="kh") as i:
                ih = b.add(ih0, b.mul(i, i64(dh)))
                row_ok = b.icmp_unsigned("<", ih, i64(h))
                row = b.add(src, b.mul(ih, i64(w)))
                with for_range(b, 0, kw, name="kw") as j:
                    iw = b.add(iw0, b.mul(j, i64(dw)))
                    value = _tap(b, k, row, iw, row_ok, lanes, sw, w, dtype, fill)
                    old = b.load(acc, typ=value.type)
                    b.store(fmax(b, old, value) if kind == "max" else b.fadd(old, value), acc)
            result = b.load(acc, typ=widen(b, fill, lanes).type)
            if kind == "avg":
                cols = b.add(widen(b, iw0, lanes), b.mul(iota(I64, lanes), widen(b, i64(sw), lanes))) \
                    if lanes > 1 else iw0
                include = attrs["count_include_pad"]
                count = b.mul(widen(b, divisor(b, ih0, kh, h, ph, include), lanes), divisor(b, cols, kw, w, pw, include))
                result = b.fdiv(result, b.sitofp(count, result.type))
            store(b, result, k.outs[0], b.add(dst, ow), dtype)
        vector_loop(b, 0, ow_count, k.width, body, name="ow")
    return k.finish(node.op)


def _tap(b: ir.IRBuilder, k: Kernel, row: ir.Value, iw: ir.Value, row_ok: ir.Value, lanes: int, stride: int,
         width: int, dtype: DType, fill: ir.Value) -> ir.Value:
    """One window tap for `lanes` neighbouring outputs; taps outside the input give `fill`, without a read."""
    if lanes == 1:
        ok = b.and_(row_ok, b.icmp_unsigned("<", iw, i64(width)))
        value = load(b, k.ins[0], b.select(ok, b.add(row, iw), i64(0)), dtype)
        return b.select(ok, value, fill)
    cols = b.add(widen(b, iw, lanes), b.mul(iota(I64, lanes), widen(b, i64(stride), lanes)))
    mask = b.and_(widen(b, row_ok, lanes), b.icmp_unsigned("<", cols, widen(b, i64(width), lanes)))
    if stride == 1:
        return b.select(mask, load(b, k.ins[0], b.add(row, iw), dtype, lanes, mask), widen(b, fill, lanes))
    if stride <= MOST_SPREAD:
        # the stride * lanes elements the taps span, in one masked load, every stride-th kept by a shuffle
        span = b.add(widen(b, iw, lanes * stride), iota(I64, lanes * stride))
        inside = b.and_(widen(b, row_ok, lanes * stride),
                        b.icmp_unsigned("<", span, widen(b, i64(width), lanes * stride)))
        wide = load(b, k.ins[0], b.add(row, iw), dtype, lanes * stride, inside)
        picked = b.shuffle_vector(wide, ir.Constant(wide.type, None),
                                  ir.Constant(ir.VectorType(I32, lanes), [p * stride for p in range(lanes)]))
        return b.select(mask, picked, widen(b, fill, lanes))
    return gather(b, k.ins[0], b.add(widen(b, row, lanes), cols), dtype, mask, widen(b, fill, lanes))


@register("max_pool2d")
def lower_max_pool2d(node: Node, ctx: KernelContext) -> KernelSpec:
    return _pool(node, ctx, "max")


@register("avg_pool2d")
def lower_avg_pool2d(node: Node, ctx: KernelContext) -> KernelSpec:
    return _pool(node, ctx, "avg")


@register("adaptive_avg_pool2d")
def lower_adaptive_avg_pool2d(node: Node, ctx: KernelContext) -> KernelSpec:
    """Each output the mean of its bin; one unit per output row of a plane."""
    x, out = node.inputs[0], node.out
    h, w = x.shape[-2:]
    oh_count, ow_count = out.shape[-2:]
    planes = prod(x.shape[:-2])
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b, dtype = k.builder, x.dtype
    with claimed_unit_loop(k, [planes, oh_count], name="row") as (plane, i):
        hs = b.udiv(b.mul(i, i64(h)), i64(oh_count))
        he = b.udiv(b.add(b.mul(b.add(i, i64(1)), i64(h)), i64(oh_count - 1)), i64(oh_count))
        src = b.mul(plane, i64(h * w))
        dst = b.mul(b.add(b.mul(plane, i64(oh_count)), i), i64(ow_count))
        if ow_count == 1:
            total = _run_sum(b, k, b.add(src, b.mul(hs, i64(w))), b.mul(b.sub(he, hs), i64(w)), dtype)
            count = b.mul(b.sub(he, hs), i64(w))
            store(b, b.fdiv(total, b.sitofp(count, total.type)), k.outs[0], dst, dtype)
        else:
            with for_range(b, 0, ow_count, name="j") as j:
                ws = b.udiv(b.mul(j, i64(w)), i64(ow_count))
                we = b.udiv(b.add(b.mul(b.add(j, i64(1)), i64(w)), i64(ow_count - 1)), i64(ow_count))
                acc = alloca(b, constant(dtype, 0).type)
                b.store(constant(dtype, 0), acc)
                with for_range(b, hs, he, name="bh") as r:
                    row = b.add(src, b.mul(r, i64(w)))
                    part = _run_sum(b, k, b.add(row, ws), b.sub(we, ws), dtype)
                    b.store(b.fadd(b.load(acc, typ=part.type), part), acc)
                count = b.mul(b.sub(he, hs), b.sub(we, ws))
                total = b.load(acc, typ=constant(dtype, 0).type)
                store(b, b.fdiv(total, b.sitofp(count, total.type)), k.outs[0], b.add(dst, j), dtype)
    return k.finish(node.op)


def _run_sum(b: ir.IRBuilder, k: Kernel, start: ir.Value, count: ir.Value, dtype: DType) -> ir.Value:
    """The sum of `count` contiguous elements from start: W-lane partial sums folded at the end."""
    reducer = Reducer("sum", dtype)
    wide = alloca(b, reducer.init(k.width)[0].type)
    narrow = alloca(b, reducer.init(1)[0].type)
    b.store(reducer.init(k.width)[0], wide)
    b.store(reducer.init(1)[0], narrow)

    def body(i: ir.Value, lanes: int) -> None:
        cell = wide if lanes > 1 else narrow
        value = load(b, k.ins[0], b.add(start, i), dtype, lanes)
        b.store(b.fadd(b.load(cell, typ=value.type), value), cell)
    vector_loop(b, 0, count, k.width, body, name="s")
    folded = reducer.horizontal(b, (b.load(wide, typ=reducer.init(k.width)[0].type),))
    return b.fadd(folded[0], b.load(narrow, typ=reducer.init(1)[0].type))


__all__ = ["lower_adaptive_avg_pool2d", "lower_avg_pool2d", "lower_max_pool2d"]
