"""A costly GEMM epilogue applied to stored C by one out-of-line function, instead of inlined per accumulator.

The micro-kernel applies the epilogue to every accumulator vector of the last K block before storing it, so an
epilogue is emitted rows x nv times per tile shape (12 times in a 6x16 AVX2 tile, again in every edge shape). For
a cheap one (a bias, a residual, ReLU) that costs nothing; one that calls vector math (GELU's erf, tanh, sigmoid:
LLVM inlines the polynomial into every call site) was most of its GEMM's optimized code and compile time. Such an
epilogue is emitted once per GEMM, in a loop over the rows and vectors of C that the micro-kernels of every tile
shape have just stored, and called once per panel of tiles (the GEMM driver's inner tile loop: 12 rows by up to NC
columns on AVX-512, NR columns by up to MC rows on AVX2) or per chunk of GEMV rows: it reloads the vectors from C
(in L1 or L2), applies the epilogue and stores them again. Per tile instead, the calls, the tables' loads and the
pipeline's start at each one cost the transformer's GELU feed-forward GEMM 1.5-3% more on AVX-512.
"""
from __future__ import annotations

import llvmlite.ir as ir

from .gemm_kernel import (I32, I64, PTR, Epilogue, PosMap, const64, elem_ptr, load_vec, masked_load, masked_store,
                          store_vec, vec_type)
from .loops import define_function, entry_builder, for_range, splat, vector_const

# An epilogue of more instructions per accumulator vector than this (counting the vector-math functions it calls,
# which LLVM inlines) is applied out of line: bias, residual and ReLU take 2-10, an erf GELU about 100.
INLINE_INSTRUCTIONS = 32


def costly(epilogue: Epilogue, width: int, n_extra: int, pos_map: PosMap) -> bool:
    """Whether `epilogue` takes more than INLINE_INSTRUCTIONS instructions per vector, judged by emitting it once
    into a module of its own."""
    module = ir.Module("epilogue_probe")
    args = [("acc", vec_type(width)), ("batch", I64), ("row", I64), ("col", I64)]
    fn = define_function(module, "probe", args + [(f"extra{i}", PTR) for i in range(n_extra)])
    acc, batch, row, col, *extra = fn.args
    builder = entry_builder(fn)
    epilogue(builder, acc, pos_map(builder, batch, row, col, None, tuple(extra)))
    builder.ret_void()
    count = sum(len(block.instructions) for f in module.functions if not f.is_declaration for block in f.blocks)
    return count > INLINE_INSTRUCTIONS


def emit_tile_epilogue(module: ir.Module, name: str, width: int, ldc: int, partial: bool, epilogue: Epilogue,
                       n_extra: int, pos_map: PosMap) -> ir.Function:
    """Emit `void name(c, rows, vectors, tail, batch, row, col, extra...)` applying the epilogue in place to a
    stored block of C at `c` (row stride `ldc`): `rows` rows of `vectors` full vectors, then, when `partial` blocks
    exist, a last vector of `tail` lanes (none when 0). Positions are those of the block's first element."""
    args = [("c", PTR), ("rows", I64), ("vectors", I64), ("tail", I64), ("batch", I64), ("row", I64), ("col", I64)]
    fn = define_function(module, name, args + [(f"extra{i}", PTR) for i in range(n_extra)], internal=True)
    fn.attributes.add("noinline")  # the point: one copy of the epilogue per GEMM
    c, rows, vectors, tail, batch, row0, col0, *extra = fn.args
    builder = entry_builder(fn)
    with for_range(builder, 0, rows, name="ep.r") as r:
        c_row = elem_ptr(builder, c, builder.mul(r, const64(ldc)))
        row = builder.add(row0, r)
        with for_range(builder, 0, vectors, name="ep.v") as v:
            offset = builder.mul(v, const64(width))
            ptr = elem_ptr(builder, c_row, offset)
            pos = pos_map(builder, batch, row, builder.add(col0, offset), None, tuple(extra))
            store_vec(builder, epilogue(builder, load_vec(builder, ptr, width), pos), ptr)
        if partial:
            with builder.if_then(builder.icmp_signed(">", tail, const64(0))):
                offset = builder.mul(vectors, const64(width))
                ptr = elem_ptr(builder, c_row, offset)
                mask = _first_lanes(builder, tail, width)
                pos = pos_map(builder, batch, row, builder.add(col0, offset), mask, tuple(extra))
                masked_store(builder, epilogue(builder, masked_load(builder, ptr, mask, width), pos), ptr, mask)
    builder.ret_void()
    return fn


def _first_lanes(builder: ir.IRBuilder, count: ir.Value, width: int) -> ir.Value:
    """The <width x i1> mask of the first `count` lanes (count an i64 in [0, width])."""
    iota = vector_const(ir.VectorType(I32, width), list(range(width)))
    return builder.icmp_signed("<", iota, splat(builder, builder.trunc(count, I32), width))


__all__ = ["INLINE_INSTRUCTIONS", "costly", "emit_tile_epilogue"]
