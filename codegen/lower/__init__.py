"""braze.codegen.lower: one lowering per op, registered by op name; each emits one kernel function.

`lower_node(node, ctx)` emits the kernel of a top-level node (a plain op or a fused region) into ctx.module and
returns its KernelSpec; `lowered_ops()` names every op that has a lowering. The kernel ABI, KernelContext and
KernelSpec are described in base.py; the accuracy each lowering promises is in accuracy.py.
"""
from __future__ import annotations

from braze.ir.graph import Node
from braze.ir.registry import is_op

from . import (attention, conv_grad, elementwise, fused, indexing, linalg, movement, norm, pool,  # noqa: F401
               pool_grad, quant_gemm, quant_matmul, random, reduction, reparam, scan, scatter)  # (registering)
from .base import LOWERINGS, KernelContext, KernelSpec, unsupported


def lowered_ops() -> frozenset[str]:
    """The names of every op with a lowering."""
    return frozenset(LOWERINGS)


def lower_node(node: Node, ctx: KernelContext) -> KernelSpec:
    """Emit the kernel of `node` into ctx.module; raises CodegenError (naming the op and where the node came from)
    when the op has no lowering or the lowering cannot handle these operands."""
    lowering = LOWERINGS.get(node.op)
    if lowering is None:
        why = "no lowering is registered for this op" if is_op(node.op) else "it is not a registered op"
        raise unsupported(node, why)
    return lowering(node, ctx)


__all__ = ["KernelContext", "KernelSpec", "lower_node", "lowered_ops"]
