"""Reading packed weights inside a kernel: W[row, k:k+lanes] of a quantized (N, K) matrix as float32 registers,
straight from its codes and scales (the dequantize op's formats, braze.ir.ops.reparam), without a dense copy.

int8 codes are sign-extended and converted; 4-bit codes are two per byte, low nibble first, so a vector of W
elements starting at an even element is W/2 bytes split into nibbles and interleaved (starting at an odd element,
W/2 + 1 bytes from the high nibble on: the parity is static, since rows are decoded from even row indices and
vectors start at multiples of W). The 16 levels are looked up by permutes on x86 (vpermps on two halves of the
table with AVX2, one vpermps on AVX-512) and by a gather from a constant table elsewhere. With AVX2, rows whose
blocks are whole multiples of 32 decode 64 (or a last 32) elements at a time instead (decode_planes): vpshufb looks
up each byte of the float32 levels for 32 indices at once and unpacks rebuild the floats, half the instructions of
the permutes, in an element order the caller matches by permuting x. AVX-512 does the same with its own order
(decode_lane_planes): 32 elements are 16 bytes widened to 16 lanes once, whose low nibbles (the even elements) and
high nibbles (the odd ones) are a vector of indices each, one vpermps apiece: three shuffles for 32 elements where
the interleaved form spent six (interleave, widen and permute per 16): a batch-1 NF4 GEMV of 4096 x 4096 on one
Xeon thread (two 512-bit FMA ports) ran 1.06 ms with the interleaved form, 2.4x the dense kernel's speed, and 0.65
with the planes, 3.8x, as fast as int8's twice the bytes (benchmarks/quantized_gemv.py). Scales: a row's (int8),
the tensor's, a block's (4-bit, one per vector when blocks are whole vectors of whole rows), or per lane.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir
import numpy as np

from braze.ir.ops.reparam import LEVELS
from braze.ir.types import float32, int8, uint8

from ..loops import F32, I1, I8, I32, I64, i64, vec, vector_const, zeros

I16 = ir.IntType(16)
from ..vecmath_emit import permute_lookup
from .base import KernelContext, gather, intrinsic, iota, load, widen


@dataclass(frozen=True)
class PackedWeight:
    """One packed (n, k) weight as a kernel reads it: scheme, block size, shape, pointers and level table."""

    scheme: str
    block: int
    n: int
    k: int
    codes: ir.Value
    scales: ir.Value
    table: ir.GlobalVariable | None
    width: int
    x86: bool
    planes: bool = True  # whether rows may decode as planes (the caller reads x permuted to match: quant_gemm.py)

    @property
    def four_bit(self) -> bool:
        return self.scheme in LEVELS

    @property
    def block_per_vector(self) -> bool:
        """Whether every vector of a row lies in one scale block (blocks of whole vectors, rows of whole blocks)."""
        return self.block % self.width == 0 and self.k % self.block == 0

    @property
    def byte_planes(self) -> bool:
        """Whether rows decode 32 elements at a time by byte shuffles (AVX2, 4-bit, blocks of whole 32s)."""
        return self.planes and self.x86 and self.width == 8 and self.four_bit and self.block % 32 == 0 and \
            self.k % 32 == 0

    @property
    def lane_planes(self) -> bool:
        """Whether rows decode 32 elements at a time as even and odd planes (AVX-512, 4-bit, rows of whole blocks of
        whole 32s)."""
        return self.planes and self.x86 and self.width == 16 and self.four_bit and self.block % 32 == 0 and \
            self.k % self.block == 0

    def parity(self, r: int) -> int:
        """Whether row n0 + r (n0 even) starts at a high nibble: odd rows of an odd row length."""
        return (r & 1) * (self.k & 1) if self.four_bit else 0


def packed_weight(ctx: KernelContext, attrs, codes: ir.Value, scales: ir.Value) -> PackedWeight:
    """The PackedWeight of a quantized_linear node's attributes, its level table emitted into the module."""
    scheme, (n, k) = attrs["scheme"], attrs["shape"]
    table = None
    if scheme in LEVELS:
        typ = ir.ArrayType(F32, 16)
        table = ir.GlobalVariable(ctx.module, typ, name=f"{ctx.name}.levels")
        table.linkage, table.global_constant, table.align = "internal", True, 64
        table.initializer = ir.Constant(typ, [ir.Constant(F32, v) for v in LEVELS[scheme]])
    return PackedWeight(scheme, attrs["block_size"], n, k, codes, scales, table, ctx.target.vector_width,
                        ctx.target.is_x86)


