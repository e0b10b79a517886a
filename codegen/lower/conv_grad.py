"""conv2d_grad_weight, conv2d_grad_weight_slices (the partial weight gradients of image slices) and
conv2d_grad_input: float32 on the GEMM (codegen/conv_grad.py), other float dtypes by direct loops that own one
result element each (so any thread split rounds alike)."""
from __future__ import annotations

import llvmlite.ir as ir

from braze.ir.graph import Node
from braze.ir.types import float32

from ..conv import ConvSpec
from ..conv_grad import (emit_conv2d_grad_input, emit_conv2d_grad_weight, grad_input_scratch_bytes,
                         grad_weight_scratch_bytes)
from ..gemm import tiling_for
from ..loops import alloca, for_range, i64
from .base import KernelContext, KernelSpec, begin_kernel, claim_words, claimed_unit_loop, constant, load, register, \
    store


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
        return (_direct_grad_weight if weight else _direct_grad_input)(node, ctx, spec)
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


def _direct_kernel(node: Node, ctx: KernelContext, s: ConvSpec):
    """The kernel of a direct-loop gradient, its dtype, the output's (OH, OW) and (channels, output channels) per
    group."""
    k = begin_kernel(ctx, node.outputs, node.inputs)
    return k, node.out.dtype, s.out_shape[2:], (s.c // s.groups, s.c_out // s.groups)


def _tap(b: ir.IRBuilder, out: ir.Value, tap: ir.Value, stride: int, padding: int, dilation: int) -> ir.Value:
    """The input coordinate an output coordinate's tap reads (may lie in the padding: negative or past the end)."""
    return b.add(b.sub(b.mul(out, i64(stride)), i64(padding)), b.mul(tap, i64(dilation)))


def _direct_grad_weight(node: Node, ctx: KernelContext, s: ConvSpec) -> KernelSpec:
    """dw[slice, co, ci, i, j] = sum over the slice's images and the output positions of x at the tap times g, one
    weight per unit."""
    k, dtype, (oh_count, ow_count), (cg, per_group) = _direct_kernel(node, ctx, s)
    b, (x, g) = k.builder, k.ins
    slices = _slices(node)
    per = s.n // slices
    with claimed_unit_loop(k, [slices, s.c_out, cg, s.kh, s.kw], name="weight") as (part, co, ci, i, j):
        channel = b.add(b.mul(b.udiv(co, i64(per_group)), i64(cg)), ci)
        acc = alloca(b, constant(dtype, 0).type)
        b.store(constant(dtype, 0), acc)
        first = b.mul(part, i64(per))
        with for_range(b, first, b.add(first, i64(per)), name="n") as n, for_range(b, 0, oh_count, name="oh") as oh, \
                for_range(b, 0, ow_count, name="ow") as ow:
            ih = _tap(b, oh, i, s.stride[0], s.padding[0], s.dilation[0])
            iw = _tap(b, ow, j, s.stride[1], s.padding[1], s.dilation[1])
            inside = b.and_(b.icmp_unsigned("<", ih, i64(s.h)), b.icmp_unsigned("<", iw, i64(s.w)))
            at = b.add(b.mul(b.add(b.mul(n, i64(s.c)), channel), i64(s.h * s.w)), b.add(b.mul(ih, i64(s.w)), iw))
            value = b.select(inside, load(b, x, b.select(inside, at, i64(0)), dtype), constant(dtype, 0))
            grad_at = b.add(b.mul(b.add(b.mul(n, i64(s.c_out)), co), i64(oh_count * ow_count)),
                            b.add(b.mul(oh, i64(ow_count)), ow))
            product = b.fmul(value, load(b, g, grad_at, dtype))
            b.store(b.fadd(b.load(acc, typ=product.type), product), acc)
        index = b.add(b.mul(b.add(b.mul(b.add(b.mul(part, i64(s.c_out)), co), i64(cg)), ci), i64(s.kh * s.kw)),
                      b.add(b.mul(i, i64(s.kw)), j))
        store(b, b.load(acc, typ=constant(dtype, 0).type), k.outs[0], index, dtype)
    return k.finish(node.op)


def _source(b: ir.IRBuilder, position: ir.Value, tap: ir.Value, count: int, stride: int, padding: int,
            dilation: int) -> tuple[ir.Value, ir.Value]:
    """(output coordinate, whether it exists) whose tap reads input coordinate `position`."""
    t = b.sub(b.add(position, i64(padding)), b.mul(tap, i64(dilation)))
    out = b.sdiv(t, i64(stride))
    ok = b.and_(b.icmp_signed(">=", t, i64(0)), b.icmp_signed("==", b.srem(t, i64(stride)), i64(0)))
    return out, b.and_(ok, b.icmp_signed("<", out, i64(count)))


def _direct_grad_input(node: Node, ctx: KernelContext, s: ConvSpec) -> KernelSpec:
    """dx[n, c, ih, iw] = sum over the group's output channels and the taps reading it of g times w, one input
    element per unit."""
    k, dtype, (oh_count, ow_count), (cg, per_group) = _direct_kernel(node, ctx, s)
    b, (g, w) = k.builder, k.ins
    zero = constant(dtype, 0)
    with claimed_unit_loop(k, [s.n, s.c, s.h, s.w], name="element") as (n, c, ih, iw):
        group, ci = b.udiv(c, i64(cg)), b.urem(c, i64(cg))
        acc = alloca(b, zero.type)
        b.store(zero, acc)
        with for_range(b, 0, per_group, name="co") as m, for_range(b, 0, s.kh, name="i") as i, \
                for_range(b, 0, s.kw, name="j") as j:
            co = b.add(b.mul(group, i64(per_group)), m)
            oh, row_ok = _source(b, ih, i, oh_count, s.stride[0], s.padding[0], s.dilation[0])
            ow, col_ok = _source(b, iw, j, ow_count, s.stride[1], s.padding[1], s.dilation[1])
            inside = b.and_(row_ok, col_ok)
            at = b.add(b.mul(b.add(b.mul(n, i64(s.c_out)), co), i64(oh_count * ow_count)),
                       b.add(b.mul(oh, i64(ow_count)), ow))
            grad = b.select(inside, load(b, g, b.select(inside, at, i64(0)), dtype), zero)
            weight_at = b.add(b.mul(b.add(b.mul(co, i64(cg)), ci), i64(s.kh * s.kw)), b.add(b.mul(i, i64(s.kw)), j))
            product = b.fmul(grad, load(b, w, weight_at, dtype))
            b.store(b.fadd(b.load(acc, typ=zero.type), product), acc)
        index = b.add(b.mul(b.add(b.mul(n, i64(s.c)), c), i64(s.h * s.w)), b.add(b.mul(ih, i64(s.w)), iw))
        store(b, b.load(acc, typ=zero.type), k.outs[0], index, dtype)
    return k.finish(node.op)
