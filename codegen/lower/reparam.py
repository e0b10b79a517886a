"""Reparameterizations left in a graph (QLoRA kept unmerged): lora_merge and dequantize.

lora_merge: out[i, :] = base[i, :] + scale * sum_r b[i, r] a[r, :], a row per unit, W columns at a time with the
rank-r sum in registers. dequantize: int8 schemes are an elementwise nest (code times its row's or the tensor's
scale); int4/nf4 decode two 4-bit indices per byte through the 16-entry level table, one scale block per unit.
"""
from __future__ import annotations

from math import prod

import llvmlite.ir as ir

from braze.ir.graph import Node
from braze.ir.ops.reparam import LEVELS
from braze.ir.types import TensorType, float32, int8, uint8

from ..loops import F32, I8, I64, alloca, for_range, i64, vector_loop
from .base import KernelContext, KernelSpec, begin_kernel, constant, load, register, store, thread_share, widen
from .nest import Operand, elementwise_nest


@register("lora_merge")
def lower_lora_merge(node: Node, ctx: KernelContext) -> KernelSpec:
    base, a, bfac = node.inputs
    rows, cols, rank = base.shape[0], prod(base.shape[1:]), a.shape[0]
    dtype = base.dtype
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    scale = constant(dtype, node.attr["scale"])
    first, last = thread_share(b, k.tid, k.nthreads, rows)
    with for_range(b, first, last, name="row") as i:
        row = b.mul(i, i64(cols))

        def body(j: ir.Value, lanes: int) -> None:
            acc = alloca(b, widen(b, constant(dtype, 0), lanes).type)
            b.store(widen(b, constant(dtype, 0), lanes), acc)
            with for_range(b, 0, rank, name="r") as r:
                weight = widen(b, load(b, k.ins[2], b.add(b.mul(i, i64(rank)), r), dtype), lanes)
                term = b.fmul(weight, load(b, k.ins[1], b.add(b.mul(r, i64(cols)), j), dtype, lanes))
                b.store(b.fadd(b.load(acc, typ=term.type), term), acc)
            delta = b.fmul(widen(b, scale, lanes), b.load(acc, typ=widen(b, scale, lanes).type))
            at = b.add(row, j)
            store(b, b.fadd(load(b, k.ins[0], at, dtype, lanes), delta), k.outs[0], at, dtype)
        vector_loop(b, 0, cols, k.width, body, name="c")
    return k.finish(node.op)


@register("dequantize")
def lower_dequantize(node: Node, ctx: KernelContext) -> KernelSpec:
    scheme = node.attr["scheme"]
    shape = node.out.shape
    k = begin_kernel(ctx, node.outputs, node.inputs)
    if scheme in ("int8", "int8-tensor"):
        per_row = scheme == "int8" and len(shape) > 0
        scales = TensorType((shape[0],) + (1,) * (len(shape) - 1) if per_row else (), float32)
        codes = TensorType(shape, int8)
        elementwise_nest(k, shape, [Operand(k.ins[0], codes), Operand(k.ins[1], scales)],
                         [Operand(k.outs[0], node.out.type)],
                         lambda b, values, lanes: [b.fmul(b.sitofp(values[0], values[1].type), values[1])])
    else:
        _nibbles(k, ctx, LEVELS[scheme], node.attr["block_size"], prod(shape))
    return k.finish(node.op)


def _nibbles(k, ctx: KernelContext, levels: tuple[float, ...], block: int, count: int) -> None:
    """value[e] = levels[nibble e] * scales[e // block]; nibble e is the low (even e) or high half of byte e // 2."""
    table = ir.GlobalVariable(ctx.module, ir.ArrayType(F32, len(levels)), name=f"{ctx.name}.levels")
    table.linkage = "internal"
    table.global_constant = True
    table.initializer = ir.Constant(ir.ArrayType(F32, len(levels)), [ir.Constant(F32, v) for v in levels])
    b = k.builder
    blocks = -(-count // block)
    first, last = thread_share(b, k.tid, k.nthreads, blocks)
    with for_range(b, first, last, name="block") as blk:
        scale = load(b, k.ins[1], blk, float32)
        start = b.mul(blk, i64(block))
        end = b.add(start, i64(block))
        end = b.select(b.icmp_signed("<", end, i64(count)), end, i64(count))
        with for_range(b, start, end, name="e") as e:
            byte = load(b, k.ins[0], b.lshr(e, i64(1)), uint8)
            shift = b.trunc(b.shl(b.and_(e, i64(1)), i64(2)), I8)
            index = b.zext(b.and_(b.lshr(byte, shift), ir.Constant(I8, 15)), I64)
            level = b.load(b.gep(table, [i64(0), index], inbounds=True, source_etype=table.value_type), typ=F32)
            store(b, b.fmul(level, scale), k.outs[0], e, float32)


__all__ = ["lower_dequantize", "lower_lora_merge"]
