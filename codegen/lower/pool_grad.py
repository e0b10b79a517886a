"""The backward ops of pooling: max_pool2d_select, max_pool2d_grad and avg_pool2d_grad (ir/ops/pool.py).

Every window finds its first maximum the reference's way: taps in the padding or past a ceil-mode edge count as
-inf (and win only as the window's first tap, when nothing real beats them), a NaN wins over any number and the
first NaN stays. max_pool2d_select reads v there (0 for a padding tap) with output rows as the thread units.
The two gradients add into overlapping windows, so a thread owns whole planes and walks their windows in
row-major order: max_pool2d_grad adds each output gradient at its maximum (in the result dtype; the reference sums
in float64), avg_pool2d_grad spreads g / divisor over the window's real taps.
"""
from __future__ import annotations

from contextlib import contextmanager
from math import prod
from typing import Iterator

import llvmlite.ir as ir

from braze.ir.graph import Node
from braze.ir.types import DType

from ..loops import I1, I64, alloca, for_range, i64, vector_loop
from .base import (Kernel, KernelContext, KernelSpec, begin_kernel, claimed_unit_loop, constant, load, register, store,
                   thread_share)
from .pool import divisor


def _geometry(node: Node) -> tuple[tuple[int, int], ...]:
    attrs = node.attr
    return attrs["kernel_size"], attrs["stride"], attrs["padding"], attrs.get("dilation", (1, 1))


def _window_argmax(b: ir.IRBuilder, k: Kernel, node: Node, plane: ir.Value, oh: ir.Value, ow: ir.Value) -> ir.Value:
    """The plane offset of the first maximum of x (operand 1) over window (oh, ow), or -1 for a padding tap."""
    x = node.inputs[1]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = _geometry(node)
    h, w = x.shape[-2:]
    dtype = x.dtype
    best_value = alloca(b, constant(dtype, 0).type, name="best")
    best_at, none_yet = alloca(b, I64, name="best.at"), alloca(b, I1, name="none")
    b.store(constant(dtype, float("-inf")), best_value)
    b.store(i64(-1), best_at)
    b.store(ir.Constant(I1, 1), none_yet)
    src = b.mul(plane, i64(h * w))
    with for_range(b, 0, kh, name="kh") as i:
        ih = b.add(b.sub(b.mul(oh, i64(sh)), i64(ph)), b.mul(i, i64(dh)))
        with for_range(b, 0, kw, name="kw") as j:
            iw = b.add(b.sub(b.mul(ow, i64(sw)), i64(pw)), b.mul(j, i64(dw)))
            inside = b.and_(b.icmp_unsigned("<", ih, i64(h)), b.icmp_unsigned("<", iw, i64(w)))
            at = b.add(b.mul(ih, i64(w)), iw)
            value = b.select(inside, load(b, k.ins[1], b.add(src, b.select(inside, at, i64(0))), dtype),
                             constant(dtype, float("-inf")))
            best = b.load(best_value, typ=value.type)
            nan_first = b.and_(b.fcmp_unordered("uno", value, value), b.fcmp_ordered("ord", best, best))
            take = b.or_(b.load(none_yet, typ=I1), b.or_(b.fcmp_ordered(">", value, best), nan_first))
            b.store(b.select(take, value, best), best_value)
            b.store(b.select(take, b.select(inside, at, i64(-1)), b.load(best_at, typ=I64)), best_at)
            b.store(ir.Constant(I1, 0), none_yet)
    return b.load(best_at, typ=I64)


@register("max_pool2d_select")
def lower_max_pool2d_select(node: Node, ctx: KernelContext) -> KernelSpec:
    """out[p, oh, ow] = v[p] at the first maximum of x[p] in window (oh, ow); output rows are the units."""
    v, out = node.inputs[0], node.out
    h, w = v.shape[-2:]
    oh_count, ow_count = out.shape[-2:]
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    with claimed_unit_loop(k, [prod(out.shape[:-2]), oh_count], name="row") as (plane, oh):
        dst = b.mul(b.add(b.mul(plane, i64(oh_count)), oh), i64(ow_count))
        with for_range(b, 0, ow_count, name="ow") as ow:
            at = _window_argmax(b, k, node, plane, oh, ow)
            real = b.icmp_signed(">=", at, i64(0))
            value = load(b, k.ins[0], b.add(b.mul(plane, i64(h * w)), b.select(real, at, i64(0))), v.dtype)
            store(b, b.select(real, value, constant(v.dtype, 0.0)), k.outs[0], b.add(dst, ow), v.dtype)
    return k.finish(node.op)