def decode(b: ir.IRBuilder, p: PackedWeight, row: ir.Value, parity: int, k: ir.Value, lanes: int, *,
           scaled: bool = True) -> ir.Value:
    """W[row, k:k+lanes] dequantized (scaled=False: the codes' values before their scale, for a caller applying
    the scale to a sum); a vector (lanes > 1) starts at a multiple of the vector width."""
    e = b.add(b.mul(row, i64(p.k)), k)
    if not p.four_bit:
        values = b.sitofp(load(b, p.codes, e, int8, lanes), vec(lanes))
        return b.fmul(values, widen(b, row_scale(b, p, row), lanes)) if scaled else values
    levels = _levels(b, p, e, parity, lanes) if lanes > 1 else _level(b, p, e)
    return b.fmul(levels, _block_scales(b, p, e, lanes)) if scaled else levels


def plane_order(span: int, width: int = 8) -> tuple[int, ...]:
    """The element of a span (32 or 64 elements from a multiple of the span) in each lane of the vectors
    decode_planes (width 8) or decode_lane_planes (width 16, span 32) returns, vector after vector: x read in this
    order matches them lane for lane."""
    if width == 16:
        return tuple(range(0, span, 2)) + tuple(range(1, span, 2))
    if span == 32:
        return _unpacked(lambda i: 2 * i if i < 16 else 2 * i - 31)
    return _unpacked(lambda i: 2 * i) + _unpacked(lambda i: 2 * i + 1)


def _unpacked(element) -> tuple[int, ...]:
    """The lanes of the four vectors _lookup_planes makes from 32 indices, index i being element(i)'s."""
    return tuple(element(16 * half + 4 * q + t) for q in range(4) for half in (0, 1) for t in range(4))


