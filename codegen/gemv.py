"""GEMV: C = A @ B for a few rows of A (batch 1 to 3) with B read as the transpose of a row-major (n, k) matrix W.

At batch 1 a linear layer is memory-bound: each element of W is used once per row of A, so the kernel's speed is
the rate at which it streams W. This kernel reads W as the model stores it, without packing (so a weight needs no
second, packed copy): it takes four rows of W at a time (four sequential streams, which the hardware prefetchers
follow) and runs down them together a cache line per row per step, each pair of a row of W and a row of A with its
own vector accumulators. The vectors are summed across their lanes only once per group of rows, all rows of the
group at once (a transposing reduction). The last K vector is read masked, so no K needs a scalar tail. Threads
claim groups of W's rows (codegen/claims.py); after each chunk of rows the thread applies the epilogue to the C
columns it wrote (gemm_epilogue.emit_tile_epilogue, one copy per kernel).

On odd calls (the count of calls ended, codegen/abi.py: CALLS) each thread walks its groups backward. Weights
streamed in one direction call after call, a little larger than the L2 cache together, never find a line there (the
least recently used line is always the next one wanted); walked the other way, each call starts on the rows the
last call read last. The benchmark MLP at batch 1 (784 -> 512 -> 512 -> 10, 2.7 MB of weights, 2 MB of L2) on one
thread of a Xeon: 66.9 -> 54.1 us a call (medians of three processes each, old and new code alternating); on two
threads each keeps its half of every weight in its own L2 either way (14.2-15.2 against 14.6-17.7 us). Each row of
C is the same dot product whichever way the rows are walked, so the results are the same bytes.

gemv_applies says when emit_gemm takes this path: at most GEMV_ROWS rows of A in all batches, B's k stride 1 and
one B for every batch, A's columns contiguous.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Sequence

import llvmlite.ir as ir

from .abi import CALLS, SHARE_OFFSET
from .claims import claimed_chunks
from .gemm_epilogue import emit_tile_epilogue
from .gemm_kernel import (I32, I64, PTR, Epilogue, Tiling, carried_loop, const64, default_pos, elem_ptr,
                          lane_mask, load_vec, mul_add, vec_type)
from .gemm_pack import Strided, batch_offset, smin
from .loops import (I1, I8, define_function, entry_builder, for_range, mark_explicit, optimize_for_size, vector_const,
                    zeros)

# Rows of A (over all batches) up to which the GEMV kernel replaces the GEMM: at four, on a weight in the cache, the
# GEMM's register tile (which reuses each loaded vector of W six times) measured faster.
GEMV_ROWS = 3
# Bytes of each row of W a loop step reads: one cache line.
LINE_BYTES = 64


@dataclass(frozen=True)
class GemvShape:
    """The register blocking for `m` rows of A: `rows` rows of W at a time, `sets` accumulators per pair of rows
    (consecutive vectors of k alternate between them)."""

    m: int
    rows: int
    sets: int = 1


def gemv_shape(m: int) -> GemvShape:
    """Four rows of W at a time, and at batch 1 two accumulators per row: 8-12 FMA chains in flight, at most 15
    vector registers with the vectors of x. (Eight rows, or a software prefetch ahead of each row, measured no
    faster on a 4096 x 4096 weight and slower on weights in the cache.)"""
    return GemvShape(m, 4, 2 if m == 1 else 1)


def gemv_applies(m: int, batch: Sequence[int], a, b) -> bool:
    """Whether the GEMV kernel computes this problem: few rows of A, B the transpose of a row-major matrix."""
    return (isinstance(a, Strided) and isinstance(b, Strided) and b.rs == 1 and not any(b.batch_strides)
            and a.cs == 1 and 0 < m * prod(batch) <= GEMV_ROWS)


def emit_gemv(module: ir.Module, name: str, m: int, n: int, k: int, batch: tuple[int, ...], a: Strided, b: Strided,
              c: Strided, tiling: Tiling, epilogue: Epilogue | None = None, n_extra: int = 0) -> ir.Function:
    """Emit the GEMM signature's `void name(a, b, c, scratch, tid, nthreads, claim, share, extra...)` for a problem
    gemv_applies to (the scratch is unused; through the share words it reads the call count, or walks forward when
    they are null)."""
    fn = define_gemv(module, name, n_extra)
    a_ptr, b_ptr, c_ptr, _, tid, nthreads, claim, share, *extra = fn.args
    builder = entry_builder(fn)
    backward = _odd_call(builder, share)
    rows = [divmod(i, m) for i in range(m * prod(batch))]  # (batch index, row) of every row of A
    x_rows = [row_offset(builder, a_ptr, a, batch, index, row) for index, row in rows]
    c_rows = [row_offset(builder, c_ptr, c, batch, index, row) for index, row in rows]
    shape = gemv_shape(len(rows))
    group = _emit_group(module, f"{name}.group", shape, k, b.cs, tiling)
    tail = _emit_group(module, f"{name}.tail", GemvShape(shape.m, n % shape.rows, shape.sets), k, b.cs, tiling) \
        if n % shape.rows else None
    finish = emit_tile_epilogue(module, f"{name}.epilogue", tiling.width, 0, True, epilogue, n_extra, default_pos) \
        if epilogue is not None else None
    groups = -(-n // shape.rows)
    with claimed_chunks(builder, claim, tid, nthreads, groups, name="rows", work=2 * len(rows) * n * k) as (g0, g1):
        first = builder.mul(g0, const64(shape.rows))
        last = smin(builder, builder.mul(g1, const64(shape.rows)), const64(n))
        whole = smin(builder, g1, const64(n // shape.rows))
        with for_range(builder, g0, whole, name="group") as step:
            g = builder.select(backward, builder.sub(builder.add(g0, builder.sub(whole, const64(1))), step), step)
            col = builder.mul(g, const64(shape.rows))
            builder.call(group, [elem_ptr(builder, b_ptr, builder.mul(col, const64(b.cs))), col, *x_rows, *c_rows])
        if tail is not None:
            with builder.if_then(builder.icmp_signed("==", g1, const64(groups))):
                col = const64(n // shape.rows * shape.rows)
                builder.call(tail, [elem_ptr(builder, b_ptr, builder.mul(col, const64(b.cs))), col, *x_rows, *c_rows])
        if finish is not None:
            apply_epilogue(builder, finish, rows, c_rows, first, last, tiling.width, extra)
    builder.ret_void()
    return fn


def define_gemv(module: ir.Module, name: str, n_extra: int) -> ir.Function:
    """A GEMV kernel function with the GEMM signature `void name(a, b, c, scratch, tid, nthreads, claim, share,
    extra...)`, compiled for size in a module marked for the short optimization pipeline (mark_explicit)."""
    mark_explicit(module)
    args = [("a", PTR), ("b", PTR), ("c", PTR), ("scratch", PTR), ("tid", I64), ("nthreads", I64), ("claim", PTR),
            ("share", PTR)]
    return optimize_for_size(define_function(module, name, args + [(f"extra{i}", PTR) for i in range(n_extra)]))


def _odd_call(builder: ir.IRBuilder, share: ir.Value) -> ir.Value:
    """Whether this call walks W's rows backward: on odd calls (codegen/abi.py: CALLS, read through the share words;
    never without them). A weight somewhat larger than the L2 cache (the MLP's 2.7 MB against 2 MB) then starts each
    call on the rows the last one read last, still in the L2, where a walk in one direction finds none of them."""
    odd = builder.alloca(I1, name="odd")
    builder.store(ir.Constant(I1, 0), odd)
    with builder.if_then(builder.icmp_unsigned("!=", share, ir.Constant(PTR, None))):
        word = builder.gep(share, [const64(CALLS - SHARE_OFFSET)], inbounds=True, source_etype=I8)
        count = builder.load_atomic(word, "monotonic", 8, typ=I64)
        builder.store(builder.trunc(count, I1), odd)
    return builder.load(odd, typ=I1, name="backward")


def row_offset(builder: ir.IRBuilder, base: ir.Value, op: Strided, batch: tuple[int, ...], index: int,
               row: int) -> ir.Value:
    """The address of row `row` of batch `index` of an operand."""
    offset = builder.add(batch_offset(builder, const64(index), batch, op.batch_strides), const64(row * op.rs))
    return elem_ptr(builder, base, offset)


def apply_epilogue(builder: ir.IRBuilder, finish: ir.Function, rows, c_rows, first, last, width: int,
                   extra) -> None:
    """The epilogue over C[row, first:last] of every row of A, in vectors of `width` and a masked last one."""
    count = builder.sub(last, first)
    vectors = builder.sdiv(count, const64(width))
    tail = builder.srem(count, const64(width))
    for (index, row), c_row in zip(rows, c_rows):
        builder.call(finish, [elem_ptr(builder, c_row, first), const64(1), vectors, tail, const64(index),
                              const64(row), first, *extra])


def _emit_group(module: ir.Module, name: str, shape: GemvShape, k: int, ldw: int, tiling: Tiling) -> ir.Function:
    """Emit `void name(w, col, x_0.., c_0..)`: C[i, col + r] = x_i . W[r, :] for the group's rows r (W's row r at
    w + r*ldw) and every row i of A."""
    args = [("w", PTR), ("col", I64)] + [(f"x{i}", PTR) for i in range(shape.m)] + \
        [(f"c{i}", PTR) for i in range(shape.m)]
    fn = define_function(module, name, args, internal=True)
    fn.attributes.add("noinline")  # one body per group shape, however many call sites
    w, col, *rest = fn.args
    xs, cs = rest[:shape.m], rest[shape.m:]
    builder = entry_builder(fn)
    width = tiling.width
    w_rows = [elem_ptr(builder, w, r * ldw) for r in range(shape.rows)]
    acc = _dot(builder, xs, w_rows, k, shape, tiling)
    for i in range(shape.m):
        sums = _row_sums(builder, [acc[i][r] for r in range(shape.rows)], width)
        _store_sums(builder, sums, elem_ptr(builder, cs[i], col), shape.rows)
    builder.ret_void()
    return fn


def _dot(builder: ir.IRBuilder, xs, w_rows, k: int, shape: GemvShape, tiling: Tiling):
    """acc[i][r]: a vector whose lanes sum to x_i . W[r, :k], the masked tail included. Each step reads one cache
    line of every row of W."""
    width = tiling.width
    vectors = max(1, LINE_BYTES // (4 * width))
    zero = zeros(vec_type(width))
    per_set = shape.m * shape.rows

    def step(kv: ir.Value, acc: list, count: int, mask=None) -> list:
        out = list(acc)
        for u in range(count):
            at = builder.add(kv, const64(u * width))
            x = [load_vec(builder, elem_ptr(builder, p, at), width, mask) for p in xs]
            for r, row in enumerate(w_rows):
                wv = load_vec(builder, elem_ptr(builder, row, at), width, mask)
                for i in range(shape.m):
                    slot = ((u % shape.sets) * shape.m + i) * shape.rows + r
                    out[slot] = mul_add(builder, wv, x[i], out[slot], tiling.fma)
        return out

    _, acc = carried_loop(builder, const64(0), const64(k), vectors * width, [zero] * (per_set * shape.sets),
                          lambda kv, carried: step(kv, carried, vectors), "gv")
    done = k // (vectors * width) * vectors * width
    if (k - done) // width:
        acc = step(const64(done), acc, (k - done) // width)
    if k % width:
        acc = step(const64(k - k % width), acc, 1, lane_mask(width, k % width))
    sums = acc[:per_set]
    for s in range(1, shape.sets):
        sums = [builder.fadd(x, y) for x, y in zip(sums, acc[s * per_set:(s + 1) * per_set])]
    return [[sums[i * shape.rows + r] for r in range(shape.rows)] for i in range(shape.m)]


def _pairwise(builder: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """[x0+x1, x2+x3, ..., y0+y1, y2+y3, ...] (a horizontal add without x86's per-128-bit-lane order)."""
    lanes = x.type.count

    def pick(offset: int) -> ir.Value:
        order = [2 * j + offset for j in range(lanes // 2)] + [lanes + 2 * j + offset for j in range(lanes // 2)]
        return builder.shuffle_vector(x, y, vector_const(ir.VectorType(I32, lanes), order))
    return builder.fadd(pick(0), pick(1))


def _row_sums(builder: ir.IRBuilder, vectors: list, width: int) -> ir.Value:
    """A vector whose lane r is the sum of the lanes of vectors[r] (as many lanes as vectors, padded to a power
    of two, at most `width`)."""
    count = 1 << (len(vectors) - 1).bit_length()
    level = vectors + [zeros(vec_type(width))] * (count - len(vectors))
    while len(level) > 1:
        level = [_pairwise(builder, level[j], level[j + 1]) for j in range(0, len(level), 2)]
    total = level[0]
    while total.type.count > count:
        half = total.type.count // 2
        folded = _pairwise(builder, total, total)
        total = builder.shuffle_vector(folded, folded, vector_const(ir.VectorType(I32, half), list(range(half))))
    return total


def _store_sums(builder: ir.IRBuilder, sums: ir.Value, ptr: ir.Value, count: int) -> None:
    """Store the first `count` lanes of `sums` at ptr."""
    if sums.type.count == count:
        builder.store(sums, ptr, align=4)
        return
    for r in range(count):
        builder.store(builder.extract_element(sums, ir.Constant(I32, r)), elem_ptr(builder, ptr, r), align=4)


__all__ = ["GEMV_ROWS", "GemvShape", "apply_epilogue", "define_gemv", "emit_gemv", "gemv_applies", "gemv_shape",
           "row_offset"]
