"""Ops along the lines of one axis: running sums and products (cumsum, cumprod: out[j] = out[j - 1] op x[j] in index
order, as numpy computes them, so float results round identically; along a leading axis W neighbouring lines side
by side), sort (a stable sort in per-thread scratch: LSD radix over the bytes of an order-preserving key for lines of
4-byte values, else a merge sort) and topk (sort's first k: for small k, W lines side by side in registers, or kept
by insertion in one pass). The (outer, inner) lines, or groups of W of them, are the units threads split."""
from __future__ import annotations

from math import prod

import llvmlite.ir as ir

from braze.ir.graph import Node
from braze.ir.ops._common import normalize_axis
from braze.ir.types import DType, int64

from ..loops import I1, I8, I32, I64, PTR, alloca, for_range, i64, splat, vector_loop
from .base import (Kernel, KernelContext, KernelSpec, begin_kernel, claimed_unit_loop, constant, gather, iota, load,
                   register, register_type, scatter, store)
from .elementwise import compare


_COMBINE = {"cumsum": ("fadd", "add"), "cumprod": ("fmul", "mul")}


@register(*_COMBINE)
def lower_scan(node: Node, ctx: KernelContext) -> KernelSpec:
    x = node.inputs[0]
    shape = x.shape or (1,)
    axis = normalize_axis(node.op, node.attr["axis"], x.type.rank) if x.shape else 0
    combine = _COMBINE[node.op][0 if x.dtype.is_float else 1]
    outer, size, inner = prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    if x.type.size == 0:
        return k.finish(node.op)
    width = k.width if inner >= k.width else 1
    groups, full = -(-inner // width), inner // width

    def lines(p: ir.Value, q: ir.Value, lanes: int) -> None:
        """`lanes` neighbouring lines from column q side by side: out[j] = out[j - 1] op x[j], the running value
        kept in registers."""
        start = b.add(b.mul(p, i64(size * inner)), q)
        first = load(b, k.ins[0], start, x.dtype, lanes)
        running = alloca(b, first.type, "running")
        b.store(first, running)
        store(b, first, k.outs[0], start, x.dtype)
        with for_range(b, 1, size, name="j") as j:
            at = b.add(start, b.mul(j, i64(inner)))
            value = getattr(b, combine)(b.load(running), load(b, k.ins[0], at, x.dtype, lanes))
            b.store(value, running)
            store(b, value, k.outs[0], at, x.dtype)

    with claimed_unit_loop(k, [outer, groups], name="line") as (p, g):
        q0 = b.mul(g, i64(width))
        if full == groups:
            lines(p, q0, width)
        else:   # the last inner % W lines one at a time
            with b.if_else(b.icmp_signed("<", g, i64(full))) as (then, otherwise):
                with then:
                    lines(p, q0, width)
                with otherwise:
                    with for_range(b, q0, inner, name="q") as q:
                        lines(p, q, 1)
    return k.finish(node.op)


def _before(b: ir.IRBuilder, a: ir.Value, c: ir.Value, dtype: DType, descending: bool) -> ir.Value:
    """Whether value a sorts strictly before value c: NaN is the largest value, as in the reference."""
    if not dtype.is_float:
        return compare(b, ">" if descending else "<", a, c, dtype)
    a_nan, c_nan = b.fcmp_unordered("uno", a, a), b.fcmp_unordered("uno", c, c)
    if descending:
        return b.or_(b.fcmp_ordered(">", a, c), b.and_(a_nan, b.not_(c_nan)))
    return b.or_(b.fcmp_ordered("<", a, c), b.and_(c_nan, b.not_(a_nan)))


@register("sort")
def lower_sort(node: Node, ctx: KernelContext) -> KernelSpec:
    """A stable sort of each line in scratch: radix for long lines of 4-byte values (_radix_lines), else bottom-up
    merge sort: the line and its positions copied into scratch, runs of 1, 2, 4, ... merged between two scratch
    copies (ceil(log2 n) passes of n steps: O(n log n)), the result copied out."""
    x = node.inputs[0]
    axis = normalize_axis("sort", node.attr["axis"], x.type.rank) if x.shape else 0
    return _sorted_lines(node, ctx, axis, x.shape[axis] if x.shape else 1, node.attr["descending"])


# The largest k whose top k of a line are kept by insertion: each value is compared with the k-th kept and, where it
# sorts before it, moved into place (k steps), which random lines need about k log(n / k) times in n. Past it, and
# where k is more than a quarter of the line, the line is merge-sorted whole and its first k copied out.
SELECT_MOST = 64


# Lines side by side, one per lane, with their first k kept in registers (_lines_in_lanes): for k up to this many,
# along an inner axis (lines W apart, read by vector loads), or along the last axis of lines up to LANE_LINE_MOST
# long (read by gathers); a router's top 2 of 8 experts per token was 60 ns a token read line by line.
LANE_KEPT_MOST = 8
LANE_LINE_MOST = 128
LANE_DTYPES = ("f32", "f64", "i32", "i64")


@register("topk")
def lower_topk(node: Node, ctx: KernelContext) -> KernelSpec:
    """The first k of each line in sort's order (stable, NaN largest): lines side by side in vector lanes for small
    k over short lines or an inner axis, kept by insertion for small k (one comparison per vector of values that do
    not enter), else from a merge sort of the line."""
    x, count, descending = node.inputs[0], node.attr["k"], node.attr["largest"]
    axis = normalize_axis("topk", node.attr["axis"], x.type.rank)
    outer, size, inner = prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1:])
    width = ctx.target.vector_width
    if 0 < count <= LANE_KEPT_MOST and x.dtype.name in LANE_DTYPES and width > 1 and (
            inner >= width or (inner == 1 and size <= LANE_LINE_MOST and outer >= width)):
        return _lines_in_lanes(node, ctx, (outer, size, inner), count, descending)
    if count > SELECT_MOST or 4 * count > x.shape[axis]:
        return _sorted_lines(node, ctx, axis, count, descending)
    return _selected_lines(node, ctx, axis, count, descending)