def decode_planes(b: ir.IRBuilder, p: PackedWeight, row: ir.Value, k: ir.Value, span: int) -> list[ir.Value]:
    """The levels of W[row, k:k+span] (span 32 or 64, k a multiple of it) as span/8 <8 x float> in the order of
    plane_order(span). 32 elements are 16 bytes, whose low and high nibbles make one vector of 32 indices; 64 are
    32 bytes, whose low nibbles and high nibbles are a vector of indices each, without a lane insert."""
    raw = load(b, p.codes, b.lshr(b.add(b.mul(row, i64(p.k)), k), i64(1)), uint8, span // 2)
    low = b.and_(raw, ir.Constant(raw.type, [ir.Constant(I8, 15)] * (span // 2)))
    high = b.lshr(raw, ir.Constant(raw.type, [ir.Constant(I8, 4)] * (span // 2)))
    if span == 32:
        indices = [b.shuffle_vector(low, high, vector_const(ir.VectorType(I32, 32), list(range(32))))]
    else:
        indices = [low, high]
    return [v for index in indices for v in _lookup_planes(b, p, index)]


def decode_lane_planes(b: ir.IRBuilder, p: PackedWeight, row: ir.Value, k: ir.Value) -> list[ir.Value]:
    """The levels of W[row, k:k+32] (k a multiple of 32) as two <16 x float>: the even elements, then the odd ones
    (plane_order(32, 16)). The 16 bytes are widened to i32 lanes once; their low and high nibbles index the
    levels."""
    raw = load(b, p.codes, b.lshr(b.add(b.mul(row, i64(p.k)), k), i64(1)), uint8, 16)
    wide = b.zext(raw, ir.VectorType(I32, 16))
    low = b.and_(wide, vector_const(wide.type, 15))
    high = b.lshr(wide, vector_const(wide.type, 4))
    return [_lookup(b, p, low), _lookup(b, p, high)]


def _lookup_planes(b: ir.IRBuilder, p: PackedWeight, index: ir.Value) -> list[ir.Value]:
    """The levels of 32 indices as four <8 x float>: vpshufb looks up each byte of the float32 levels (a 16-entry
    table per 128-bit lane), and 8 unpacks interleave the four byte planes back into floats."""
    planes = [intrinsic(b, "llvm.x86.avx2.pshuf.b", [_plane(p, byte), index]) for byte in range(4)]
    words = [b.bitcast(_unpack(b, planes[i], planes[i + 1], high_half), ir.VectorType(I16, 16))
             for high_half in (False, True) for i in (0, 2)]
    return [b.bitcast(_unpack(b, words[first], words[first + 1], high_half), ir.VectorType(F32, 8))
            for first in (0, 2) for high_half in (False, True)]


def _plane(p: PackedWeight, byte: int) -> ir.Constant:
    """Byte `byte` of each float32 level, the 16 of them in both 128-bit lanes."""
    bits = np.asarray(LEVELS[p.scheme], dtype=np.float32).view(np.uint32)
    values = [int((v >> (8 * byte)) & 255) for v in bits] * 2
    return vector_const(ir.VectorType(I8, 32), [ir.Constant(I8, v - 256 if v >= 128 else v) for v in values])


def _unpack(b: ir.IRBuilder, a: ir.Value, c: ir.Value, high: bool) -> ir.Value:
    """x86's unpack (lo or hi): per 128-bit lane, the elements of a's and c's low (high) half interleaved."""
    n = a.type.count
    lane, half = n // 2, n // 4
    order = [i for base in (0, lane) for t in range(half * high, half * (high + 1)) for i in (base + t, n + base + t)]
    return b.shuffle_vector(a, c, vector_const(ir.VectorType(I32, n), order))


def row_scale(b: ir.IRBuilder, p: PackedWeight, row: ir.Value) -> ir.Value:
    """The scale of an int8 row (the tensor's for int8-tensor)."""
    return load(b, p.scales, row if p.scheme == "int8" else i64(0), float32)


def _level(b: ir.IRBuilder, p: PackedWeight, e: ir.Value) -> ir.Value:
    """The level of element e: its nibble (low for even e) looked up in the constant table."""
    byte = load(b, p.codes, b.lshr(e, i64(1)), uint8)
    shift = b.trunc(b.shl(b.and_(e, i64(1)), i64(2)), I8)
    index = b.zext(b.and_(b.lshr(byte, shift), ir.Constant(I8, 15)), I64)
    return b.load(b.gep(p.table, [i64(0), index], inbounds=True, source_etype=p.table.value_type), typ=F32)


def _levels(b: ir.IRBuilder, p: PackedWeight, e: ir.Value, parity: int, lanes: int) -> ir.Value:
    """The levels of elements e..e+lanes-1 (e's parity given): their bytes split into nibbles, interleaved."""
    count = lanes // 2 + parity
    raw = load(b, p.codes, b.lshr(e, i64(1)), uint8, count)
    low = b.and_(raw, ir.Constant(raw.type, [ir.Constant(I8, 15)] * count))
    high = b.lshr(raw, ir.Constant(raw.type, [ir.Constant(I8, 4)] * count))
    order = [q // 2 if q % 2 == 0 else count + q // 2 for q in range(parity, parity + lanes)]
    nibbles = b.shuffle_vector(low, high, vector_const(ir.VectorType(I32, lanes), order))
    return _lookup(b, p, b.zext(nibbles, ir.VectorType(I32, lanes)))


def _lookup(b: ir.IRBuilder, p: PackedWeight, index: ir.Value) -> ir.Value:
    """levels[index] per lane (i32 indices in [0, 16))."""
    lanes = index.type.count
    if p.x86 and lanes in (8, 16):
        return permute_lookup(b, LEVELS[p.scheme], index)
    return gather(b, p.table, b.zext(index, ir.VectorType(I64, lanes)), float32, _all(lanes),
                  ir.Constant(ir.VectorType(F32, lanes), None))


def _all(lanes: int) -> ir.Constant:
    """A mask of `lanes` true lanes."""
    return vector_const(ir.VectorType(I1, lanes), [ir.Constant(I1, 1)] * lanes)


def _block_scales(b: ir.IRBuilder, p: PackedWeight, e: ir.Value, lanes: int) -> ir.Value:
    """The scale of each element e..e+lanes-1: one block's for a whole-block vector, else gathered per lane."""
    if lanes == 1 or p.block_per_vector:
        return widen(b, load(b, p.scales, b.udiv(e, i64(p.block)), float32), lanes)
    elements = b.add(widen(b, e, lanes), iota(I64, lanes))
    blocks = b.udiv(elements, ir.Constant(elements.type, [ir.Constant(I64, p.block)] * lanes))
    return gather(b, p.scales, blocks, float32, _all(lanes), zeros(ir.VectorType(F32, lanes)))


__all__ = ["PackedWeight", "decode", "decode_lane_planes", "decode_planes", "packed_weight", "plane_order",
           "row_scale"]
