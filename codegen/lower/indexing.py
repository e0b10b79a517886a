"""Indexing: gather (torch.gather), scatter (its functional write), index_select (the embedding lookup), index_add
(its transpose, the embedding's backward) and one_hot.

Index values come from runtime data. Each one is range-checked (codegen/lower/checks.py): an index the reference
rejects is reported through the call's status words, and the runtime raises the reference's error, naming the node.
It is also clamped into [0, dim) before any address is formed, so the call still never reads outside an operand
(one_hot writes a row of zeros for it).
"""
from __future__ import annotations

from math import prod
from typing import Callable

import llvmlite.ir as ir

from braze.ir.graph import Node, Value
from braze.ir.ops._common import normalize_axis
from braze.ir.ops.indexing import axis_subject, classes_subject
from braze.ir.types import DType, bool_

from ..loops import I64, for_range, i64, vector_loop
from .base import (Kernel, KernelContext, KernelSpec, begin_kernel, claimed_unit_loop, constant, contiguous_strides,
                   iota, load, offset_of, register, store, thread_share, unit_loop, widen)
from .checks import IndexCheck, index_check
from .elementwise import ELEMENTWISE
from .lookup import dense_gather_lookup
from .nest import Operand, elementwise_nest


def check_every_index(k: Kernel, check: IndexCheck, position: int, count: int, dtype: DType) -> None:
    """Only the range check of all `count` indices (one thread), for a kernel that has nothing to read or write but
    whose reference still rejects a bad index: an empty result, or an indexed axis of size 0, where every access
    would fall outside the operand."""
    b = k.builder
    first, last = thread_share(b, k.tid, k.nthreads, 1 if count else 0)
    with for_range(b, first, last, name="once"):
        with for_range(b, 0, count, name="i") as i:
            check.index(load(b, k.ins[position], i, dtype))
    check.finish()


def for_each_index(k: Kernel, x_shape: tuple[int, ...], indices: Value, axis: int, first: ir.Value, last: ir.Value,
                   check: IndexCheck, visit: Callable[[ir.Value, ir.Value], None]) -> None:
    """For the index positions in rows [first, last) of `indices` (operand 1): visit(at, target), `at` the position
    in indices (and in any operand of their shape), `target` the offset in x of that position with its coordinate
    along `axis` replaced by the index, range-checked and clamped by `check`."""
    b, shape = k.builder, indices.shape
    xs = contiguous_strides(x_shape)
    own = [0 if d == axis else s for d, s in enumerate(xs)]
    with unit_loop(b, list(shape[:-1]), first, last, name="row") as index:
        x_row = offset_of(b, index, own[:-1])
        i_row = offset_of(b, index, contiguous_strides(shape)[:-1])
        with for_range(b, 0, shape[-1], name="j") as j:
            at = b.add(i_row, j)
            chosen = check.index(load(b, k.ins[1], at, indices.dtype))
            visit(at, b.add(b.add(x_row, b.mul(j, i64(own[-1]))), b.mul(chosen, i64(xs[axis]))))


@register("gather")
def lower_gather(node: Node, ctx: KernelContext) -> KernelSpec:
    """out[c] = x[c with c[axis] replaced by indices[c]]: the elementwise nest over the indices with one lookup
    (lookup.py), a vector gather per lane group."""
    x, indices, out = node.inputs[0], node.inputs[1], node.out
    axis = normalize_axis("gather", node.attr["axis"], x.type.rank)
    k = begin_kernel(ctx, node.outputs, node.inputs)
    if out.type.size == 0:
        return k.finish(node.op)
    lookup = dense_gather_lookup(k, node)
    if x.shape[axis] == 0:
        check_every_index(k, lookup.check, 1, indices.type.size, indices.dtype)
        return k.finish(node.op)
    elementwise_nest(k, out.shape, [Operand(k.ins[1], indices.type)], [Operand(k.outs[0], out.type)],
                     lambda b, values, lanes: [lookup.emit(b, values[1], values[0], lanes)], [lookup.table])
    lookup.check.finish()
    return k.finish(node.op)


@register("scatter")
def lower_scatter(node: Node, ctx: KernelContext) -> KernelSpec:
    """out = x, then out[c with c[axis] replaced by indices[c]] = src[c] in index order, so the last write to a
    repeated position wins as in the reference; one thread does both passes, since writes may collide."""
    x, indices, src = node.inputs
    axis = normalize_axis("scatter", node.attr["axis"], x.type.rank)
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    if x.type.size == 0:
        return k.finish(node.op)
    check = index_check(k, node, 1, x.shape[axis], axis_subject(node.attr["axis"]))
    first, last = thread_share(b, k.tid, k.nthreads, 1)
    with for_range(b, first, last, name="once"):
        vector_loop(b, 0, x.type.size, k.width, lambda q, lanes: store(
            b, load(b, k.ins[0], q, x.dtype, lanes), k.outs[0], q, x.dtype), name="copy")
        if indices.type.size:
            for_each_index(k, x.shape, indices, axis, i64(0), i64(prod(indices.shape[:-1])), check,
                           lambda at, dst: store(b, load(b, k.ins[2], at, x.dtype), k.outs[0], dst, x.dtype))
    check.finish()
    return k.finish(node.op)


