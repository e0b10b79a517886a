"""GEMV with B read by rows: C = A @ B for a few rows of A (batch 1 to 3) with B a row-major (k, n) matrix as stored
(x @ w where w is an input of the graph, attention's probabilities @ V while decoding one token, a weight stored as
(in, out) like GPT-2's Conv1D, read in place).

The GEMM packed such a B on every call, all of it for one row of A: x @ w with w 4096 x 4096 took 2.5x torch's time.
Each column of C is a sum down a column of B, so this kernel streams B's rows in order instead: C's columns
accumulate in C itself, which stays in the L1 cache, four rows of B at a time (each C vector loaded and stored once
per four FMAs of each row of A, while B is read once, as sequentially as it lies). Threads claim blocks of C's
columns (codegen/claims.py) and run all of B's rows over their columns, so each thread streams a contiguous stretch
of every row; after each chunk the epilogue runs over the columns it finished. Each C element sums its k products in
k order whatever the thread count, so results are the same bytes on any number of threads.

rows_gemv_applies says when emit_gemm takes this path: at most GEMV_ROWS rows of A in all batches, one B for every
batch with its columns contiguous, C's columns contiguous.
"""
from __future__ import annotations

from math import prod
from typing import Sequence

import llvmlite.ir as ir

from .claims import claimed_chunks
from .gemm_epilogue import emit_tile_epilogue
from .gemm_kernel import (I64, PTR, Epilogue, Tiling, const64, default_pos, elem_ptr, lane_mask, load_vec, mul_add,
                          store_vec, vec_type)
from .gemm_pack import Strided, smin
from .gemv import GEMV_ROWS, apply_epilogue, define_gemv, row_offset
from .loops import F32, define_function, entry_builder, for_range, splat, zeros

# Rows of B each pass over C's columns adds (four sequential streams, C loaded and stored once per four FMAs).
ROWS_PER_PASS = 4
# Vectors of C's columns a thread claims at a time.
BLOCK_VECTORS = 4


def rows_gemv_applies(m: int, batch: Sequence[int], a, b, c) -> bool:
    """Whether the row-streaming GEMV computes this problem: few rows of A, B's rows contiguous and shared by every
    batch, C's rows contiguous."""
    return (isinstance(a, Strided) and isinstance(b, Strided) and isinstance(c, Strided) and b.cs == 1
            and not any(b.batch_strides) and c.cs == 1 and 0 < m * prod(batch) <= GEMV_ROWS)


def emit_rows_gemv(module: ir.Module, name: str, m: int, n: int, k: int, batch: tuple[int, ...], a: Strided,
                   b: Strided, c: Strided, tiling: Tiling, epilogue: Epilogue | None = None,
                   n_extra: int = 0) -> ir.Function:
    """Emit the GEMM signature's `void name(a, b, c, scratch, tid, nthreads, claim, share, extra...)` for a problem
    rows_gemv_applies to (scratch and share words unused)."""
    fn = define_gemv(module, name, n_extra)
    a_ptr, b_ptr, c_ptr, _, tid, nthreads, claim, _, *extra = fn.args
    builder = entry_builder(fn)
    rows = [divmod(i, m) for i in range(m * prod(batch))]  # (batch index, row) of every row of A
    x_rows = [row_offset(builder, a_ptr, a, batch, index, row) for index, row in rows]
    c_rows = [row_offset(builder, c_ptr, c, batch, index, row) for index, row in rows]
    panel = _emit_panel(module, f"{name}.panel", len(rows), n, k, a.cs, b.rs, tiling)
    finish = emit_tile_epilogue(module, f"{name}.epilogue", tiling.width, 0, True, epilogue, n_extra, default_pos) \
        if epilogue is not None else None
    block = BLOCK_VECTORS * tiling.width
    # work=1: a first chunk of half the blocks on two threads. Each chunk streams every row of B over its columns,
    # and the longer those runs, the better they stream: x @ w, w 4096 x 4096, two threads, 1.04 ms against 1.24
    # with the shrinking chunks the GEMM's work gives (a thread that finds no chunk left still takes the others').
    with claimed_chunks(builder, claim, tid, nthreads, -(-n // block), name="cols", work=1) as (g0, g1):
        first = builder.mul(g0, const64(block))
        last = smin(builder, builder.mul(g1, const64(block)), const64(n))
        builder.call(panel, [b_ptr, first, last, *x_rows, *c_rows])
        if finish is not None:
            apply_epilogue(builder, finish, rows, c_rows, first, last, tiling.width, extra)
    builder.ret_void()
    return fn


def _emit_panel(module: ir.Module, name: str, rows: int, n: int, k: int, x_step: int, b_step: int,
                tiling: Tiling) -> ir.Function:
    """Emit `void name(b, first, last, x_0.., c_0..)`: C_i[first:last] = x_i @ B[:, first:last] for every row i of
    A (x_i's elements x_step apart, B's rows b_step apart); `last` is a multiple of the vector width or n."""
    args = [("b", PTR), ("first", I64), ("last", I64)] + [(f"x{i}", PTR) for i in range(rows)] + \
        [(f"c{i}", PTR) for i in range(rows)]
    fn = define_function(module, name, args, internal=True)
    fn.attributes.add("noinline")
    b_ptr, first, last, *rest = fn.args
    xs, cs = rest[:rows], rest[rows:]
    builder = entry_builder(fn)
    width = tiling.width
    count = builder.sub(last, first)
    whole = builder.add(first, builder.mul(builder.sdiv(count, const64(width)), const64(width)))
    tail = lane_mask(width, n % width) if n % width else None

    def columns(body) -> None:
        """body(j, mask) over the vectors of [first, last): whole ones, then the masked last one of a row's end."""
        with for_range(builder, first, whole, width, name="j") as j:
            body(j, None)
        if tail is not None:
            with builder.if_then(builder.icmp_signed("<", whole, last)):
                body(whole, tail)

    columns(lambda j, mask: [store_vec(builder, zeros(vec_type(width)), elem_ptr(builder, c, j), mask) for c in cs])

    def add_rows(k0: ir.Value, count: int) -> None:
        """C_i[first:last] += sum over r < count of x_i[k0 + r] B[k0 + r, first:last], in r order."""
        scales = [[splat(builder, builder.load(elem_ptr(builder, x, builder.mul(builder.add(k0, const64(r)),
                                                                           const64(x_step))), typ=F32), width)
                   for r in range(count)] for x in xs]
        b_rows = [elem_ptr(builder, b_ptr, builder.mul(builder.add(k0, const64(r)), const64(b_step)))
                  for r in range(count)]

        def step(j: ir.Value, mask) -> None:
            values = [load_vec(builder, elem_ptr(builder, row, j), width, mask) for row in b_rows]
            for x_scales, c in zip(scales, cs):
                at = elem_ptr(builder, c, j)
                total = load_vec(builder, at, width, mask)
                for scale, value in zip(x_scales, values):
                    total = mul_add(builder, value, scale, total, tiling.fma)
                store_vec(builder, total, at, mask)
        columns(step)

    passes = k // ROWS_PER_PASS
    with for_range(builder, 0, passes, name="pass") as p:
        add_rows(builder.mul(p, const64(ROWS_PER_PASS)), ROWS_PER_PASS)
    if k % ROWS_PER_PASS:
        add_rows(const64(passes * ROWS_PER_PASS), k % ROWS_PER_PASS)
    builder.ret_void()
    return fn


__all__ = ["emit_rows_gemv", "rows_gemv_applies"]
