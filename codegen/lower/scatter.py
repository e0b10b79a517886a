"""scatter_add (the transpose of gather): the base operand (or zeros) of the target shape with each source element
added at its gather position, range-checked like the other indexing kernels (codegen/lower/checks.py).

Two source elements can only meet when they differ in their coordinate along the axis alone, so the thread units are
the target's fibers along the axis: a thread starts its fibers (from the base, or zeros) and adds their source
elements in index order, the reference's order, so the sums are deterministic and bit-exact whatever the thread count.
"""
from __future__ import annotations

import llvmlite.ir as ir

from braze.ir.graph import Node
from braze.ir.ops._common import normalize_axis
from braze.ir.ops.indexing import axis_subject

from ..loops import I1, for_range, i64
from .base import (KernelContext, KernelSpec, begin_kernel, claimed_unit_loop, constant, contiguous_strides, load,
                   offset_of, register, store)
from .checks import index_check


# numpy's add per dtype kind: a bool sum is a logical or.
_ADD = {"float": ir.IRBuilder.fadd, "int": ir.IRBuilder.add, "uint": ir.IRBuilder.add, "bool": ir.IRBuilder.or_}


@register("scatter_add")
def lower_scatter_add(node: Node, ctx: KernelContext) -> KernelSpec:
    """out = base (or zeros), then out[c with c[axis] = indices[c]] += g[c] for every position c of indices, each
    fiber of out in index order."""
    g, indices, out = node.inputs[0], node.inputs[1], node.out
    based = len(node.inputs) == 3
    shape = out.shape
    axis = normalize_axis("scatter_add", node.attr["axis"], len(shape))
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b, dtype = k.builder, g.dtype
    if out.type.size == 0:
        return k.finish(node.op)
    check = index_check(k, node, 1, shape[axis], axis_subject(node.attr["axis"]))
    others = [d for d in range(len(shape)) if d != axis]
    out_strides, in_strides = contiguous_strides(shape), contiguous_strides(indices.shape)
    with claimed_unit_loop(k, [shape[d] for d in others], name="fiber") as coords:
        fiber = offset_of(b, coords, [out_strides[d] for d in others])
        with for_range(b, 0, shape[axis], name="start") as t:
            at = b.add(fiber, b.mul(t, i64(out_strides[axis])))
            store(b, load(b, k.ins[2], at, dtype) if based else constant(dtype, 0.0), k.outs[0], at, dtype)
        covered: ir.Value = ir.Constant(I1, 1)
        for c, d in zip(coords, others):
            if indices.shape[d] < shape[d]:
                covered = b.and_(covered, b.icmp_unsigned("<", c, i64(indices.shape[d])))
        with b.if_then(covered):
            source = offset_of(b, coords, [in_strides[d] for d in others])
            with for_range(b, 0, indices.shape[axis], name="t") as t:
                at = b.add(source, b.mul(t, i64(in_strides[axis])))
                chosen = check.index(load(b, k.ins[1], at, indices.dtype))
                dst = b.add(fiber, b.mul(chosen, i64(out_strides[axis])))
                total = _ADD[dtype.kind](b, load(b, k.outs[0], dst, dtype), load(b, k.ins[0], at, dtype))
                store(b, total, k.outs[0], dst, dtype)
    check.finish()
    return k.finish(node.op)


__all__ = ["lower_scatter_add"]
