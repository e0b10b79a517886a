"""conv2d and its gradients in float64: register tiles of channels times vectors of pixels, reading the activations
and the weight in place.

float32 has codegen/conv.py and codegen/conv_grad.py (blocked layouts, packed weights, GEMMs); float64 had one scalar
multiply-add per tap per element, 10-20x torch's time (a float64 CNN's training step 0.07x). Here a tile holds R
channels of the result (of one group) times V vectors of L consecutive pixels of one of its rows (12 x 2 vectors of
8 lanes on AVX-512, 6 x 2 of 4 on AVX2: the GEMM's tile shapes). For each channel summed over and each kernel row
that lands inside the source (others are skipped), the kernel columns are unrolled (up to _UNROLLED_TAPS; a wider
kernel loops over them): per tap, each pixel vector is
one load of the source row (unit stride; a gather otherwise) whose lanes outside it or past the result's row are
masked off, each result channel's weight one broadcast, then R V multiply-adds.
- conv2d: the source is x; output pixel p of row oh reads x at (oh s - pad + i d, p s - pad + j d); a pointwise
  conv reads each plane as one row.
- conv2d_grad_input: the source is the output gradient g, the result dx; input pixel p of row ih receives g at
  ((ih + pad - i d) / s, (p + pad - j d) / s) where those divide exactly (the transposed convolution), weighted by
  w[co, c, i, j].
Units are (image, group, channel block, row, pixel block), pixel blocks innermost, so a thread's consecutive units
read one block of weights from L1. Each result element is one chain of multiply-adds in the order (channel summed
over, kernel row, kernel column), from the bias or zero, whatever the unit split: the same bytes on any number of
threads. A conv region's epilogue (folded batch norm, activation, residual) applies to each stored vector. The weight
gradient is a tile of dot products of its own (tiled_conv2d_grad_weight).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from typing import Callable

import llvmlite.ir as ir

from braze.ir.graph import Node

from ..gemm_kernel import TilePos, mul_add
from ..loops import I32, alloca, for_range, i64, splat, vector_registers
from .base import Kernel, KernelSpec, by_size, claimed_unit_loop, constant, gather, iota, load, store
from .matmul_tiled import Operands, halving_sum

# (channels, pixel vectors) of the tile, by vector registers
_TILE = {32: (12, 2), 16: (6, 2)}
# Kernel columns unrolled at most; a wider kernel (IR text may give any) loops over them instead of growing the code
_UNROLLED_TAPS = 16


def for_taps(b: ir.IRBuilder, count: int, body: Callable[[ir.Value], None]) -> None:
    """body(j) for the kernel columns j < count: unrolled (constant j, whose column arithmetic LLVM hoists out of
    the loops around) up to _UNROLLED_TAPS, else a loop."""
    if count <= _UNROLLED_TAPS:
        for j in range(count):
            body(i64(j))
        return
    with for_range(b, 0, count, name="tap") as j:
        body(j)


@dataclass(frozen=True)
class _Geometry:
    """Which tensor a tile reads as pixel rows and how a result pixel's taps map into it.

    source, result: (N, C, H, W) shapes; summed: channels summed over per group; transposed: the input gradient's
    mapping (see the module docstring); weight_strides: the weight's element strides for (result channel, summed
    channel, i, j), each channel counted within its group, and per_group_weight the weight elements of a group."""

    source: tuple[int, int, int, int]
    result: tuple[int, int, int, int]
    groups: int
    summed: int
    taps: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    transposed: bool
    weight_strides: tuple[int, int, int, int]
    per_group_weight: int


def tiled_conv2d(node: Node, k: Kernel, operands: Operands | None = None, op: str | None = None) -> KernelSpec:
    """The kernel of a float64 conv2d node, or (`op` "fused") of a conv region anchored on it (see the module
    docstring): x, w and the bias (or None) in operands.a, .b and .bias, the result in .c, a region's epilogue applied
    to each stored vector at TilePos(image, channel, output position oh OW + ow)."""
    x_shape, w_shape, out_shape = node.inputs[0].shape, node.inputs[1].shape, node.out.shape
    attrs = node.attr
    if w_shape[2:] == (1, 1) and attrs["stride"] == (1, 1) and attrs["padding"] == (0, 0):
        # a pointwise conv reads each plane as one row: whole vectors across the ends of the image's rows
        x_shape = x_shape[:2] + (1, x_shape[2] * x_shape[3])
        out_shape = out_shape[:2] + (1, out_shape[2] * out_shape[3])
    c_in, kh, kw = w_shape[1:]
    per_group = w_shape[0] // attrs["groups"]
    geometry = _Geometry(x_shape, out_shape, attrs["groups"], c_in, (kh, kw), attrs["stride"], attrs["padding"],
                         attrs["dilation"], False, (c_in * kh * kw, kh * kw, kw, 1), per_group * c_in * kh * kw)
    if operands is None:
        operands = Operands(k.ins[0], k.ins[1], k.outs[0], bias=k.ins[2] if len(node.inputs) == 3 else None)
    return _emit(node, k, geometry, operands, op or node.op)


def tiled_conv2d_grad_input(node: Node, k: Kernel) -> KernelSpec:
    """The kernel of a float64 conv2d_grad_input node, dx from (g, w) (see the module docstring)."""
    g_shape, w_shape, dx_shape = node.inputs[0].shape, node.inputs[1].shape, node.out.shape
    attrs = node.attr
    c_out, cg, kh, kw = w_shape
    per_group = c_out // attrs["groups"]
    geometry = _Geometry(g_shape, dx_shape, attrs["groups"], per_group, (kh, kw), attrs["stride"], attrs["padding"],
                         attrs["dilation"], True, (kh * kw, cg * kh * kw, kw, 1), per_group * cg * kh * kw)
    return _emit(node, k, geometry, Operands(k.ins[0], k.ins[1], k.outs[0]), node.op)


def _emit(node: Node, k: Kernel, geometry: _Geometry, operands: Operands, op: str) -> KernelSpec:
    n, channels, rows_count, pixels_count = geometry.result
    per_group = channels // geometry.groups
    if n * channels * rows_count * pixels_count == 0:
        return k.finish(op)
    lanes = max(k.width // 2, 1)
    rows, vectors = _TILE[vector_registers(k.width)]
    rows, vectors = min(rows, per_group), min(vectors, ceil(pixels_count / lanes))
    pixels = vectors * lanes
    channel_blocks, pixel_blocks = ceil(per_group / rows), ceil(pixels_count / pixels)
    tile = _ConvTile(node, k, geometry, operands, lanes, k.target.fma)
    b = k.builder
    dims = [n, geometry.groups, channel_blocks, rows_count, pixel_blocks]
    with claimed_unit_loop(k, dims, name="tile") as (image, group, block, row, pixel_block):
        first = b.mul(block, i64(rows))
        p0 = b.mul(pixel_block, i64(pixels))
        by_size(b, block, channel_blocks, rows, per_group - (channel_blocks - 1) * rows,
                lambda rows_here: tile.emit(image, group, first, row, p0, rows_here, vectors))
    return k.finish(op)


class _ConvTile:
    """One (channels x pixel vectors) tile of the result, by a geometry."""

    def __init__(self, node: Node, k: Kernel, geometry: _Geometry, operands: Operands, lanes: int,
                 fused: bool) -> None:
        self.k, self.b, self.g, self.lanes, self.fused = k, k.builder, geometry, lanes, fused
        self.dtype = node.out.dtype
        self.ops = operands
        self.source, self.weight, self.bias = operands.a, operands.b, operands.bias

    def emit(self, image: ir.Value, group: ir.Value, first: ir.Value, row: ir.Value, p0: ir.Value, rows: int,
             vectors: int) -> None:
        """result[image, group's channels first : first + rows, row, p0 : p0 + vectors lanes] (lanes past the row
        masked)."""
        b, g, lanes, dtype = self.b, self.g, self.lanes, self.dtype
        _, source_channels, source_h, source_w = g.source
        _, channels, rows_count, pixels_count = g.result
        per_group = channels // g.groups
        pixel = [b.add(splat(b, b.add(p0, i64(v * lanes)), lanes), iota(ir.IntType(64), lanes))
                 for v in range(vectors)]
        in_row = [b.icmp_signed("<", p, splat(b, i64(pixels_count), lanes)) for p in pixel]
        zero = constant(dtype, 0, lanes)
        acc = [alloca(b, zero.type) for _ in range(rows * vectors)]
        channel = b.add(b.mul(group, i64(per_group)), first)   # the tile's first result channel
        for r in range(rows):
            start = load(b, self.bias, b.add(channel, i64(r)), dtype) if self.bias is not None else constant(dtype, 0)
            for v in range(vectors):
                b.store(splat(b, start, lanes), acc[r * vectors + v])
        plane = b.mul(b.add(b.mul(image, i64(source_channels)), b.mul(group, i64(g.summed))), i64(source_h * source_w))
        rc, sc, si, sj = g.weight_strides
        w_rows = [b.add(b.mul(group, i64(g.per_group_weight)), b.mul(b.add(first, i64(r)), i64(rc)))
                  for r in range(rows)]
        with for_range(b, 0, g.summed, name="c") as c, for_range(b, 0, g.taps[0], name="i") as i:
            inside, source_row = self._row(row, i)
            with b.if_then(inside):   # kernel rows outside the source add nothing
                at = b.add(plane, b.add(b.mul(c, i64(source_h * source_w)), b.mul(source_row, i64(source_w))))
                w_tap = b.add(b.mul(c, i64(sc)), b.mul(i, i64(si)))

                def tap(j: ir.Value) -> None:
                    xs = [self._pixels(at, *self._columns(p, j, mask)) for p, mask in zip(pixel, in_row)]
                    for r in range(rows):
                        w = load(b, self.weight, b.add(w_rows[r], b.add(w_tap, b.mul(j, i64(sj)))), dtype)
                        weight = splat(b, w, lanes)
                        for v in range(vectors):
                            slot = acc[r * vectors + v]
                            b.store(mul_add(b, weight, xs[v], b.load(slot, typ=zero.type), self.fused), slot)
                for_taps(b, g.taps[1], tap)
        out = b.mul(b.add(b.mul(image, i64(channels)), channel), i64(rows_count * pixels_count))
        for r in range(rows):
            at = b.add(out, b.add(i64(r * rows_count * pixels_count), b.mul(row, i64(pixels_count))))
            for v in range(vectors):
                value = b.load(acc[r * vectors + v], typ=zero.type)
                p = b.add(p0, i64(v * lanes))
                if self.ops.epilogue is not None:
                    position = b.add(b.mul(row, i64(pixels_count)), p)
                    where = TilePos(image, b.add(channel, i64(r)), position, in_row[v], self.ops.extras)
                    value = self.ops.epilogue(b, value, where)
                store(b, value, self.ops.c, b.add(at, p), dtype, in_row[v])

    def _row(self, row: ir.Value, i: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(whether kernel row i of result row `row` lands in the source, the source row it reads)."""
        b, g = self.b, self.g
        (s, _), (pad, _), (d, _) = g.stride, g.padding, g.dilation
        if not g.transposed:
            source_row = b.add(b.mul(row, i64(s)), b.sub(b.mul(i, i64(d)), i64(pad)))
            return b.icmp_unsigned("<", source_row, i64(g.source[2])), source_row
        t = b.sub(b.add(row, i64(pad)), b.mul(i, i64(d)))
        source_row = b.sdiv(t, i64(s))
        exact = b.icmp_signed("==", b.srem(t, i64(s)), i64(0))
        inside = b.and_(b.icmp_signed(">=", t, i64(0)), b.icmp_signed("<", source_row, i64(g.source[2])))
        return b.and_(exact, inside), source_row

    def _columns(self, pixel: ir.Value, j: ir.Value, in_row: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(the source columns kernel column j of the result pixels reads, the lanes that read one)."""
        b, g, lanes = self.b, self.g, self.lanes
        (_, s), (_, pad), (_, d) = g.stride, g.padding, g.dilation
        width = splat(b, i64(g.source[3]), lanes)
        shift = b.sub(b.mul(j, i64(d)), i64(pad))
        if not g.transposed:
            columns = b.add(b.mul(pixel, splat(b, i64(s), lanes)), splat(b, shift, lanes))
            return columns, b.and_(in_row, b.icmp_unsigned("<", columns, width))
        t = b.sub(pixel, splat(b, shift, lanes))
        columns = b.sdiv(t, splat(b, i64(s), lanes)) if s > 1 else t
        inside = b.and_(b.icmp_signed(">=", t, splat(b, i64(0), lanes)), b.icmp_signed("<", columns, width))
        if s > 1:
            inside = b.and_(inside, b.icmp_signed("==", b.srem(t, splat(b, i64(s), lanes)), splat(b, i64(0), lanes)))
        return columns, b.and_(in_row, inside)

    def _pixels(self, row_start: ir.Value, columns: ir.Value, mask: ir.Value) -> ir.Value:
        """The source row's elements at `columns` in the lanes of `mask`, zeros elsewhere: one masked load where the
        columns are consecutive (unit stride), else a gather."""
        b, lanes, dtype = self.b, self.lanes, self.dtype
        if self.g.stride[1] == 1:
            start = b.add(row_start, b.extract_element(columns, ir.Constant(I32, 0)))
            return load(b, self.source, start, dtype, lanes, mask)
        return gather(b, self.source, b.add(splat(b, row_start, lanes), columns), dtype, mask,
                      constant(dtype, 0, lanes))


# Accumulators of the weight gradient's tile of dot products (output channels x kernel columns), by vector registers:
# 8 x 3 with AVX-512's 32, 4 x 3 with 16, beside the vectors of g and x; a wider kernel's columns take several tiles
_WEIGHT_ACCUMULATORS = {32: 24, 16: 12}


def tiled_conv2d_grad_weight(node: Node, k: Kernel, slices: int) -> KernelSpec:
    """The kernel of a float64 conv2d_grad_weight (slices 1) or conv2d_grad_weight_slices node: dw[slice, co, ci, i,
    j] = sum over the slice's images and the output pixels of g[n, co, oh, ow] x[n, c, oh s - pad + i d, ow s - pad
    + j d]. A tile holds R output channels times the kernel's columns of one (input channel, kernel row) as dot
    products along each output row, vectors of L pixels of g (one load each) against the matching vectors of x (a
    masked load at unit stride, else a gather), summed by a halving tree at the end: every element of dw is the same
    chain whatever the unit split."""
    x_shape, g_shape = node.inputs[0].shape, node.inputs[1].shape
    attrs = node.attr
    c_out, cg, kh, kw = attrs["weight_shape"]
    n, c, h, wd = x_shape
    _, _, oh_count, ow_count = g_shape
    groups = attrs["groups"]
    per_group = c_out // groups
    if c_out * cg * kh * kw == 0:
        return k.finish(node.op)
    lanes = max(k.width // 2, 1)
    most = _WEIGHT_ACCUMULATORS[vector_registers(k.width)]
    columns_per = min(kw, most)                   # a kernel wider than the accumulators takes several tiles
    rows = max(1, min(most // columns_per, per_group))
    blocks, column_blocks = ceil(per_group / rows), ceil(kw / columns_per)
    per_slice = n // slices
    b, dtype = k.builder, node.out.dtype
    (sh, sw), (ph, pw), (dh, dw) = attrs["stride"], attrs["padding"], attrs["dilation"]
    fused = k.target.fma
    zero = constant(dtype, 0, lanes)
    x, g = k.ins

    def tile(part: ir.Value, group: ir.Value, first: ir.Value, ci: ir.Value, i: ir.Value, j0: ir.Value, count: int,
             columns_here: int) -> None:
        co = b.add(b.mul(group, i64(per_group)), first)   # the tile's first output channel
        channel = b.add(b.mul(group, i64(cg)), ci)
        acc = [alloca(b, zero.type) for _ in range(count * columns_here)]
        for slot in acc:
            b.store(zero, slot)
        start = b.mul(part, i64(per_slice))
        with for_range(b, start, b.add(start, i64(per_slice)), name="n") as image, \
                for_range(b, 0, oh_count, name="oh") as oh:
            ih = b.add(b.mul(oh, i64(sh)), b.sub(b.mul(i, i64(dh)), i64(ph)))
            with b.if_then(b.icmp_unsigned("<", ih, i64(h))):   # kernel rows in the padding add nothing
                x_row = b.add(b.mul(b.add(b.mul(image, i64(c)), channel), i64(h * wd)), b.mul(ih, i64(wd)))
                g_rows = [b.add(b.mul(b.add(b.mul(image, i64(c_out)), b.add(co, i64(r))), i64(oh_count * ow_count)),
                                b.mul(oh, i64(ow_count))) for r in range(count)]
                with for_range(b, 0, ow_count, lanes, name="ow") as ow0:
                    pixel = b.add(splat(b, ow0, lanes), iota(ir.IntType(64), lanes))
                    in_row = b.icmp_signed("<", pixel, splat(b, i64(ow_count), lanes))
                    gs = [load(b, g, b.add(row, ow0), dtype, lanes, in_row) for row in g_rows]
                    for j in range(columns_here):
                        shift = b.sub(b.mul(b.add(j0, i64(j)), i64(dw)), i64(pw))
                        columns = b.add(b.mul(pixel, splat(b, i64(sw), lanes)), splat(b, shift, lanes))
                        mask = b.and_(in_row, b.icmp_unsigned("<", columns, splat(b, i64(wd), lanes)))
                        if sw == 1:
                            xs = load(b, x, b.add(x_row, b.extract_element(columns, ir.Constant(I32, 0))), dtype,
                                      lanes, mask)
                        else:
                            xs = gather(b, x, b.add(splat(b, x_row, lanes), columns), dtype, mask, zero)
                        for r in range(count):
                            slot = acc[r * columns_here + j]
                            b.store(mul_add(b, gs[r], xs, b.load(slot, typ=zero.type), fused), slot)
        for r in range(count):
            at = b.add(b.mul(b.add(b.mul(part, i64(c_out)), b.add(co, i64(r))), i64(cg * kh * kw)),
                       b.add(b.add(b.mul(ci, i64(kh * kw)), b.mul(i, i64(kw))), j0))
            for j in range(columns_here):
                total = halving_sum(b, b.load(acc[r * columns_here + j], typ=zero.type), lanes)
                store(b, total, k.outs[0], b.add(at, i64(j)), dtype)

    dims = [slices, groups, blocks, cg, kh, column_blocks]
    with claimed_unit_loop(k, dims, name="weights") as (part, group, block, ci, i, column_block):
        first, j0 = b.mul(block, i64(rows)), b.mul(column_block, i64(columns_per))
        last_columns = kw - (column_blocks - 1) * columns_per
        by_size(b, block, blocks, rows, per_group - (blocks - 1) * rows, lambda count: by_size(
            b, column_block, column_blocks, columns_per, last_columns,
            lambda columns_here: tile(part, group, first, ci, i, j0, count, columns_here)))
    return k.finish(node.op)


__all__ = ["tiled_conv2d", "tiled_conv2d_grad_input", "tiled_conv2d_grad_weight"]
