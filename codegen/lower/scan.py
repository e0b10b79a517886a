"""Ops along the lines of one axis: running sums and products (cumsum, cumprod: out[j] = out[j - 1] op x[j] in index
order, as numpy computes them, so float results round identically) and sort (by ranking). The (outer, inner) lines
are the units threads split."""
from __future__ import annotations

from math import prod

import llvmlite.ir as ir

from braze.ir.graph import Node
from braze.ir.ops._common import normalize_axis
from braze.ir.types import DType

from ..loops import I64, alloca, entry_builder, for_range, i64
from .base import KernelContext, KernelSpec, begin_kernel, load, register, store, thread_share, unit_loop
from .elementwise import compare


_COMBINE = {"cumsum": ("fadd", "add"), "cumprod": ("fmul", "mul")}


@register(*_COMBINE)
def lower_scan(node: Node, ctx: KernelContext) -> KernelSpec:
    x = node.inputs[0]
    shape = x.shape or (1,)
    axis = normalize_axis(node.op, node.attr["axis"], x.type.rank) if x.shape else 0
    combine = _COMBINE[node.op][0 if x.dtype.is_float else 1]
    outer, size, inner = prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    if x.type.size == 0:
        return k.finish(node.op)
    first, last = thread_share(b, k.tid, k.nthreads, outer * inner)
    with unit_loop(b, [outer, inner], first, last, name="line") as (p, q):
        start = b.add(b.mul(p, i64(size * inner)), q)
        store(b, load(b, k.ins[0], start, x.dtype), k.outs[0], start, x.dtype)
        with for_range(b, 1, size, name="j") as j:  # out[j] = out[j - 1] + x[j]
            at = b.add(start, b.mul(j, i64(inner)))
            previous = load(b, k.outs[0], b.sub(at, i64(inner)), x.dtype)
            value = load(b, k.ins[0], at, x.dtype)
            store(b, getattr(b, combine)(previous, value), k.outs[0], at, x.dtype)
    return k.finish(node.op)


def _before(b: ir.IRBuilder, a: ir.Value, c: ir.Value, dtype: DType, descending: bool) -> ir.Value:
    """Whether value a sorts strictly before value c: NaN is the largest value, as in the reference."""
    if not dtype.is_float:
        return compare(b, ">" if descending else "<", a, c, dtype)
    a_nan, c_nan = b.fcmp_unordered("uno", a, a), b.fcmp_unordered("uno", c, c)
    if descending:
        return b.or_(b.fcmp_ordered(">", a, c), b.and_(a_nan, b.not_(c_nan)))
    return b.or_(b.fcmp_ordered("<", a, c), b.and_(c_nan, b.not_(a_nan)))


@register("sort")
def lower_sort(node: Node, ctx: KernelContext) -> KernelSpec:
    """A stable sort by ranking: element i goes to the number of elements that sort before it (earlier ties
    included), so each line of n elements costs n^2 comparisons; lines are the units threads split."""
    x = node.inputs[0]
    shape = x.shape or (1,)
    axis = normalize_axis("sort", node.attr["axis"], x.type.rank) if x.shape else 0
    outer, size, inner = prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])
    descending = node.attr["descending"]
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    if x.type.size == 0:
        return k.finish(node.op)
    rank = alloca(entry_builder(k.fn), I64, name="rank")
    first, last = thread_share(b, k.tid, k.nthreads, outer * inner)
    with unit_loop(b, [outer, inner], first, last, name="line") as (p, q):
        start = b.add(b.mul(p, i64(size * inner)), q)
        with for_range(b, 0, size, name="i") as i:
            value = load(b, k.ins[0], b.add(start, b.mul(i, i64(inner))), x.dtype)
            b.store(i64(0), rank)
            with for_range(b, 0, size, name="j") as j:
                other = load(b, k.ins[0], b.add(start, b.mul(j, i64(inner))), x.dtype)
                tie_first = b.and_(b.icmp_signed("<", j, i), b.not_(_before(b, value, other, x.dtype, descending)))
                earlier = b.or_(_before(b, other, value, x.dtype, descending), tie_first)
                b.store(b.add(b.load(rank), b.zext(earlier, I64)), rank)
            at = b.add(start, b.mul(b.load(rank), i64(inner)))
            store(b, value, k.outs[0], at, x.dtype)
            store(b, i, k.outs[1], at, node.outputs[1].dtype)
    return k.finish(node.op)
