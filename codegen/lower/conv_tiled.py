"""conv2d in float64: a register tile of output channels times vectors of output pixels, reading x and w in place.

float32 has codegen/conv.py (blocked layouts, packed weights, direct and im2col kernels); float64 had one scalar
multiply-add per tap per output pixel, 10x torch's time. Here a tile holds R output channels of one group times V
vectors of L consecutive output pixels of one output row (12 x 2 vectors of 8 lanes on AVX-512, 6 x 2 of 4 on AVX2:
the GEMM's tile shapes). For each input channel and kernel row inside the image (rows over the padding are skipped)
the kernel columns are unrolled: per tap, each pixel vector is one load of the input row (stride 1; a gather
otherwise) whose lanes over the left or right padding or past the output row are masked off, each channel's weight
one broadcast, then R V multiply-adds. Units are (image, group, channel block, output row, pixel block), pixel blocks
innermost, so a thread's consecutive units read one block of weights from L1. Each output element is one chain of
multiply-adds in the order (input channel, kernel row, kernel column), from the bias, whatever the unit split: the
same bytes on any number of threads.
"""
from __future__ import annotations

from math import ceil

import llvmlite.ir as ir

from braze.ir.graph import Node

from ..gemm_kernel import mul_add
from ..loops import alloca, for_range, i64, splat, vector_registers
from .base import Kernel, KernelSpec, by_size, claimed_unit_loop, constant, gather, iota, load, store

# (channels, pixel vectors) of the tile, by vector registers
_TILE = {32: (12, 2), 16: (6, 2)}


