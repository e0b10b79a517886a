"""conv2d_grad_weight, conv2d_grad_weight_slices (the partial weight gradients of image slices) and
conv2d_grad_input: float32 on the GEMM (codegen/conv_grad.py), float64 on the register tiles of conv_tiled.py."""
from __future__ import annotations

from braze.ir.graph import Node
from braze.ir.types import float32

from ..conv import ConvSpec
from ..conv_grad import (emit_conv2d_grad_input, emit_conv2d_grad_weight, grad_input_scratch_bytes,
                         grad_weight_scratch_bytes)
from ..gemm import tiling_for
from .base import KernelContext, KernelSpec, begin_kernel, claim_words, register
from .conv_tiled import tiled_conv2d_grad_input, tiled_conv2d_grad_weight


def _spec(node: Node) -> ConvSpec:
    """The forward convolution whose gradient `node` computes."""
    attrs = node.attr
    if node.op != "conv2d_grad_input":
        x_shape, w_shape = node.inputs[0].shape, tuple(attrs["weight_shape"])
    else:
        x_shape, w_shape = node.out.shape, node.inputs[1].shape
    n, c, h, w = x_shape
    return ConvSpec(n, c, h, w, w_shape[0], w_shape[2], w_shape[3], attrs["stride"], attrs["padding"],
                    attrs["dilation"], attrs["groups"])


def _slices(node: Node) -> int:
    return node.attr["slices"] if node.op == "conv2d_grad_weight_slices" else 1


@register("conv2d_grad_weight", "conv2d_grad_weight_slices", "conv2d_grad_input")
def lower_conv2d_grad(node: Node, ctx: KernelContext) -> KernelSpec:
    spec, weight = _spec(node), node.op != "conv2d_grad_input"
    if node.out.dtype != float32:
        k = begin_kernel(ctx, node.outputs, node.inputs)
        return tiled_conv2d_grad_weight(node, k, _slices(node)) if weight else tiled_conv2d_grad_input(node, k)
    tiling = tiling_for(ctx.target.vector_width, cpu=ctx.target.cpu)
    k = begin_kernel(ctx, node.outputs, node.inputs)
    if weight:
        scratch = grad_weight_scratch_bytes(spec, tiling, _slices(node))
        fn = emit_conv2d_grad_weight(ctx.module, f"{ctx.name}.grad", spec, tiling, _slices(node))
    else:
        scratch = grad_input_scratch_bytes(spec, tiling)
        fn = emit_conv2d_grad_input(ctx.module, f"{ctx.name}.grad", spec, tiling)
    fn.linkage = "internal"
    k.builder.call(fn, [k.ins[0], k.ins[1], k.outs[0], k.scratch, k.tid, k.nthreads, claim_words(k)])
    return k.finish(node.op, scratch)