def _lines_in_lanes(node: Node, ctx: KernelContext, dims: tuple[int, int, int], count: int,
                    descending: bool) -> KernelSpec:
    """W lines at once, line l in lane l: each value of the lines goes through the k kept slots (vectors held in
    registers) as through an insertion network, taking the first slot it sorts strictly before (or an empty one)
    and pushing every later kept value one slot down; a value sorting before none stays out. Branch-free, so short
    lines cost no per-line overhead. Lines along an inner axis lie side by side in memory (vector loads); lines
    along the last axis are W rows, read a column at a time by a gather."""
    x, positions = node.inputs[0], node.outputs[1].dtype
    outer, size, inner = dims
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b, width = k.builder, k.width
    if node.outputs[0].type.size == 0:
        return k.finish(node.op)
    rows = inner == 1   # lanes are rows (a gather per column), else neighbouring positions of an inner axis
    lines = outer if rows else inner
    groups = -(-lines // width)
    vector, places = register_type(x.dtype, width), register_type(positions, width)
    kept = [(alloca(b, vector, f"kept{s}"), alloca(b, places, f"place{s}")) for s in range(count)]
    lane_offsets = b.mul(iota(I64, width), splat(b, i64(size if rows else 1), width))
    with claimed_unit_loop(k, [groups] if rows else [outer, groups], name="lines") as index:
        first = b.mul(index[-1], i64(width))
        valid = b.sub(i64(lines), first)
        mask = b.icmp_signed("<", iota(I64, width), splat(b, valid, width))
        base = b.mul(first, i64(size)) if rows else b.add(b.mul(index[0], i64(size * inner)), first)
        for slot_value, slot_place in kept:   # empty slots are taken whatever they hold; defined all the same
            b.store(constant(x.dtype, 0, width), slot_value)
            b.store(constant(positions, 0, width), slot_place)
        with for_range(b, 0, size, name="j") as j:
            at = b.add(base, b.mul(j, i64(inner)))
            value = (gather(b, k.ins[0], b.add(splat(b, at, width), lane_offsets), x.dtype, mask,
                            constant(x.dtype, 0, width)) if rows else load(b, k.ins[0], at, x.dtype, width, mask))
            place = splat(b, b.trunc(j, places.element) if positions.bits < 64 else j, width)
            moving = ir.Constant(ir.VectorType(I1, width), None)
            for s, (slot_value, slot_place) in enumerate(kept):
                held, held_place = b.load(slot_value, typ=vector), b.load(slot_place, typ=places)
                empty = splat(b, b.icmp_signed("<=", j, i64(s)), width)
                moving = b.or_(moving, b.or_(empty, _before(b, value, held, x.dtype, descending)))
                b.store(b.select(moving, value, held), slot_value)
                b.store(b.select(moving, place, held_place), slot_place)
                value, place = b.select(moving, held, value), b.select(moving, held_place, place)
        out = b.mul(first, i64(count)) if rows else b.add(b.mul(index[0], i64(count * inner)), first)
        out_offsets = b.mul(iota(I64, width), splat(b, i64(count if rows else 1), width))
        for s, (slot_value, slot_place) in enumerate(kept):
            at = b.add(out, i64(s * (1 if rows else inner)))
            for result, slot, dtype in ((k.outs[0], slot_value, x.dtype), (k.outs[1], slot_place, positions)):
                held = b.load(slot, typ=register_type(dtype, width))
                if rows:
                    scatter(b, held, result, b.add(splat(b, at, width), out_offsets), dtype, mask)
                else:
                    store(b, held, result, at, dtype, mask)
    return k.finish(node.op)


# Lines of at least this many float32 or int32 values are radix-sorted: a pass to make the keys and count their
# bytes, then a stable scatter per byte that is not the same across the line (at most four passes), where a merge
# sort takes ceil(log2 n) passes of data-dependent merging.
RADIX_LEAST = 64
RADIX_DTYPES = ("f32", "i32")


def _sorted_lines(node: Node, ctx: KernelContext, axis: int, count: int, descending: bool) -> KernelSpec:
    """Each line sorted in scratch (radix or merge sort), its first `count` values and positions written out."""
    x, positions = node.inputs[0], node.outputs[1].dtype
    shape = x.shape or (1,)
    outer, size, inner = prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    if node.outputs[0].type.size == 0:
        return k.finish(node.op)
    if x.dtype.name in RADIX_DTYPES and size >= RADIX_LEAST and positions == int64:
        return _radix_lines(node, k, (outer, size, inner), count, descending)
    src, dst = _line_buffers(b, k.scratch, size, x.dtype, positions)
    with claimed_unit_loop(k, [outer, inner], name="line") as (p, q):
        start = b.add(b.mul(p, i64(size * inner)), q)
        with for_range(b, 0, size, name="i") as i:
            store(b, load(b, k.ins[0], b.add(start, b.mul(i, i64(inner))), x.dtype), src[0], i, x.dtype)
            store(b, i, src[1], i, positions)
        width = 1
        while width < size:
            _merge_pass(b, src, dst, size, width, x.dtype, descending)
            src, dst, width = dst, src, 2 * width
        _write_line(b, k, p, q, count, inner, src, x.dtype, positions)
    return k.finish(node.op, 2 * size * (positions.itemsize + x.dtype.itemsize))


def _radix_key(b: ir.IRBuilder, value: ir.Value, dtype: DType, descending: bool) -> ir.Value:
    """An unsigned 32-bit key ordered as sort orders the values: -0 as +0, every NaN as one value above +inf, and
    the bits inverted for a descending sort (ties stay ties, so the scatter keeps them in line order)."""
    if dtype.is_float:
        bits = b.select(b.fcmp_ordered("==", value, ir.Constant(value.type, 0.0)), ir.Constant(I32, 0),
                        b.bitcast(value, I32))
        negative = b.icmp_signed("<", bits, ir.Constant(I32, 0))
        key = b.xor(bits, b.select(negative, ir.Constant(I32, -1), ir.Constant(I32, -2 ** 31)))
        key = b.select(b.fcmp_unordered("uno", value, value), ir.Constant(I32, -1), key)
    else:
        key = b.xor(value, ir.Constant(I32, -2 ** 31))
    return b.not_(key) if descending else key


def _digit(b: ir.IRBuilder, key: ir.Value, byte: int) -> ir.Value:
    return b.zext(b.and_(b.lshr(key, ir.Constant(I32, 8 * byte)), ir.Constant(I32, 255)), I64)


def _radix_lines(node: Node, k: Kernel, dims: tuple[int, int, int], count: int, descending: bool) -> KernelSpec:
    """LSD radix sort of each line: keys (_radix_key) and positions into scratch while the four byte histograms
    are counted, then per byte that differs across the line a stable scatter into the other copy by the
    histogram's running offsets; the sorted positions gather the values from the operand (its exact bits: -0 and
    NaN payloads too)."""
    b, x = k.builder, node.inputs[0]
    outer, size, inner = dims
    keys = (k.scratch, b.gep(k.scratch, [i64(4 * size)], source_etype=I8))
    places = tuple(b.gep(k.scratch, [i64(8 * size + 8 * size * c)], source_etype=I8) for c in range(2))
    counts = b.gep(k.scratch, [i64(24 * size)], source_etype=I8)
    line = [alloca(b, PTR, name) for name in ("keys", "places", "keys.to", "places.to")]
    with claimed_unit_loop(k, [outer, inner], name="line") as (p, q):
        start = b.add(b.mul(p, i64(size * inner)), q)
        with for_range(b, 0, 4 * 256, name="z") as z:
            store(b, i64(0), counts, z, int64)
        with for_range(b, 0, size, name="i") as i:
            key = _radix_key(b, load(b, k.ins[0], b.add(start, b.mul(i, i64(inner))), x.dtype), x.dtype, descending)
            b.store(key, b.gep(keys[0], [i], source_etype=I32))
            store(b, i, places[0], i, int64)
            for byte in range(4):
                at = b.add(_digit(b, key, byte), i64(256 * byte))
                store(b, b.add(load(b, counts, at, int64), i64(1)), counts, at, int64)
        for ptr, value in zip(line, (keys[0], places[0], keys[1], places[1])):
            b.store(value, ptr)
        for byte in range(4):
            src_keys, src_places, dst_keys, dst_places = (b.load(ptr, typ=PTR) for ptr in line)
            first = _digit(b, b.load(src_keys, typ=I32), byte)
            mixed = b.icmp_signed("!=", load(b, counts, b.add(first, i64(256 * byte)), int64), i64(size))
            with b.if_then(mixed):   # a byte every key shares moves nothing
                total = alloca(b, I64, f"total{byte}")
                b.store(i64(0), total)
                with for_range(b, 256 * byte, 256 * (byte + 1), name="d") as d:
                    seen = load(b, counts, d, int64)
                    store(b, b.load(total, typ=I64), counts, d, int64)
                    b.store(b.add(b.load(total, typ=I64), seen), total)
                with for_range(b, 0, size, name="s") as i:
                    key = b.load(b.gep(src_keys, [i], source_etype=I32), typ=I32)
                    at = b.add(_digit(b, key, byte), i64(256 * byte))
                    to = load(b, counts, at, int64)
                    store(b, b.add(to, i64(1)), counts, at, int64)
                    b.store(key, b.gep(dst_keys, [to], source_etype=I32))
                    store(b, load(b, src_places, i, int64), dst_places, to, int64)
                for ptr, value in zip(line, (dst_keys, dst_places, src_keys, src_places)):
                    b.store(value, ptr)
        sorted_places = b.load(line[1], typ=PTR)
        out = b.add(b.mul(p, i64(count * inner)), q)
        with for_range(b, 0, count, name="o") as i:
            at = b.add(out, b.mul(i, i64(inner)))
            place = load(b, sorted_places, i, int64)
            store(b, load(b, k.ins[0], b.add(start, b.mul(place, i64(inner))), x.dtype), k.outs[0], at, x.dtype)
            store(b, place, k.outs[1], at, int64)
    return k.finish(node.op, 24 * size + 8 * 4 * 256)


def _selected_lines(node: Node, ctx: KernelContext, axis: int, count: int, descending: bool) -> KernelSpec:
    """Each line's first `count` in sort's order, kept sorted in scratch while the line is read once: a value enters
    while fewer are kept or where it sorts strictly before the last kept one (so an equal later value never displaces
    an earlier one: sort's stable order), and moves up past those it sorts before. A contiguous line is read a
    vector at a time, and a vector none of whose values would enter is passed over with one compare: once `count`
    are kept, few values of a long line enter (about count log(n / count) of n random ones)."""
    x, positions = node.inputs[0], node.outputs[1].dtype
    outer, size, inner = prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1:])
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    if node.outputs[0].type.size == 0:
        return k.finish(node.op)
    kept = (b.gep(k.scratch, [i64(count * positions.itemsize)], source_etype=I8), k.scratch)  # values, positions
    held, placed = alloca(b, I64, "held"), alloca(b, I1, "placed")

    def last_kept() -> tuple[ir.Value, ir.Value]:
        """Whether `count` values are kept, and the last of them (an arbitrary kept slot's value when not)."""
        full = b.icmp_signed("==", b.load(held, typ=I64), i64(count))
        return full, load(b, kept[0], b.select(full, i64(count - 1), i64(0)), x.dtype)

    def consider(start: ir.Value, i: ir.Value) -> None:
        """Value i of the line from `start` enters the kept ones if it sorts before the last (or there is room)."""
        value = load(b, k.ins[0], b.add(start, b.mul(i, i64(inner))), x.dtype)
        full, last = last_kept()
        with b.if_then(b.or_(b.not_(full), _before(b, value, last, x.dtype, descending))):
            n = b.load(held, typ=I64)
            slots = b.select(full, i64(count), b.add(n, i64(1)))
            b.store(slots, held)
            b.store(ir.Constant(I1, 0), placed)
            with for_range(b, 0, slots, name="slot") as r:   # from the last slot up: shift, then place once
                j = b.sub(b.sub(slots, i64(1)), r)
                above = b.select(b.icmp_signed(">", j, i64(0)), b.sub(j, i64(1)), i64(0))
                previous = load(b, kept[0], above, x.dtype)
                free = b.not_(b.load(placed, typ=I1))
                shift = b.and_(free, b.and_(b.icmp_signed(">", j, i64(0)),
                                            _before(b, value, previous, x.dtype, descending)))
                with b.if_then(free):
                    store(b, b.select(shift, previous, value), kept[0], j, x.dtype)
                    store(b, b.select(shift, load(b, kept[1], above, positions), i), kept[1], j, positions)
                    b.store(b.not_(shift), placed)

    width = k.width if inner == 1 and size >= 2 * k.width else 1
    with claimed_unit_loop(k, [outer, inner], name="line") as (p, q):
        start = b.add(b.mul(p, i64(size * inner)), q)
        b.store(i64(0), held)

        def values(i: ir.Value, lanes: int) -> None:
            if lanes == 1:
                consider(start, i)
                return
            full, last = last_kept()
            entering = _before(b, load(b, k.ins[0], b.add(start, i), x.dtype, lanes), splat(b, last, lanes), x.dtype,
                               descending)
            bits = b.zext(b.bitcast(entering, ir.IntType(lanes)), I64)
            bits = b.select(full, bits, i64(2 ** lanes - 1))
            with b.if_then(b.icmp_unsigned("!=", bits, i64(0))):
                with for_range(b, 0, lanes, name="lane") as lane:   # the last kept only ever rises: a value below
                    with b.if_then(b.trunc(b.lshr(bits, lane), I1)):   # it now never enters later
                        consider(start, b.add(i, lane))
        vector_loop(b, 0, size, width, values, name="i")
        _write_line(b, k, p, q, count, inner, kept, x.dtype, positions)
    return k.finish(node.op, count * (positions.itemsize + x.dtype.itemsize))


