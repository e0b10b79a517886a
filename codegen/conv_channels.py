"""Direct conv2d with the output channels across the vector lanes: AVX-512's kernel for long dot products.

A tile holds P output pixels of one output row (or of a few short rows) times V vectors of W output channels. Per
input channel and tap it loads the tap's V weight vectors and broadcasts each of the P input pixels the tap reads
straight from the NCHW input, each broadcast feeding V FMAs: P*V FMAs for P + V loads (8 x 3 on AVX-512: 24 FMAs, 11
loads, each tap loading its own pixels, so that pixels two taps share do not crowd the registers). Nothing in that
loop depends on the row width or the stride: a stride-2 tap broadcasts every other pixel, where the pixels-in-lanes
kernel (conv_direct.py) loads twice the lanes and shuffles them, and a row of 7 or 8 pixels fills a tile, where that
kernel fills half a vector. The weight is pre-packed once in blocks of W output channels (the blocked OIHW16o weight
of NCHWc kernels), zero past the last channel, a tile's V blocks interleaved so that each tap's weights are one
contiguous run. The activations stay NCHW: at the store the tile is transposed in registers (log2 P rounds of
two-source shuffles) into P-pixel runs of one channel, which take the epilogue and are stored in place; that costs about
as much as a few input channels' FMAs, so the kernel pays off for long dot products (conv.py's rule).

Which pixels a tile's taps read over the left or right padding is static, so those FMAs are left out; one tile
function serves every column tile with the same set of left-out taps (the first, the last, and all of the middle
ones of a wide row), its column given at run time. A row is cut into tiles as evenly as P allows. Input rows over
the top or bottom padding read a constant row of zeros, chosen by one select per kernel row, as in conv_direct.py.
Where an output row is at most half of P, a tile takes as many whole rows as fit (a 4x4 output in tiles of 2 rows,
a 2x2 output in one tile), its pixels one run in each output plane. Threads claim units of (image, group, channel
tile, row block), row blocks innermost, so consecutive units read one weight tile; where a group's weight is larger
than half of L2, units of (group, channel tile, image, row block), so that the weight tile serves every image
before the next is read; at batch 1 with a weight of at most half of L2, units of (row block, group, channel tile),
so that a thread's units are a band of rows (conv_direct.rows_first).

emit_channels has conv.py's signature; it reads the weight pre-packed (conv.py picks it only then).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from .cache_sizes import host_cache_sizes
from .claims import claimed_chunks
from .conv_direct import elem_vec, rows_first, rows_inside, zero_row_constant
from .gemm_kernel import (F32, I32, I64, PTR, Epilogue, Tiling, TilePos, const64, elem_ptr, lane_mask, load_vec,
                          mul_add, store_vec, vec_type)
from .loops import (alloca, define_function, entry_builder, for_range, opaque, splat, undef, unflatten, vector_const,
                    vector_registers, zeros)

if TYPE_CHECKING:
    from .conv import ConvSpec

# (P pixels, V channel vectors) per vector width: P*V accumulators, V weight vectors and a broadcast within the
# registers (32 zmm; 16 ymm or xmm). P is a power of two, at most W, for the transpose. With 16 registers, 4 x 3
# (all 16 in use) ran at half the speed of 4 x 2 on 3x3 layers: LLVM reuses accumulators as temporaries.
_TILES = {16: (8, 3), 8: (4, 2), 4: (4, 2)}
MOST_TAPS = 49  # unrolled per input channel: up to 7x7


def channels_covers(spec: ConvSpec, width: int) -> bool:
    """Whether the kernel can run `spec` at `width` lanes at all: it reads the weight pre-packed, and a conv without
    output channels or without input channels (nothing to tile, or all zeros) is left to the others."""
    return (spec.prepacked_weight and not spec.depthwise and width in _TILES
            and spec.kh * spec.kw <= MOST_TAPS and spec.c_out > 0 and spec.k > 0)


@dataclass(frozen=True)
class ChannelLayout:
    """Static facts of one conv's channel tiles: the tile shape, the weight blocks and the column tiles."""

    spec: ConvSpec
    width: int
    fma: bool = True
    l2: int = field(default_factory=lambda: host_cache_sizes().l2)

    @property
    def pixels(self) -> int:
        return _TILES[self.width][0]

    @property
    def vectors(self) -> int:
        """Channel vectors per tile: at most the registers allow, the group's blocks split evenly (64 channels on
        AVX-512 as 2 + 2 vectors, not 3 + 1: a tile of one vector loads nearly as much as it computes)."""
        return -(-self.blocks // self.channel_tiles)

    @property
    def taps(self) -> int:
        return self.spec.kh * self.spec.kw

    @property
    def blocks(self) -> int:
        """Weight blocks of W output channels per group."""
        return -(-self.spec.group_out // self.width)

    @property
    def channel_tiles(self) -> int:
        return -(-self.blocks // _TILES[self.width][1])

    @property
    def last_vectors(self) -> int:
        """Vectors of the last channel tile of a group."""
        return self.blocks - (self.channel_tiles - 1) * self.vectors

    @property
    def last_channels(self) -> int:
        """Channels of the last vector of a group."""
        return self.spec.group_out - (self.blocks - 1) * self.width

    @property
    def weight_floats(self) -> int:
        return self.spec.groups * self.blocks * self.spec.k * self.width

    @property
    def images_inner(self) -> bool:
        """Whether the units take the images innermost after the rows: a group's packed weight larger than half of
        L2 would otherwise stream from L3 or memory once per image (ResNet's 512-channel layers: 9.4 MB, against
        8 KB of input per image), where one image's rows are the smaller thing to read again."""
        return 4 * self.weight_floats // self.spec.groups > self.l2 // 2

    @property
    def unit_order(self) -> tuple[tuple[str, int], ...]:
        """The digits of a unit and their counts, outermost first (the module doc)."""
        s, tiles, rows = self.spec, ("channel tile", self.channel_tiles), ("row block", self.row_blocks)
        if rows_first(s, 4 * self.weight_floats, self.l2):
            return ("image", s.n), rows, ("group", s.groups), tiles
        if self.images_inner:
            return ("group", s.groups), tiles, ("image", s.n), rows
        return ("image", s.n), ("group", s.groups), tiles, rows

    @property
    def rows(self) -> int:
        """Output rows per tile: as many whole rows as P pixels hold where a row is at most half of them (4x4 and
        2x2 outputs, whose one-row tiles would load as much per FMA as wide ones and compute a half or a quarter
        as much), else 1."""
        oh, ow = self.spec.out_shape[2:]
        return max(1, min(oh, self.pixels // ow)) if 2 * ow <= self.pixels else 1

    @property
    def row_blocks(self) -> int:
        return -(-self.spec.out_shape[2] // self.rows)

    def column_tiles(self) -> list[tuple[int, int]]:
        """(first output column, pixels) of each tile along an output row: as few tiles as P allows, as evenly
        filled (a 28-pixel row as 4 x 7, not 3 x 8 + 4: the 4-pixel tile would load as much per FMA as the others
        and compute half as much); tiles of several rows take whole rows."""
        ow, p = self.spec.out_shape[3], self.pixels
        size = -(-ow // -(-ow // p))
        return [(c, min(size, ow - c)) for c in range(0, ow, size)]

    def skipped(self, col: int, count: int) -> tuple[tuple[int, int], ...]:
        """The (pixel, kernel column) taps of a column tile at `col` that fall on the left or right padding."""
        s = self.spec
        sw, pw, dw = s.stride[1], s.padding[1], s.dilation[1]
        return tuple((p, kw) for p in range(count) for kw in range(s.kw)
                     if not 0 <= (col + p) * sw + kw * dw - pw < s.w)


def emit_channels_prepack(module: ir.Module, name: str, spec: ConvSpec, width: int) -> ir.Function:
    """Emit `void name(ptr w, ptr dst)`: the (c_out, c/groups, kh, kw) weight by channel tiles, each tile's V
    vectors of W channels side by side per (input channel, tap), so a tap's weights are one contiguous run:
    dst[tile start + kk*V'*W + v*W + j] = w[g*group_out + (t*V + v)*W + j, kk] (V' the tile's vectors), zero past
    the group's channels."""
    layout = ChannelLayout(spec, width)
    fn = define_function(module, name, [("w", PTR), ("dst", PTR)])
    w, dst = fn.args
    b = entry_builder(fn)
    k, gout, per_tile = layout.spec.k, layout.spec.group_out, layout.vectors
    with for_range(b, 0, spec.groups * layout.blocks, name="block") as block:
        group = b.udiv(block, const64(layout.blocks))
        within = b.urem(block, const64(layout.blocks))
        tile = b.udiv(within, const64(per_tile))
        last = b.icmp_unsigned("==", tile, const64(layout.channel_tiles - 1))
        run = b.select(last, const64(layout.last_vectors * width), const64(per_tile * width))
        start = b.mul(b.add(b.mul(group, const64(layout.blocks)), b.mul(tile, const64(per_tile))), const64(k * width))
        first = b.add(b.mul(group, const64(gout)), b.mul(within, const64(width)))
        end = b.add(b.mul(group, const64(gout)), const64(gout))
        with for_range(b, 0, width, name="lane") as j:
            channel = b.add(first, j)
            inside = b.icmp_unsigned("<", channel, end)
            source = elem_ptr(b, w, b.mul(b.select(inside, channel, first), const64(k)))
            lane = b.add(b.mul(b.urem(within, const64(per_tile)), const64(width)), j)
            target = elem_ptr(b, dst, b.add(start, lane))
            with for_range(b, 0, k, name="kk") as kk:
                value = b.load(elem_ptr(b, source, kk), typ=F32, align=4)
                value = b.select(inside, value, ir.Constant(F32, 0.0))
                b.store(value, elem_ptr(b, target, b.mul(kk, run)), align=4)
    b.ret_void()
    return fn


def emit_channels(module: ir.Module, name: str, spec: ConvSpec, tiling: Tiling, epilogue: Epilogue | None,
                  n_extra: int, arguments: list[tuple[str, ir.Type]]) -> ir.Function:
    """Emit the conv2d kernel `name` (conv.py's signature; scratch unused) on channel tiles."""
    layout = ChannelLayout(spec, tiling.width, tiling.fma)
    fn = define_function(module, name, arguments)
    x, w, out, _, tid, nthreads, claim, _, *extra = fn.args
    builder = entry_builder(fn)
    s = spec
    units = s.n * s.groups * layout.channel_tiles * layout.row_blocks
    if units == 0 or 0 in s.out_shape:
        builder.ret_void()
        return fn
    zeros_row = None if rows_inside(s) else zero_row_constant(module, f"{name}.zeros", s.w)
    tiles: dict[tuple, ir.Function] = {}
    stores: dict[tuple[int, int], ir.Function] = {}

    def store_fn(count: int, channels: int) -> ir.Function:
        if (count, channels) not in stores:
            stores[count, channels] = _emit_store(module, f"{name}.s{len(stores)}", layout, (count, channels),
                                                  epilogue, n_extra)
        return stores[count, channels]

    def tile_fn(vectors: int, channels: int, count: int, skipped: tuple, rows: int) -> ir.Function:
        key = (vectors, channels, count, skipped, rows)
        if key not in tiles:
            tiles[key] = _emit_tile(module, f"{name}.t{len(tiles)}", layout, key, zeros_row, store_fn, n_extra)
        return tiles[key]
    with claimed_chunks(builder, claim, tid, nthreads, units, name="tiles", work=spec.flops) as (u0, u1):
        with for_range(builder, u0, u1, name="unit") as unit:
            _unit(builder, layout, tile_fn, (x, w, out), unit, tuple(extra))
    builder.ret_void()
    return fn


def _unit(builder: ir.IRBuilder, layout: ChannelLayout, tile_fn, ptrs, unit, extra) -> None:
    """Unit (image, group, channel tile, row block): every column tile of the block's rows."""
    s = layout.spec
    x, w, out = ptrs
    _, c_out, oh_count, ow_count = s.out_shape
    digits = unflatten(builder, unit, layout.unit_order)
    image, group, ctile, block_index = (digits[d] for d in ("image", "group", "channel tile", "row block"))
    oh = builder.mul(block_index, const64(layout.rows))
    x_group = elem_ptr(builder, x, builder.mul(builder.add(builder.mul(image, const64(s.c)),
                                                            builder.mul(group, const64(layout.spec.group_in))),
                                                const64(s.h * s.w)))
    block = builder.add(builder.mul(group, const64(layout.blocks)), builder.mul(ctile, const64(layout.vectors)))
    w_tile = elem_ptr(builder, w, builder.mul(block, const64(layout.spec.k * layout.width)))
    out_image = elem_ptr(builder, out, builder.mul(image, const64(c_out * oh_count * ow_count)))
    co0 = builder.add(builder.mul(group, const64(layout.spec.group_out)),
                      builder.mul(ctile, const64(layout.vectors * layout.width)))
    last_vectors, last_channels = layout.last_vectors, layout.last_channels

    tail_rows = oh_count - (layout.row_blocks - 1) * layout.rows

    def row_block(vectors: int, channels: int, rows: int) -> None:
        for col, count in layout.column_tiles():
            fn = tile_fn(vectors, channels, count, layout.skipped(col, count), rows)
            builder.call(fn, [x_group, w_tile, out_image, image, co0, oh, const64(col), *extra])

    def columns(vectors: int, channels: int) -> None:
        """Every column tile of the row block, for a channel tile of `vectors` vectors, `channels` in the last."""
        if tail_rows == layout.rows:
            row_block(vectors, channels, layout.rows)
            return
        is_tail = builder.icmp_unsigned("==", block_index, const64(layout.row_blocks - 1))
        with builder.if_else(is_tail) as (then, otherwise):
            with then:
                row_block(vectors, channels, tail_rows)
            with otherwise:
                row_block(vectors, channels, layout.rows)
    if layout.channel_tiles == 1 or (last_vectors == layout.vectors and last_channels == layout.width):
        columns(last_vectors if layout.channel_tiles == 1 else layout.vectors,
                last_channels if layout.channel_tiles == 1 else layout.width)
        return
    is_last = builder.icmp_unsigned("==", ctile, const64(layout.channel_tiles - 1))
    with builder.if_else(is_last) as (then, otherwise):
        with then:
            columns(last_vectors, last_channels)
        with otherwise:
            columns(layout.vectors, layout.width)


def _emit_tile(module: ir.Module, name: str, layout: ChannelLayout, key: tuple, zeros_row: ir.GlobalVariable | None,
               store_fn, n_extra: int) -> ir.Function:
    """Emit `void name(x_group, w_tile, out_image, image, co0, oh, col, extra...)`: `vectors` channel vectors
    (`channels` valid in the last) from co0 times `count` pixels from column col of each of `rows` output rows from
    oh (rows > 1 only with whole rows: the pixels are then one run in each plane), the taps in `skipped` left out;
    each channel vector is stored by the function store_fn(pixels, channels) returns."""
    vectors, channels, count, skipped, rows = key
    args = [("x", PTR), ("w", PTR), ("out", PTR), ("image", I64), ("co0", I64), ("oh", I64), ("col", I64)]
    fn = define_function(module, name, args + [(f"extra{i}", PTR) for i in range(n_extra)], internal=True)
    fn.attributes.add("noinline")  # one tile's work dwarfs a call; inlined, the variants multiply compile time
    x, w, out, image, co0, oh, col, *extra = fn.args
    builder = entry_builder(fn)
    acc = _accumulate(builder, layout, (x, w), (oh, col), (vectors, count, frozenset(skipped), rows), zeros_row)
    position = builder.add(builder.mul(oh, const64(layout.spec.out_shape[3])), col)
    pixels = rows * count
    for v in range(vectors):
        # a short tile repeats its last pixel (lanes the store leaves out): shuffles of constant zeros fold into
        # patterns LLVM's x86 backend cannot select
        runs = [acc[p][v] for p in range(pixels)] + [acc[pixels - 1][v]] * (layout.pixels - pixels)
        store = store_fn(pixels, channels if v == vectors - 1 else layout.width)
        builder.call(store, [*runs, out, image, builder.add(co0, const64(v * layout.width)), position, *extra])
    builder.ret_void()
    return fn


def _accumulate(builder: ir.IRBuilder, layout: ChannelLayout, ptrs, where, shape,
                zeros_row: ir.GlobalVariable | None) -> list[list[ir.Value]]:
    """acc[q][v] for the tile's pixels q = r * count + p (row r, column p): for each input channel and tap, weight
    vector v times the broadcast of the input pixel q's tap reads."""
    s, width = layout.spec, layout.width
    x, w = ptrs
    oh, col = where
    vectors, count, skipped, rows = shape
    pixels = rows * count
    (sh, sw), (ph, pw), (dh, dw) = s.stride, s.padding, s.dilation
    slots = alloca(builder, vec_type(width), "acc", pixels * vectors)
    for i in range(pixels * vectors):
        builder.store(zeros(vec_type(width)), elem_vec(builder, slots, i, width))
    offsets = {}  # (tile row, kernel row) -> (offset of the input row at the tile's column, inside the input)
    for r in range(rows):
        for kh in range(s.kh):
            ih = builder.add(builder.mul(builder.add(oh, const64(r)), const64(sh)), const64(kh * dh - ph))
            inside = None if zeros_row is None else builder.icmp_unsigned("<", ih, const64(s.h))
            offsets[r, kh] = (builder.add(builder.mul(ih, const64(s.w)), builder.mul(col, const64(sw))), inside)
    run = vectors * width  # floats of one tap's weights
    unshared = _reuse_spills(width, vectors, pixels)
    with for_range(builder, 0, layout.spec.group_in, name="ci") as ci:
        plane = elem_ptr(builder, x, builder.mul(ci, const64(s.h * s.w)))
        w_ci = elem_ptr(builder, w, builder.mul(ci, const64(layout.taps * run)))
        acc = [[builder.load(elem_vec(builder, slots, q * vectors + v, width)) for v in range(vectors)]
               for q in range(pixels)]
        starts = {}
        for key, (offset, inside) in offsets.items():
            starts[key] = elem_ptr(builder, plane, offset)
            if inside is not None:  # the row of zeros stands in for the input row, at the tile's column
                starts[key] = builder.select(inside, starts[key],
                                             elem_ptr(builder, zeros_row, builder.mul(col, const64(sw))))
        for kh in range(s.kh):
            for kw in range(s.kw):
                tap = kh * s.kw + kw
                weights = [load_vec(builder, elem_ptr(builder, w_ci, tap * run + v * width), width)
                           for v in range(vectors)]
                bases = {r: elem_ptr(builder, starts[r, kh], kw * dw - pw) for r in range(rows)}
                if unshared:
                    bases = {r: opaque(builder, base) for r, base in bases.items()}
                for q in range(pixels):
                    r, p = divmod(q, count)
                    if (p, kw) in skipped:
                        continue
                    pixel = builder.load(elem_ptr(builder, bases[r], p * sw), typ=F32, align=4)
                    broadcast = splat(builder, pixel, width)
                    acc[q] = [mul_add(builder, weight, broadcast, a, layout.fma) for weight, a in zip(weights, acc[q])]
        for q in range(pixels):
            for v in range(vectors):
                builder.store(acc[q][v], elem_vec(builder, slots, q * vectors + v, width))
    return [[builder.load(elem_vec(builder, slots, q * vectors + v, width)) for v in range(vectors)]
            for q in range(pixels)]


def _reuse_spills(width: int, vectors: int, pixels: int) -> bool:
    """Whether a pixel that two taps read (stride 2: tap kw=2 of pixel p and kw=0 of p+1), loaded once as LLVM
    merges the loads of one address, would outgrow the registers: its broadcast lives from one tap to a later one
    beside the P*V accumulators and V weights. On 8 x 3 AVX-512 tiles it does, and LLVM spilled accumulators to the
    stack on every tap (a 64->128 stride-2 layer ran 1.03-1.2x slower); there each tap loads its own pixels."""
    return pixels * vectors + vectors + pixels + 1 > vector_registers(width)


def transpose(builder: ir.IRBuilder, rows: list[ir.Value], width: int) -> list[ir.Value]:
    """P vectors of W lanes (pixel p's W channels; P a power of two, at most W) -> P vectors each holding W/P
    channels' P pixels, channel-major: channel j is in vector j // (W/P), lanes (j % (W/P))*P ... +P. Each round
    merges groups of n pixels pairwise with one two-source shuffle per result vector."""
    groups = [[row] for row in rows]
    n = 1
    while len(groups) > 1:
        merged = []
        per = width // (2 * n)  # channels per vector after this round
        for a, b in zip(groups[0::2], groups[1::2]):
            out = []
            for i in range(2 * n):
                old, half = divmod(i, 2)
                lanes = []
                for c in range(per):
                    local = half * per + c
                    lanes += [local * n + q for q in range(n)] + [width + local * n + q for q in range(n)]
                mask = vector_const(ir.VectorType(I32, width), lanes)
                out.append(builder.shuffle_vector(a[old], b[old], mask))
            merged.append(out)
        groups, n = merged, 2 * n
    return groups[0]


def _emit_store(module: ir.Module, name: str, layout: ChannelLayout, shape: tuple[int, int],
                epilogue: Epilogue | None, n_extra: int) -> ir.Function:
    """Emit `void name(row_0 ... row_P-1, out_image, image, channel0, position, extra...)`: one channel vector of a
    tile (row p: pixel p's W channels) transposed into runs of `count` pixels for its first `channels` channels,
    each through the epilogue and stored at `position` (oh*OW + col) of its plane. One function per shape serves
    every tile and channel vector of a conv: unrolled into each, the transposes were half the kernel's compile time."""
    count, channels = shape
    s, width, pixels = layout.spec, layout.width, layout.pixels
    args = [(f"row{p}", vec_type(width)) for p in range(pixels)] + [("out", PTR), ("image", I64), ("channel0", I64),
                                                                    ("position", I64)]
    fn = define_function(module, name, args + [(f"extra{i}", PTR) for i in range(n_extra)], internal=True)
    fn.attributes.add("noinline")
    *rows, out, image, channel0, position, extra = (*fn.args[:pixels + 4], tuple(fn.args[pixels + 4:]))
    builder = entry_builder(fn)
    _, _, oh_count, ow_count = s.out_shape
    mask = lane_mask(pixels, count) if count < pixels else None
    per = width // pixels
    columns = transpose(builder, rows, width)
    for j in range(channels):
        run = builder.shuffle_vector(columns[j // per], undef(vec_type(width)), vector_const(
            ir.VectorType(I32, pixels), [(j % per) * pixels + q for q in range(pixels)]))
        channel = builder.add(channel0, const64(j))
        if epilogue is not None:
            run = epilogue(builder, run, TilePos(image, channel, position, mask, extra))
        plane = elem_ptr(builder, out, builder.mul(channel, const64(oh_count * ow_count)))
        store_vec(builder, run, elem_ptr(builder, plane, position), mask)
    builder.ret_void()
    return fn


__all__ = ["ChannelLayout", "channels_covers", "emit_channels", "emit_channels_prepack", "transpose"]
