"""Direct conv2d for small kernels: a register tile of output channels times vectors of output pixels, no im2col.

The activations stay NCHW. A tile holds R = MR output channels (the weight block the GEMM's A packing already
produces: MR channels per panel, step k = (ci, kh, kw) holding the MR weights side by side) times up to NV vectors
of W consecutive output pixels of one output row. For each input channel the kH*kW taps are unrolled: per tap,
each pixel vector is one load of the input row (stride 2: two vectors' worth, every other lane kept in the order
one in-lane shuffle leaves them, put back in order once at the store: pixel_order), each
channel's weight one broadcast, then R*NV FMAs, like the GEMM micro-kernel but reading the input in place.

Everything about the columns is static: which lanes of a tap's load hang over the left or right padding is a
constant mask (a plain load where none does). Rows are not: a kernel row over the top or bottom padding reads a
constant row of zeros instead, its pointer chosen by one select per input channel, so one tile function serves
every row block (a variant with masked loads for the row blocks at the padding doubled the kernel's code).
Threads claim units of (image, group, channel block, row block), row blocks innermost, so a thread's consecutive
units reuse one weight block from L1; at batch 1, units of (row block, group, channel block) where the weight is
small (rows_first).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from .claims import claimed_chunks
from .gemm_kernel import (F32, I1, I32, I64, PTR, Epilogue, Tiling, TilePos, const64, elem_ptr, lane_mask,
                          load_vec, masked_load, mul_add, store_vec, vec_type)
from .loops import alloca, define_function, entry_builder, for_range, splat, undef, unflatten, vector_const, zeros

if TYPE_CHECKING:
    from .conv import ConvSpec

# Taps per input channel the kernel unrolls: 3x3 and smaller (a larger kernel goes through the GEMM).
MOST_TAPS = 9
STRIDES = (1, 2)  # along W


def direct_covers(spec: ConvSpec) -> bool:
    """Whether the direct kernel can run `spec` at all."""
    return not spec.depthwise and spec.kh * spec.kw <= MOST_TAPS and spec.stride[1] in STRIDES


# Output rows of fewer vectors than this run faster on the GEMM (measured: see conv.py); on AVX-512, rows of this
# many whole vectors and more already run faster on the direct kernel.
MIN_ROW_VECTORS = 4
MIN_WHOLE_VECTORS_AVX512 = 2


# From this vector width on, a stride-2 input load's deinterleave is one two-source permute (AVX-512's vpermt2ps).
WIDE_PERMUTE = 16


def direct_preferred(spec: ConvSpec, width: int) -> bool:
    """Whether the direct kernel is the faster one for `spec` at `width` lanes: stride 1 along W and output rows of
    at least MIN_ROW_VECTORS vectors (in shorter rows, most vectors are at an edge, where the loads are masked; on
    AVX-512, MIN_WHOLE_VECTORS_AVX512 whole vectors), or stride 2 along W with whole vectors only at WIDE_PERMUTE
    lanes and more; on AVX-512 never a 1x1 kernel (see conv.py)."""
    wide = width >= WIDE_PERMUTE
    if not direct_covers(spec) or (wide and spec.kh * spec.kw == 1):
        return False
    if spec.stride[1] == 2:
        return wide and spec.out_shape[3] % width == 0
    if wide and spec.out_shape[3] // width >= MIN_WHOLE_VECTORS_AVX512:
        return spec.stride[1] == 1
    return spec.stride[1] == 1 and row_vectors(spec, width) >= MIN_ROW_VECTORS


def row_vectors(spec: ConvSpec, width: int) -> int:
    """Vectors of `width` pixels per output row."""
    return -(-spec.out_shape[3] // width)


@dataclass(frozen=True)
class Layout:
    """Static facts of one conv's direct kernel: the register tile, the row blocks and the weight addressing."""

    spec: ConvSpec
    tiling: Tiling

    @property
    def blocks(self) -> int:
        """Channel blocks of MR per group."""
        return -(-self.spec.group_out // self.tiling.mr)

    @property
    def rows(self) -> int:
        """Output rows per row block: enough rows of short vectors to fill the NV vectors of a tile."""
        return max(1, min(self.spec.out_shape[2], self.tiling.nv // row_vectors(self.spec, self.tiling.width)))

    @property
    def row_blocks(self) -> int:
        return -(-self.spec.out_shape[2] // self.rows)

    @property
    def unit_order(self) -> tuple[tuple[str, int], ...]:
        """The digits of a unit and their counts, outermost first (the module doc, rows_first)."""
        s = self.spec
        if rows_first(s, 4 * s.c_out * s.k, self.tiling.private_bytes):
            return ("image", s.n), ("row block", self.row_blocks), ("group", s.groups), ("block", self.blocks)
        return ("image", s.n), ("group", s.groups), ("block", self.blocks), ("row block", self.row_blocks)

    @property
    def weight(self) -> tuple[int, int, int]:
        """(block stride, channel stride, k stride) of the weight, plain or pre-packed (the GEMM's A panels)."""
        mr = self.tiling.mr
        if self.spec.prepacked_weight:
            return self.spec.k * mr, 1, mr
        return mr * self.spec.k, self.spec.k, 1

    @property
    def group_stride(self) -> int:
        """Where group g's weight starts: g times this."""
        s = self.spec
        return self.blocks * s.k * self.tiling.mr if s.prepacked_weight else s.group_out * s.k


def rows_inside(s: ConvSpec) -> bool:
    """Whether the taps of every output row read rows inside the input (no row of zeros is needed)."""
    (sh, _), (ph, _), (dh, _) = s.stride, s.padding, s.dilation
    first = -(-ph // sh)  # the first output row whose top tap is a real row
    reach = (s.kh - 1) * dh - ph  # bottom tap offset from oh*sh
    last_row = (s.h - 1 - reach) // sh  # the last output row whose bottom tap is a real row
    return first <= 0 and last_row >= s.out_shape[2] - 1


def rows_first(spec: ConvSpec, weight_bytes: int, l2: int) -> bool:
    """Whether a conv's units take the output rows outermost: at batch 1, with a weight of at most half of L2.

    The threads of a call claim a loop's units from its two ends (codegen/claims.py), so on two threads each computes
    one contiguous run of them. With the rows outermost that run is a band of output rows in every channel, and the
    next conv's band of rows reads mostly the band of its input that the same thread wrote, in its own caches; with
    the channels outermost each thread wrote half the channels, and every pixel of the next conv reads all of them,
    half from the other core. Each unit then reads its channel block's weights anew, from L2 where all of the weight
    fits there. On a Xeon with two 512-bit FMA ports, medians side by side: the benchmark CNN at batch 1 (weights of
    3.4-295 KB) on two threads 100 -> 92 and 101 -> 95 us, the same on one thread; convs alone at batch 1, one and
    two threads: 64 -> 64 channels at 56 x 56, 128 -> 128 at 28 x 28 (590 KB), the CNN's layers within the noise;
    256 -> 256 at 14 x 14 (2.4 MB of weight) 1.29x slower, 512 -> 512 at 7 x 7 (9.4 MB) 1.75x slower, so large
    weights keep their channel blocks outermost."""
    return spec.n == 1 and 2 * weight_bytes <= l2


def emit_direct(module: ir.Module, name: str, spec: ConvSpec, tiling: Tiling, epilogue: Epilogue | None,
                n_extra: int, arguments: list[tuple[str, ir.Type]]) -> ir.Function:
    """Emit the conv2d kernel `name` (conv.py's signature; scratch unused) on the direct tiles."""
    layout = Layout(spec, tiling)
    fn = define_function(module, name, arguments)
    x, w, out, _, tid, nthreads, claim, _, *extra = fn.args
    builder = entry_builder(fn)
    s = spec
    units = s.n * s.groups * layout.blocks * layout.row_blocks
    if units == 0 or 0 in s.out_shape:
        builder.ret_void()
        return fn
    tiles = {}
    zero_row = None if rows_inside(s) else zero_row_constant(module, f"{name}.zeros", s.w)

    def tile_fn(channels: int, rows: int) -> ir.Function:
        if (channels, rows) not in tiles:
            tiles[channels, rows] = _emit_tile(module, f"{name}.t{channels}r{rows}", layout, channels, rows, zero_row,
                                               epilogue, n_extra)
        return tiles[channels, rows]
    with claimed_chunks(builder, claim, tid, nthreads, units, name="tiles", work=s.flops) as (u0, u1):
        with for_range(builder, u0, u1, name="unit") as unit:
            _unit(builder, layout, tile_fn, (x, w, out), unit, tuple(extra))
    builder.ret_void()
    return fn


def zero_row_constant(module: ir.Module, name: str, width: int) -> ir.GlobalVariable:
    """A constant input row of zeros: what the taps over the top and bottom padding read."""
    typ = ir.ArrayType(F32, width)
    glob = ir.GlobalVariable(module, typ, name)
    glob.initializer = ir.Constant(typ, None)
    glob.global_constant, glob.linkage, glob.align = True, "private", 64
    return glob


def _unit(builder: ir.IRBuilder, layout: Layout, tile_fn, ptrs, unit, extra) -> None:
    """Unit (image, group, block, row block): call the tile function for its channel count and rows."""
    s, t = layout.spec, layout.tiling
    x, w, out = ptrs
    digits = unflatten(builder, unit, layout.unit_order)
    image, group, block, rb = digits["image"], digits["group"], digits["block"], digits["row block"]
    plane = s.h * s.w
    x_group = elem_ptr(builder, x, builder.mul(builder.add(builder.mul(image, const64(s.c)),
                                                            builder.mul(group, const64(layout.spec.group_in))),
                                                const64(plane)))
    w_block = elem_ptr(builder, w, builder.add(builder.mul(group, const64(layout.group_stride)),
                                               builder.mul(block, const64(layout.weight[0]))))
    _, c_out, oh_count, ow_count = s.out_shape
    out_image = elem_ptr(builder, out, builder.mul(image, const64(c_out * oh_count * ow_count)))
    co0 = builder.add(builder.mul(group, const64(layout.spec.group_out)), builder.mul(block, const64(t.mr)))
    oh0 = builder.mul(rb, const64(layout.rows))
    args = [x_group, w_block, out_image, image, co0, oh0, *extra]
    full_channels = layout.spec.group_out % t.mr == 0
    tail_rows = oh_count % layout.rows

    def call(channels: int) -> None:
        if tail_rows == 0:
            builder.call(tile_fn(channels, layout.rows), args)
            return
        is_tail = builder.icmp_signed("==", rb, const64(layout.row_blocks - 1))
        with builder.if_else(is_tail) as (then, otherwise):
            with then:
                builder.call(tile_fn(channels, tail_rows), args)
            with otherwise:
                builder.call(tile_fn(channels, layout.rows), args)
    if full_channels:
        call(t.mr)
        return
    with builder.if_else(builder.icmp_signed("==", block, const64(layout.blocks - 1))) as (then, otherwise):
        with then:
            call(layout.spec.group_out % t.mr)
        with otherwise:
            call(t.mr)


@dataclass(frozen=True)
class _Vector:
    """One pixel vector of a tile: output row offset in the row block, first column, valid lanes."""

    row: int
    col: int
    lanes: int


def _vectors(layout: Layout, rows: int) -> list[list[_Vector]]:
    """The pixel vectors of `rows` output rows, in register groups of at most NV."""
    t = layout.tiling
    ow = layout.spec.out_shape[3]
    flat = [_Vector(r, j * t.width, min(t.width, ow - j * t.width)) for r in range(rows)
            for j in range(row_vectors(layout.spec, t.width))]
    return [flat[i:i + t.nv] for i in range(0, len(flat), t.nv)]


def _emit_tile(module: ir.Module, name: str, layout: Layout, channels: int, rows: int,
               zero_row: ir.GlobalVariable | None, epilogue: Epilogue | None, n_extra: int) -> ir.Function:
    """Emit `void name(x_group, w_block, out_image, image, co0, oh0, extra...)`: `channels` output channels from
    co0 times output rows [oh0, oh0+rows), all columns; input rows outside the input are read from `zero_row`."""
    args = [("x", PTR), ("w", PTR), ("out", PTR), ("image", I64), ("co0", I64), ("oh0", I64)]
    fn = define_function(module, name, args + [(f"extra{i}", PTR) for i in range(n_extra)], internal=True)
    fn.attributes.add("noinline")  # one tile's work dwarfs a call; inlined, the variants multiply compile time
    x, w, out, image, co0, oh0, *extra = fn.args
    builder = entry_builder(fn)
    for group in _vectors(layout, rows):
        acc = _accumulate(builder, layout, (x, w), oh0, channels, group, zero_row)
        _store(builder, layout, out, (image, co0, oh0), acc, group, tuple(extra), epilogue)
    builder.ret_void()
    return fn


def _accumulate(builder: ir.IRBuilder, layout: Layout, ptrs, oh0, channels: int, group: list[_Vector],
                zero_row: ir.GlobalVariable | None) -> list[list[ir.Value]]:
    """The tile's accumulators: for each input channel, every tap of every vector times every channel's weight."""
    s, t = layout.spec, layout.tiling
    x, w = ptrs
    _, ch_stride, k_stride = layout.weight
    slots = alloca(builder, vec_type(t.width), "acc", channels * len(group))
    zero = zeros(vec_type(t.width))
    for i in range(channels * len(group)):
        builder.store(zero, elem_vec(builder, slots, i, t.width))
    rows = _row_offsets(builder, layout, oh0, group, zero_row is not None)
    taps = s.kh * s.kw
    with for_range(builder, 0, layout.spec.group_in, name="ci") as ci:
        plane = elem_ptr(builder, x, builder.mul(ci, const64(s.h * s.w)))
        w_ci = elem_ptr(builder, w, builder.mul(ci, const64(taps * k_stride)))
        acc = [[builder.load(elem_vec(builder, slots, c * len(group) + v, t.width)) for v in range(len(group))]
               for c in range(channels)]
        starts = {key: _row_start(builder, plane, row, zero_row) for key, row in rows.items()}
        for kh in range(s.kh):
            for kw in range(s.kw):
                values = [_tap(builder, layout, starts[vector.row, kh], vector, kw) for vector in group]
                k = kh * s.kw + kw
                for c in range(channels):
                    weight = builder.load(elem_ptr(builder, w_ci, k * k_stride + c * ch_stride), typ=F32, align=4)
                    broadcast = splat(builder, weight, t.width)
                    acc[c] = [mul_add(builder, value, broadcast, a, t.fma) for value, a in zip(values, acc[c])]
        for c in range(channels):
            for v in range(len(group)):
                builder.store(acc[c][v], elem_vec(builder, slots, c * len(group) + v, t.width))
    return [[builder.load(elem_vec(builder, slots, c * len(group) + v, t.width)) for v in range(len(group))]
            for c in range(channels)]


def elem_vec(builder: ir.IRBuilder, base: ir.Value, index: int, width: int) -> ir.Value:
    """The address of vector `index` of an array of <width x float>."""
    return builder.gep(base, [const64(index)], inbounds=True, source_etype=vec_type(width))


def _row_offsets(builder: ir.IRBuilder, layout: Layout, oh0, group: list[_Vector], checked: bool):
    """Per (output row of the group, kernel row): the offset of the input row it reads in a plane, and whether
    that row is inside the input (None when not `checked`)."""
    s = layout.spec
    (sh, _), (ph, _), (dh, _) = s.stride, s.padding, s.dilation
    out = {}
    for row in dict.fromkeys(vector.row for vector in group):
        base = builder.mul(builder.add(oh0, const64(row)), const64(sh))
        for kh in range(s.kh):
            ih = builder.add(base, const64(kh * dh - ph))
            inside = builder.icmp_unsigned("<", ih, const64(s.h)) if checked else None
            out[row, kh] = (builder.mul(ih, const64(s.w)), inside)
    return out


def _row_start(builder: ir.IRBuilder, plane, row, zero_row: ir.GlobalVariable | None) -> ir.Value:
    """Where an input row of the plane starts, or the row of zeros when it is outside the input."""
    offset, inside = row
    start = elem_ptr(builder, plane, offset)
    return start if inside is None else builder.select(inside, start, zero_row)


def _tap(builder: ir.IRBuilder, layout: Layout, start, vector: _Vector, kw: int) -> ir.Value:
    """The input pixels tap kw of one output row's vector multiplies (from the row at `start`), zero over the
    padding."""
    s, t = layout.spec, layout.tiling
    sw, pw, dw = s.stride[1], s.padding[1], s.dilation[1]
    first = vector.col * sw + kw * dw - pw
    wide = t.width * sw
    # every lane inside the input row may be read (lanes past the vector's pixels are never stored)
    lanes = [0 <= first + m < s.w for m in range(wide)]
    ptr = elem_ptr(builder, start, first)
    if all(lanes):
        value = load_vec(builder, ptr, wide)
    else:
        value = masked_load(builder, ptr, vector_const(ir.VectorType(I1, wide), lanes), wide)
    if sw == 1:
        return value
    keep = vector_const(ir.VectorType(I32, t.width), [2 * p for p in pixel_order(t.width)])
    return builder.shuffle_vector(value, undef(value.type), keep)


def pixel_order(width: int) -> list[int]:
    """The pixel each lane of a stride-2 tile holds: the even lanes of a 2W-lane load in the order one in-lane
    shuffle (shufps, per 128 bits: lanes 0 and 2 of each half) leaves them, so no cross-lane shuffle is needed per
    load; the store puts the pixels back in order once per tile."""
    return [(width // 2) * (j // 2) + 2 * g + j % 2 for g in range(width // 4) for j in range(4)]


def _store(builder: ir.IRBuilder, layout: Layout, out, where, acc, group: list[_Vector], extra,
           epilogue: Epilogue | None) -> None:
    """Apply the epilogue to each accumulator vector at its (image, channel, pixel) and store it."""
    s, t = layout.spec, layout.tiling
    image, co0, oh0 = where
    _, _, oh_count, ow_count = s.out_shape
    for c, per_channel in enumerate(acc):
        channel = builder.add(co0, const64(c))
        plane = elem_ptr(builder, out, builder.mul(channel, const64(oh_count * ow_count)))
        for vector, value in zip(group, per_channel):
            col = builder.add(builder.mul(builder.add(oh0, const64(vector.row)), const64(ow_count)),
                              const64(vector.col))
            mask = lane_mask(t.width, vector.lanes) if vector.lanes < t.width else None
            if s.stride[1] == 2:
                order = pixel_order(t.width)
                back = vector_const(ir.VectorType(I32, t.width), [order.index(p) for p in range(t.width)])
                value = builder.shuffle_vector(value, undef(value.type), back)
            if epilogue is not None:
                value = epilogue(builder, value, TilePos(image, channel, col, mask, extra))
            store_vec(builder, value, elem_ptr(builder, plane, col), mask)


__all__ = ["Layout", "MIN_ROW_VECTORS", "direct_covers", "direct_preferred", "elem_vec", "emit_direct",
           "pixel_order", "rows_inside", "zero_row_constant"]