def _write_line(b: ir.IRBuilder, k: Kernel, p: ir.Value, q: ir.Value, count: int, inner: int,
                line: tuple[ir.Value, ir.Value], dtype: DType, positions: DType) -> None:
    """The first `count` (values, positions) of a line in scratch to line (p, q) of the results."""
    start = b.add(b.mul(p, i64(count * inner)), q)
    with for_range(b, 0, count, name="o") as i:
        at = b.add(start, b.mul(i, i64(inner)))
        store(b, load(b, line[0], i, dtype), k.outs[0], at, dtype)
        store(b, load(b, line[1], i, positions), k.outs[1], at, positions)


def _line_buffers(b: ir.IRBuilder, scratch: ir.Value, size: int, dtype: DType, positions: DType
                  ) -> tuple[tuple[ir.Value, ir.Value], tuple[ir.Value, ir.Value]]:
    """Two (values, positions) copies of one line in the thread's scratch: positions first, for their alignment."""
    offsets = (0, size * positions.itemsize, 2 * size * positions.itemsize,
               2 * size * positions.itemsize + size * dtype.itemsize)
    at = [b.gep(scratch, [i64(offset)], source_etype=I8) for offset in offsets]
    return (at[2], at[0]), (at[3], at[1])


def _merge_pass(b: ir.IRBuilder, src: tuple[ir.Value, ir.Value], dst: tuple[ir.Value, ir.Value], size: int,
                width: int, dtype: DType, descending: bool) -> None:
    """Merge each pair of adjacent sorted runs of `width` from src into dst, branch-free; the left run wins ties."""
    left, right = alloca(b, I64, "left"), alloca(b, I64, "right")
    with for_range(b, 0, size, 2 * width, name="run") as lo:
        mid, hi = _at_most(b, b.add(lo, i64(width)), size), _at_most(b, b.add(lo, i64(2 * width)), size)
        b.store(lo, left)
        b.store(mid, right)
        with for_range(b, lo, hi, name="m") as m:
            i, j = b.load(left, typ=I64), b.load(right, typ=I64)
            last = b.sub(hi, i64(1))   # exhausted cursors read a valid element that is then not taken
            i_at, j_at = _at_most(b, i, last), _at_most(b, j, last)
            vi, vj = load(b, src[0], i_at, dtype), load(b, src[0], j_at, dtype)
            take_right = b.and_(b.icmp_signed("<", j, hi),
                                b.or_(b.icmp_signed(">=", i, mid), _before(b, vj, vi, dtype, descending)))
            store(b, b.select(take_right, vj, vi), dst[0], m, dtype)
            store(b, b.select(take_right, load(b, src[1], j_at, int64), load(b, src[1], i_at, int64)), dst[1], m,
                  int64)
            b.store(b.select(take_right, i, b.add(i, i64(1))), left)
            b.store(b.select(take_right, b.add(j, i64(1)), j), right)


def _at_most(b: ir.IRBuilder, value: ir.Value, bound: ir.Value | int) -> ir.Value:
    bound = i64(bound)
    return b.select(b.icmp_signed("<", value, bound), value, bound)
