"""Fusion regions: one kernel per `fused` node, by kind.

- elementwise: the elementwise nest over the region's stated shape with the body evaluated per lane group;
- reduction: the row engine over the region's stated domain (shape and reduced axes);
- gemm / conv: the GEMM or conv kernel with the rest of the body as its epilogue;
- attention: the attention kernel reading its operands and writing its result through the body's view ops;
- movement: the strided copies of its last op (a join or a view op) reading through the body's view ops.

A region those kernels cannot run as one nest (a body mixing per-row values and elements in a way the row engine
does not follow, an epilogue operand that is not linear in conv's output position, an anchor that is not float32)
is lowered op by op instead, always correctly: every body node gets its own kernel, temporaries and the results
live in scratch, scalar constants in module constants, and thread 0 runs the kernels in order (single-threaded,
since there is no barrier between them) before copying the results out, so the results never overwrite an
operand while it is still being read.
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from braze.ir.graph import Graph, Node, Value

from ..loops import I8, i64
from .base import (LOWERINGS, KernelContext, KernelSpec, Unfusable, begin_kernel, memory_type, register, round_up,
                   unsupported)
from .attention import lower_attention_region
from .elementwise import lower_body
from .linalg import lower_anchored
from .movement import lower_movement_region
from .reduction import lower_rows

@register("fused")
def lower_fused(node: Node, ctx: KernelContext) -> KernelSpec:
    kind, body = node.attr["kind"], node.attr["body"]
    try:
        if kind == "elementwise":
            return lower_body(ctx, node, body, "fused")
        if kind == "reduction":
            return lower_rows(node, ctx, body, (node.attr["shape"], node.attr["axes"]), "fused")
        if kind == "attention":
            return lower_attention_region(node, ctx, body)
        if kind == "movement":
            return lower_movement_region(node, ctx, body)
        return lower_anchored(node, ctx, body)
    except Unfusable:
        return lower_op_by_op(node, ctx)


def _constant(ctx: KernelContext, name: str, node: Node) -> ir.GlobalVariable:
    """A body constant as a module constant in its memory layout."""
    array = np.ascontiguousarray(node.attr["value"].array).reshape(-1)
    element = memory_type(node.out.dtype)
    typ = ir.ArrayType(element, max(array.size, 1))
    values = [float(v) for v in array] if node.out.dtype.is_float else [int(v) for v in array.astype(np.int64)]
    if node.out.dtype.name == "u8":
        values = [v - 256 if v >= 128 else v for v in values]
    glob = ir.GlobalVariable(ctx.module, typ, name=name)
    glob.linkage = "internal"
    glob.global_constant = True
    glob.align = 64
    glob.initializer = ir.Constant(typ, [ir.Constant(element, v) for v in values] or [ir.Constant(element, 0)])
    return glob


def lower_op_by_op(node: Node, ctx: KernelContext) -> KernelSpec:
    """The always-correct region kernel: the body's nodes as kernels of their own, run by thread 0."""
    body: Graph = node.attr["body"]
    kernels: list[tuple[Node, KernelSpec]] = []
    for index, inner in enumerate(body.nodes):
        if inner.op == "constant":
            continue
        if inner.op not in LOWERINGS or inner.op == "fused":
            raise unsupported(inner, "no lowering is registered for this op inside a region")
        kernels.append((inner, LOWERINGS[inner.op](inner, ctx.sub(f"op{index}"))))
    offsets: dict[str, int] = {}
    end = 0
    for inner in body.nodes:
        if inner.op == "constant":
            continue
        for v in inner.outputs:
            offsets[v.name] = end
            end = round_up(end + v.type.nbytes)
    inner_scratch = max((spec.scratch_bytes for _, spec in kernels), default=0)
    k = begin_kernel(ctx, node.outputs, node.inputs, noalias=False)
    b = k.builder
    where: dict[str, ir.Value] = {v.name: p for v, p in zip(body.inputs, k.ins)}
    for index, inner in enumerate(body.nodes):
        if inner.op == "constant":
            where[inner.out.name] = _constant(ctx, f"{ctx.name}.const{index}", inner)
    for name, offset in offsets.items():
        where[name] = b.gep(k.scratch, [i64(offset)], source_etype=I8)
    first = b.icmp_signed("==", k.tid, i64(0))
    with b.if_then(first):
        sub_scratch = b.gep(k.scratch, [i64(end)], source_etype=I8)
        for inner, spec in kernels:
            b.call(spec.function, [where[v.name] for v in inner.outputs + inner.inputs] +
                   [sub_scratch, i64(0), i64(1), k.status])
        for v, out in zip(body.outputs, k.outs):
            _copy(b, where[v.name], out, v)
    shared = max((spec.shared_bytes for _, spec in kernels), default=0)
    return k.finish(node.op, end + inner_scratch, shared_bytes=shared)


def _copy(b: ir.IRBuilder, src: ir.Value, dst: ir.Value, value: Value) -> None:
    if value.type.nbytes == 0:
        return
    module = b.module
    memcpy = module.globals.get("llvm.memcpy.p0.p0.i64") or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [src.type, src.type, ir.IntType(64), ir.IntType(1)]),
        "llvm.memcpy.p0.p0.i64")
    b.call(memcpy, [dst, src, i64(value.type.nbytes), ir.Constant(ir.IntType(1), 0)])


__all__ = ["lower_fused", "lower_op_by_op"]