def tiled_conv2d(node: Node, k: Kernel) -> KernelSpec:
    """The kernel of a float64 conv2d node (see the module docstring)."""
    x_shape, w_shape, out_shape = node.inputs[0].shape, node.inputs[1].shape, node.out.shape
    attrs = dict(node.attr)
    if w_shape[2:] == (1, 1) and attrs["stride"] == (1, 1) and attrs["padding"] == (0, 0):
        # a pointwise conv reads each plane as one row: whole vectors across the ends of the image's rows
        x_shape = x_shape[:2] + (1, x_shape[2] * x_shape[3])
        out_shape = out_shape[:2] + (1, out_shape[2] * out_shape[3])
    n, c_out = x_shape[0], w_shape[0]
    _, _, oh_count, ow_count = out_shape
    groups = attrs["groups"]
    per_group = c_out // groups
    if n * c_out * oh_count * ow_count == 0:
        return k.finish(node.op)
    lanes = max(k.width // 2, 1)
    rows, vectors = _TILE[vector_registers(k.width)]
    rows, vectors = min(rows, per_group), min(vectors, ceil(ow_count / lanes))
    pixels = vectors * lanes
    channel_blocks, pixel_blocks = ceil(per_group / rows), ceil(ow_count / pixels)
    tile = _ConvTile(node, k, (x_shape, w_shape, out_shape), lanes, "+fma" in k.target.features.split(","))
    b = k.builder
    dims = [n, groups, channel_blocks, oh_count, pixel_blocks]
    with claimed_unit_loop(k, dims, name="tile") as (image, group, block, oh, pixel_block):
        co = b.add(b.mul(group, i64(per_group)), b.mul(block, i64(rows)))
        ow0 = b.mul(pixel_block, i64(pixels))
        by_size(b, block, channel_blocks, rows, per_group - (channel_blocks - 1) * rows,
                lambda rows_here: tile.emit(image, group, co, oh, ow0, rows_here, vectors))
    return k.finish(node.op)


class _ConvTile:
    """One (channels x pixel vectors) tile of a conv2d's output, on x, w and output shapes given (a pointwise conv's
    planes as single rows)."""

    def __init__(self, node: Node, k: Kernel, shapes: tuple[tuple[int, ...], ...], lanes: int, fused: bool) -> None:
        self.node, self.k, self.b, self.lanes, self.fused = node, k, k.builder, lanes, fused
        self.dtype = node.out.dtype
        self.x_shape, self.w_shape, self.out_shape = shapes
        attrs = node.attr
        self.stride, self.padding, self.dilation = attrs["stride"], attrs["padding"], attrs["dilation"]

    def emit(self, image: ir.Value, group: ir.Value, co: ir.Value, oh: ir.Value, ow0: ir.Value, rows: int,
             vectors: int) -> None:
        """out[image, co : co + rows, oh, ow0 : ow0 + vectors lanes] (lanes past the row masked)."""
        b, k, lanes, dtype = self.b, self.k, self.lanes, self.dtype
        _, c, h, wd = self.x_shape
        _, c_in, kh, kw = self.w_shape
        _, c_out, oh_count, ow_count = self.out_shape
        (sh, sw), (ph, pw), (dh, dw) = self.stride, self.padding, self.dilation
        index = ir.VectorType(ir.IntType(64), lanes)
        pixel = [b.add(splat(b, b.add(ow0, i64(v * lanes)), lanes), iota(index.element, lanes))
                 for v in range(vectors)]
        in_row = [b.icmp_signed("<", p, splat(b, i64(ow_count), lanes)) for p in pixel]
        # per kernel column and pixel vector: the input columns read and the lanes inside the image and the row
        taps = []
        for j in range(kw):
            columns = [b.add(b.mul(p, splat(b, i64(sw), lanes)), splat(b, i64(j * dw - pw), lanes)) for p in pixel]
            inside = [b.and_(m, b.icmp_unsigned("<", col, splat(b, i64(wd), lanes))) for m, col in zip(in_row, columns)]
            taps.append((columns, inside))
        zero = constant(dtype, 0, lanes)
        acc = [alloca(b, zero.type) for _ in range(rows * vectors)]
        for r in range(rows):
            start = load(b, k.ins[2], b.add(co, i64(r)), dtype) if len(self.node.inputs) == 3 else constant(dtype, 0)
            for v in range(vectors):
                b.store(splat(b, start, lanes), acc[r * vectors + v])
        x_image = b.mul(b.add(b.mul(image, i64(c)), b.mul(group, i64(c_in))), i64(h * wd))
        w_rows = [b.mul(b.add(co, i64(r)), i64(c_in * kh * kw)) for r in range(rows)]
        with for_range(b, 0, c_in, name="ci") as ci, for_range(b, 0, kh, name="i") as i:
            ih = b.add(b.mul(oh, i64(sh)), b.sub(b.mul(i, i64(dh)), i64(ph)))
            with b.if_then(b.icmp_unsigned("<", ih, i64(h))):   # rows over the padding add nothing
                x_row = b.add(x_image, b.add(b.mul(ci, i64(h * wd)), b.mul(ih, i64(wd))))
                w_tap = b.add(b.mul(ci, i64(kh * kw)), b.mul(i, i64(kw)))
                for j, (columns, inside) in enumerate(taps):
                    xs = [self._pixels(x_row, col, mask, sw) for col, mask in zip(columns, inside)]
                    for r in range(rows):
                        weight = splat(b, load(b, k.ins[1], b.add(w_rows[r], b.add(w_tap, i64(j))), dtype), lanes)
                        for v in range(vectors):
                            slot = acc[r * vectors + v]
                            b.store(mul_add(b, weight, xs[v], b.load(slot, typ=zero.type), self.fused), slot)
        out_rows = b.mul(b.add(b.mul(image, i64(c_out)), co), i64(oh_count * ow_count))
        for r in range(rows):
            row = b.add(out_rows, b.add(i64(r * oh_count * ow_count), b.mul(oh, i64(ow_count))))
            for v in range(vectors):
                store(b, b.load(acc[r * vectors + v], typ=zero.type), k.outs[0], b.add(row, b.add(ow0, i64(v * lanes))),
                      dtype, in_row[v])

    def _pixels(self, x_row: ir.Value, columns: ir.Value, mask: ir.Value, stride: int) -> ir.Value:
        """x_row's elements at `columns` in the lanes of `mask`, zeros elsewhere: one masked load at stride 1."""
        b, lanes, dtype = self.b, self.lanes, self.dtype
        if stride == 1:
            first = b.add(x_row, b.extract_element(columns, ir.Constant(ir.IntType(32), 0)))
            return load(b, self.k.ins[0], first, dtype, lanes, mask)
        return gather(b, self.k.ins[0], b.add(splat(b, x_row, lanes), columns), dtype, mask, constant(dtype, 0, lanes))


__all__ = ["tiled_conv2d"]
