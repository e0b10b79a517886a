"""dropout with the counter-based hash of ir/ops/random.py, evaluated per element in vector registers.

Element i is kept when hash32(i, seed) >= floor(p * 2^32) (MurmurHash3_x86_32 of the words seed_lo, seed_hi, i;
the constants below are the ones ir/ops/random.py defines), so the mask is bit-identical to the reference's in any
order and on any thread. The two seed mixes are computed once per call. Kept elements are multiplied by
1/(1 - p) and dropped ones by 0 (a multiply, so NaN stays NaN); with the training flag false, or p = 0, the
result is a copy of x.
"""
from __future__ import annotations

import llvmlite.ir as ir

from braze.ir.graph import Node
from braze.ir.ops.random import _C1, _C2, _FMIX1, _FMIX2, _MESSAGE_BYTES, _MIX_ADD, keep_threshold
from braze.ir.types import bool_, int64

from ..loops import I32, i64, vector_loop, vector_const
from .base import KernelContext, KernelSpec, begin_kernel, constant, iota, load, register, store, thread_share, widen

CHUNK = 4096


def _u32(value: ir.Value, number: int) -> ir.Constant:
    typ = value.type
    scalar = ir.Constant(I32, int(number) - (1 << 32) if int(number) >= 1 << 31 else int(number))
    return vector_const(typ, scalar) if isinstance(typ, ir.VectorType) else scalar


def _rotl(b: ir.IRBuilder, x: ir.Value, r: int) -> ir.Value:
    return b.or_(b.shl(x, _u32(x, r)), b.lshr(x, _u32(x, 32 - r)))


def _mix(b: ir.IRBuilder, h: ir.Value, word: ir.Value) -> ir.Value:
    word = b.mul(_rotl(b, b.mul(word, _u32(word, _C1)), 15), _u32(word, _C2))
    return b.add(b.mul(_rotl(b, b.xor(h, word), 13), _u32(h, 5)), _u32(h, _MIX_ADD))


def _fmix(b: ir.IRBuilder, h: ir.Value) -> ir.Value:
    h = b.xor(h, b.lshr(h, _u32(h, 16)))
    h = b.mul(h, _u32(h, _FMIX1))
    h = b.xor(h, b.lshr(h, _u32(h, 13)))
    h = b.mul(h, _u32(h, _FMIX2))
    return b.xor(h, b.lshr(h, _u32(h, 16)))


@register("dropout")
def lower_dropout(node: Node, ctx: KernelContext) -> KernelSpec:
    x, p = node.inputs[0], node.attr["p"]
    dtype, size = x.dtype, x.type.size
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    training = load(b, k.ins[1], 0, bool_)
    seed = load(b, k.ins[2], 0, int64)
    if p == 0.0:
        training = ir.Constant(training.type, 0)
    low, high = b.trunc(seed, I32), b.trunc(b.lshr(seed, i64(32)), I32)
    key = _mix(b, _mix(b, ir.Constant(I32, 0), low), high)
    scale = constant(dtype, 0.0 if p >= 1.0 else 1.0 / (1.0 - p))
    threshold = keep_threshold(p)
    pieces = -(-size // CHUNK)
    first, last = thread_share(b, k.tid, k.nthreads, pieces)
    start = b.mul(first, i64(CHUNK))
    stop = b.mul(last, i64(CHUNK))
    stop = b.select(b.icmp_signed("<", stop, i64(size)), stop, i64(size))

    def body(i: ir.Value, lanes: int) -> None:
        value = load(b, k.ins[0], i, dtype, lanes)
        counter = b.trunc(i, I32)
        if lanes > 1:
            counter = b.add(widen(b, counter, lanes), iota(I32, lanes))
        bits = _fmix(b, b.xor(_mix(b, widen(b, key, lanes), counter), _u32(counter, _MESSAGE_BYTES)))
        keep = b.icmp_unsigned(">=", bits, _u32(bits, threshold))
        factor = b.select(keep, widen(b, scale, lanes), widen(b, constant(dtype, 0.0), lanes))
        result = b.select(widen(b, training, lanes), b.fmul(value, factor), value)
        store(b, result, k.outs[0], i, dtype)
    vector_loop(b, start, stop, k.width, body, name="d")
    return k.finish(node.op)


__all__ = ["lower_dropout"]