@register("index_select")
def lower_index_select(node: Node, ctx: KernelContext) -> KernelSpec:
    """out[p, i, q] = x[p, indices[i], q]: one contiguous copy of the q block per (p, i); along the last axis (one
    element per index) each unit is a row p, the indices one loop, which left per (p, i) paid a unit's overhead per
    element: reflect padding 5x and nearest upsampling (both index_select along the last two axes) 4.9x slower."""
    x, indices = node.inputs
    axis = normalize_axis("index_select", node.attr["axis"], x.type.rank)
    outer, size, inner = prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1:])
    count = indices.type.size
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    if node.out.type.size == 0:
        return k.finish(node.op)
    check = index_check(k, node, 1, size, axis_subject(node.attr["axis"]))
    if size == 0:
        check_every_index(k, check, 1, count, indices.dtype)
        return k.finish(node.op)
    if inner == 1:   # selecting along the last axis: one element per index, a row of them per unit
        with claimed_unit_loop(k, [outer], name="row") as (p,):
            src, dst = b.mul(p, i64(size)), b.mul(p, i64(count))
            with for_range(b, 0, count, name="i") as i:
                chosen = check.index(load(b, k.ins[1], i, indices.dtype))
                store(b, load(b, k.ins[0], b.add(src, chosen), x.dtype), k.outs[0], b.add(dst, i), x.dtype)
        check.finish()
        return k.finish(node.op)
    with claimed_unit_loop(k, [outer, count], name="sel") as (p, i):
        chosen = check.index(load(b, k.ins[1], i, indices.dtype))
        src = b.mul(b.add(b.mul(p, i64(size)), chosen), i64(inner))
        dst = b.mul(b.add(b.mul(p, i64(count)), i), i64(inner))
        vector_loop(b, 0, inner, k.width, lambda q, lanes: store(
            b, load(b, k.ins[0], b.add(src, q), x.dtype, lanes), k.outs[0], b.add(dst, q), x.dtype), name="q")
    check.finish()
    return k.finish(node.op)


@register("index_add")
def lower_index_add(node: Node, ctx: KernelContext) -> KernelSpec:
    """out[p, indices[i], q] += g[p, i, q] over the base (or zeros), i in index order: each element sums its terms
    in the order of the reference's np.add.at, so results are bit-exact whatever the thread count. The thread units
    are (p, block of q columns), disjoint in the result, so repeated indices never collide across threads."""
    g, indices, out = node.inputs[0], node.inputs[1], node.out
    based = len(node.inputs) == 3
    shape = node.attr["shape"]
    axis = normalize_axis("index_add", node.attr["axis"], len(shape))
    outer, size, inner = prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])
    count, dtype = indices.type.size, out.dtype
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    check = index_check(k, node, 1, size, axis_subject(node.attr["axis"]))
    if out.type.size == 0:
        check_every_index(k, check, 1, count, indices.dtype)
        return k.finish(node.op)
    columns = 8 * k.width
    blocks = -(-inner // columns)
    with claimed_unit_loop(k, [outer, blocks], name="col") as (p, block):
        q0 = b.mul(block, i64(columns))
        end = b.add(q0, i64(columns))
        q1 = b.select(b.icmp_signed("<", end, i64(inner)), end, i64(inner))
        out_base, g_base = b.mul(p, i64(size * inner)), b.mul(p, i64(count * inner))
        with for_range(b, 0, size, name="row") as r:
            row = b.add(out_base, b.mul(r, i64(inner)))
            vector_loop(b, q0, q1, k.width, lambda q, lanes: store(
                b, load(b, k.ins[2], b.add(row, q), dtype, lanes) if based else constant(dtype, 0, lanes),
                k.outs[0], b.add(row, q), dtype), name="start")
        with for_range(b, 0, count, name="i") as i:
            dst = b.add(out_base, b.mul(check.index(load(b, k.ins[1], i, indices.dtype)), i64(inner)))
            src = b.add(g_base, b.mul(i, i64(inner)))

            def add(q: ir.Value, lanes: int) -> None:
                total = ELEMENTWISE["add"](b, [load(b, k.outs[0], b.add(dst, q), dtype, lanes),
                                               load(b, k.ins[0], b.add(src, q), g.dtype, lanes)], {}, dtype)
                store(b, total, k.outs[0], b.add(dst, q), dtype)
            vector_loop(b, q0, q1, k.width, add, name="q")
    check.finish()
    return k.finish(node.op)


@register("one_hot")
def lower_one_hot(node: Node, ctx: KernelContext) -> KernelSpec:
    """Row r of the result is (c == indices[r]) for every class c, cast to the result dtype; an index outside
    [0, num_classes) is reported and gives a row of zeros."""
    indices, out = node.inputs[0], node.out
    classes = node.attr["num_classes"]
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    rows = indices.type.size
    check = index_check(k, node, 0, classes, classes_subject(classes))
    first, last = thread_share(b, k.tid, k.nthreads, rows)
    with for_range(b, first, last, name="r") as r:
        raw = load(b, k.ins[0], r, indices.dtype)
        check.index(raw)
        chosen = b.sext(raw, I64) if raw.type != I64 else raw
        base = b.mul(r, i64(classes))

        def body(c: ir.Value, lanes: int) -> None:
            column = b.add(widen(b, c, lanes), iota(I64, lanes)) if lanes > 1 else c
            hit = b.icmp_signed("==", column, widen(b, chosen, lanes))
            value = ELEMENTWISE["cast"](b, [hit], {"dtype": out.dtype}, bool_)
            store(b, value, k.outs[0], b.add(base, c), out.dtype)
        vector_loop(b, 0, classes, k.width, body, name="c")
    check.finish()
    return k.finish(node.op)
