"""Running sums and products (cumsum, cumprod): along each (outer, inner) line of the axis, out[j] = out[j - 1] op
x[j] in index order, as numpy.cumsum and numpy.cumprod compute, so float results round identically; the lines are
the units threads split."""
from __future__ import annotations

from math import prod

from braze.ir.graph import Node
from braze.ir.ops._common import normalize_axis

from ..loops import for_range, i64
from .base import KernelContext, KernelSpec, begin_kernel, load, register, store, thread_share, unit_loop


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
