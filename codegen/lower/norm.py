"""Normalization: batch_norm at inference as an elementwise nest with the per-channel statistics broadcast along
axis 1 (layer_norm runs on the row engine, reduction.py: mean pass, variance pass, normalizing pass per row)."""
from __future__ import annotations

import llvmlite.ir as ir

from braze.ir.graph import Node
from braze.ir.types import TensorType

from .base import KernelContext, KernelSpec, begin_kernel, constant, register
from .elementwise import ELEMENTWISE
from .nest import Operand, elementwise_nest


@register("batch_norm")
def lower_batch_norm(node: Node, ctx: KernelContext) -> KernelSpec:
    """y = (x - mean[c]) * (weight[c] / sqrt(var[c] + eps)) + bias[c], rounding like the reference step by step;
    the per-channel factor is loop-invariant along a plane, so it is computed once per row of the nest."""
    x = node.inputs[0]
    channel = TensorType((x.shape[1],) + (1,) * (x.type.rank - 2), x.dtype)
    dtype, eps = x.dtype, node.attr["eps"]
    k = begin_kernel(ctx, node.outputs, node.inputs)
    operands = [Operand(k.ins[0], x.type)] + [Operand(p, channel) for p in k.ins[1:]]

    def compute(b: ir.IRBuilder, values, lanes: int) -> list[ir.Value]:
        x_, mean, var, weight, bias = values
        root = ELEMENTWISE["sqrt"](b, [b.fadd(var, constant(dtype, eps, lanes))], {}, dtype)
        return [b.fadd(b.fmul(b.fsub(x_, mean), b.fdiv(weight, root)), bias)]
    elementwise_nest(k, x.shape, operands, [Operand(k.outs[0], node.out.type)], compute)
    return k.finish(node.op)


__all__ = ["lower_batch_norm"]