@contextmanager
def _each_window(node: Node, k: Kernel) -> Iterator[tuple[ir.Value, ir.Value, ir.Value, ir.Value]]:
    """Zero the result planes this thread owns, then loop over their windows in row-major order, yielding
    (plane, oh, ow, the window's gradient g[plane, oh, ow])."""
    b, g, out = k.builder, node.inputs[0], node.out
    oh_count, ow_count = g.shape[-2:]
    size = prod(out.shape[-2:])
    first, last = thread_share(b, k.tid, k.nthreads, prod(out.shape[:-2]))
    vector_loop(b, b.mul(first, i64(size)), b.mul(last, i64(size)), k.width, lambda q, lanes: store(
        b, constant(g.dtype, 0.0, lanes), k.outs[0], q, g.dtype), name="zero")
    with for_range(b, first, last, name="plane") as plane:
        with for_range(b, 0, oh_count, name="oh") as oh:
            with for_range(b, 0, ow_count, name="ow") as ow:
                at = b.add(b.mul(b.add(b.mul(plane, i64(oh_count)), oh), i64(ow_count)), ow)
                yield plane, oh, ow, load(b, k.ins[0], at, g.dtype)


def _add_at(k: Kernel, at: ir.Value, value: ir.Value, dtype: DType) -> None:
    """out[at] += value."""
    b = k.builder
    store(b, b.fadd(load(b, k.outs[0], at, dtype), value), k.outs[0], at, dtype)


@register("max_pool2d_grad")
def lower_max_pool2d_grad(node: Node, ctx: KernelContext) -> KernelSpec:
    """out[p] = 0, then g[p, oh, ow] added at the first maximum of x[p] in each window, windows in row-major order."""
    h, w = node.out.shape[-2:]
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    with _each_window(node, k) as (plane, oh, ow, grad):
        at = _window_argmax(b, k, node, plane, oh, ow)
        with b.if_then(b.icmp_signed(">=", at, i64(0))):
            _add_at(k, b.add(b.mul(plane, i64(h * w)), at), grad, node.out.dtype)
    return k.finish(node.op)


@register("avg_pool2d_grad")
def lower_avg_pool2d_grad(node: Node, ctx: KernelContext) -> KernelSpec:
    """out[p] = 0, then g[p, oh, ow] / divisor added at every real tap of each window."""
    (kh, kw), (sh, sw), (ph, pw), _ = _geometry(node)
    include = node.attr["count_include_pad"]
    h, w = node.out.shape[-2:]
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    with _each_window(node, k) as (plane, oh, ow, grad):
        ih0, iw0 = b.sub(b.mul(oh, i64(sh)), i64(ph)), b.sub(b.mul(ow, i64(sw)), i64(pw))
        count = b.mul(divisor(b, ih0, kh, h, ph, include), divisor(b, iw0, kw, w, pw, include))
        share = b.fdiv(grad, b.sitofp(count, grad.type))
        with for_range(b, 0, kh, name="kh") as i:
            ih = b.add(ih0, i)
            with for_range(b, 0, kw, name="kw") as j:
                iw = b.add(iw0, j)
                inside = b.and_(b.icmp_unsigned("<", ih, i64(h)), b.icmp_unsigned("<", iw, i64(w)))
                with b.if_then(inside):
                    _add_at(k, b.add(b.mul(plane, i64(h * w)), b.add(b.mul(ih, i64(w)), iw)), share, node.out.dtype)
    return k.finish(node.op)


__all__ = ["lower_avg_pool2d_grad", "lower_max_pool2d_grad", "lower_max_pool2d_select"]
