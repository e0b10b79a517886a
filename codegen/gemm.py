"""SGEMM for static shapes: C[b] = A[b] @ B[b] with a fused epilogue, blocked, packed and register-tiled.

Public surface:
- GemmSpec (shapes and element strides; a transposed or broadcast operand is just other strides) and
  matmul_spec (numpy.matmul semantics: 1-D promotion, broadcast batch dimensions).
- emit_gemm(module, name, spec, ...) emits
  `void name(ptr a, ptr b, ptr c, ptr scratch, i64 tid, i64 nthreads, ptr claim, ptr share, ptr extra_0, ...)`:
  thread `tid` of `nthreads` computes the parts of C it claims from the claim words at `claim` (codegen/claims.py;
  the threads together cover C exactly once; with a null `claim` each takes a fixed share); with the share words
  at `share` (codegen/abi.py; null: none), the threads pack an operand every chunk reads whole once per call into
  the call's shared area of gemm_shared_bytes(spec) bytes (codegen/gemm_driver.py);
  `scratch` is this thread's area of gemm_scratch_bytes(spec) bytes (no alignment is assumed; 64 bytes is
  fastest); the extra pointers are passed through to the epilogue (bias, residual, ...). C must not overlap
  A, B or anything the epilogue reads: with K blocking, C holds partial sums until the last block.
  A problem of at most three rows of A (GEMV_ROWS) with B the transpose of a row-major matrix (a linear layer's
  weight at batch 1) gets the GEMV kernel of codegen/gemv.py instead (uses_gemv), which streams B in place.
- emit_prepack_b / emit_prepack_a emit `void name(ptr src, ptr dst)` rewriting a constant operand into the
  packed panel layout once; a GemmSpec with `Prepacked()` for that operand then reads it without packing.
- Epilogues: bias_cols, bias_rows, relu, scale, residual and chain compose into the callback the micro-kernel
  applies to every accumulator vector of the last K block before storing it (a costly one, calling vector math,
  is applied to each stored tile by one function per GEMM instead: gemm_epilogue.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Sequence

import llvmlite.ir as ir

from .gemm_driver import Plan, Problem, emit_problem, make_plan
from .gemm_kernel import F32, Epilogue, Tiling, TilePos, const64, elem_ptr, load_vec, tiling_for
from .gemm_pack import Prepacked, Strided, batch_offset
from .gemv import emit_gemv, gemv_applies
from .gemv_rows import emit_rows_gemv, rows_gemv_applies
from .loops import PTR, define_function, entry_builder, for_range, optimize_for_size, splat, zeros
from .target import host_target

__all__ = ["Epilogue", "GemmSpec", "Prepacked", "Strided", "TilePos", "Tiling", "bias_cols", "bias_rows", "chain",
           "default_tiling", "emit_gemm", "emit_prepack_a", "emit_prepack_b", "gemm_plan", "gemm_scratch_bytes",
           "gemm_shared_bytes", "matmul_spec", "prepacked_a_floats", "prepacked_b_floats", "relu", "residual", "scale",
           "tiling_for", "uses_gemv"]


def default_tiling() -> Tiling:
    """The tiling for the host target (or BRAZE_CPU)."""
    return tiling_for(host_target().vector_width)


def _extent(op: Strided, rows: int, cols: int, batch: Sequence[int]) -> int:
    """Elements an operand spans from its base pointer (0 when it is empty)."""
    if rows == 0 or cols == 0 or prod(batch) == 0:
        return 0
    far = (rows - 1) * op.rs + (cols - 1) * op.cs + sum((d - 1) * s for d, s in zip(batch, op.batch_strides))
    return far + 1


@dataclass(frozen=True)
class GemmSpec:
    """C (m x n) = A (m x k) @ B (k x n) for each index of `batch`; strides in float32 elements, all >= 0."""

    m: int
    n: int
    k: int
    a: Strided
    b: Strided | Prepacked
    c: Strided
    batch: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k, *self.batch) < 0:
            raise ValueError(f"negative GEMM dimension in {self}")
        if self.c.cs != 1:
            raise ValueError(f"C must have unit column stride, got {self.c}")
        for label, op in (("A", self.a), ("B", self.b), ("C", self.c)):
            if len(op.batch_strides) != len(self.batch):
                raise ValueError(f"{label} has {len(op.batch_strides)} batch strides for batch {self.batch}")
            if isinstance(op, Strided) and min(op.rs, op.cs, *op.batch_strides) < 0:
                raise ValueError(f"{label} has a negative stride: {op}")

    @classmethod
    def contiguous(cls, m: int, n: int, k: int, batch: Sequence[int] = (), *, trans_b: bool = False,
                   broadcast_a: bool = False, broadcast_b: bool = False, prepacked_b: bool = False,
                   tiling: Tiling | None = None) -> GemmSpec:
        """Row-major contiguous operands; trans_b reads B from an (n, k) array (a weight W as W^T)."""
        batch = tuple(batch)
        a = Strided(k, 1, _batch_strides(batch, 0 if broadcast_a else m * k))
        b_strides = _batch_strides(batch, 0 if broadcast_b else k * n)
        if prepacked_b:
            b: Strided | Prepacked = Prepacked(_batch_strides(batch, 0 if broadcast_b else prepacked_b_floats(
                k, n, tiling or default_tiling())))
        else:
            b = Strided(1, k, b_strides) if trans_b else Strided(n, 1, b_strides)
        return cls(m, n, k, a, b, Strided(n, 1, _batch_strides(batch, m * n)), batch)

    @property
    def count(self) -> int:
        return prod(self.batch)

    def extents(self) -> tuple[int | None, int | None, int]:
        """Elements A, B and C span from their base pointers (None for a pre-packed operand)."""
        a = _extent(self.a, self.m, self.k, self.batch)
        b = None if isinstance(self.b, Prepacked) else _extent(self.b, self.k, self.n, self.batch)
        return a, b, _extent(self.c, self.m, self.n, self.batch)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.count

    def problem(self) -> Problem:
        return Problem(self.m, self.n, self.k, self.batch, self.a, self.b, self.c)


def _batch_strides(batch: tuple[int, ...], matrix: int) -> tuple[int, ...]:
    """Row-major strides of the batch dimensions over matrices of `matrix` elements (0 everywhere broadcasts)."""
    strides, inner = [], matrix
    for dim in reversed(batch):
        strides.append(inner)
        inner *= dim
    return tuple(reversed(strides))


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, inner = [], 1
    for dim in reversed(shape):
        strides.append(inner)
        inner *= dim
    return tuple(reversed(strides))


def matmul_spec(x_shape: Sequence[int], y_shape: Sequence[int], x_strides: Sequence[int] | None = None,
                y_strides: Sequence[int] | None = None) -> GemmSpec:
    """numpy.matmul(x, y) as a GemmSpec writing a contiguous output; strides in elements (default contiguous)."""
    x_shape, y_shape = tuple(x_shape), tuple(y_shape)
    xs = tuple(x_strides) if x_strides is not None else _contiguous_strides(x_shape)
    ys = tuple(y_strides) if y_strides is not None else _contiguous_strides(y_shape)
    if not x_shape or not y_shape:
        raise ValueError(f"matmul needs operands of rank >= 1, got {x_shape} and {y_shape}")
    if len(x_shape) == 1:
        x_shape, xs = (1,) + x_shape, (0,) + xs
    if len(y_shape) == 1:
        y_shape, ys = y_shape + (1,), ys + (0,)
    if x_shape[-1] != y_shape[-2]:
        raise ValueError(f"matmul inner dimensions differ: {x_shape} @ {y_shape}")
    rank = max(len(x_shape), len(y_shape))
    batch = []
    for axis in range(rank - 2):
        dims = [s[axis - (rank - len(s))] if axis >= rank - len(s) else 1 for s in (x_shape, y_shape)]
        if dims[0] != dims[1] and 1 not in dims:
            raise ValueError(f"matmul batch dimensions of {x_shape} and {y_shape} do not broadcast")
        batch.append(max(dims))

    def batch_strides(shape, strides):
        pad = rank - len(shape)
        return tuple(0 if axis < pad or shape[axis - pad] == 1 else strides[axis - pad] for axis in range(rank - 2))

    m, k, n = x_shape[-2], x_shape[-1], y_shape[-1]
    out = _batch_strides(tuple(batch), m * n)
    return GemmSpec(m, n, k, Strided(xs[-2], xs[-1], batch_strides(x_shape, xs)),
                    Strided(ys[-2], ys[-1], batch_strides(y_shape, ys)), Strided(n, 1, out), tuple(batch))


def uses_gemv(spec: GemmSpec) -> bool:
    """Whether emit_gemm emits a GEMV kernel for `spec`, which packs nothing: few rows of A, B read as W^T
    (codegen/gemv.py) or by its rows (codegen/gemv_rows.py)."""
    return gemv_applies(spec.m, spec.batch, spec.a, spec.b) or \
        rows_gemv_applies(spec.m, spec.batch, spec.a, spec.b, spec.c)


def gemm_plan(spec: GemmSpec, tiling: Tiling | None = None) -> Plan:
    """The static blocking, operand modes and thread split chosen for `spec`."""
    return make_plan(spec.problem(), tiling or default_tiling())


def gemm_scratch_bytes(spec: GemmSpec, tiling: Tiling | None = None) -> int:
    """Bytes of per-thread scratch the GEMM kernel of `spec` needs (0 when it packs nothing)."""
    if uses_gemv(spec):
        return 0
    return gemm_plan(spec, tiling).scratch_bytes


def gemm_shared_bytes(spec: GemmSpec, tiling: Tiling | None = None) -> int:
    """Bytes of the call's shared area the GEMM kernel of `spec` uses on several threads (0 when none)."""
    if uses_gemv(spec):
        return 0
    return gemm_plan(spec, tiling).shared_bytes


def emit_gemm(module: ir.Module, name: str, spec: GemmSpec, tiling: Tiling | None = None,
              epilogue: Epilogue | None = None, n_extra: int = 0) -> ir.Function:
    """Emit the threaded GEMM kernel `name` for `spec` into `module` (signature in the module docstring)."""
    if gemv_applies(spec.m, spec.batch, spec.a, spec.b):
        return emit_gemv(module, name, spec.m, spec.n, spec.k, spec.batch, spec.a, spec.b, spec.c,
                         tiling or default_tiling(), epilogue, n_extra)
    if rows_gemv_applies(spec.m, spec.batch, spec.a, spec.b, spec.c):
        return emit_rows_gemv(module, name, spec.m, spec.n, spec.k, spec.batch, spec.a, spec.b, spec.c,
                              tiling or default_tiling(), epilogue, n_extra)
    return emit_problem(module, name, spec.problem(), tiling or default_tiling(), epilogue, n_extra)


# --- pre-packing constant operands --------------------------------------------------------------------------


def prepacked_b_floats(k: int, n: int, tiling: Tiling) -> int:
    """Floats of one pre-packed (k x n) B: NR-column panels of K rows, the last zero-padded."""
    return -(-n // tiling.nr) * k * tiling.nr


def prepacked_a_floats(m: int, k: int, tiling: Tiling) -> int:
    """Floats of one pre-packed (m x k) A: MR-row panels of K steps."""
    return -(-m // tiling.mr) * k * tiling.mr


def emit_prepack_b(module: ir.Module, name: str, k: int, n: int, src: Strided, tiling: Tiling | None = None,
                   batch: Sequence[int] = ()) -> ir.Function:
    """Emit `void name(ptr src, ptr dst)` packing each (k x n) B of `batch` into dst, batch after batch."""
    tiling = tiling or default_tiling()
    size = prepacked_b_floats(k, n, tiling)

    def pack(builder: ir.IRBuilder, base: ir.Value, dst: ir.Value) -> None:
        _copy_into_panels(builder, base, dst, k, n, tiling.nr, src.rs, src.cs)
    return _emit_prepack(module, name, src, size, tuple(batch), pack, empty=k == 0 or n == 0)


def _copy_into_panels(builder: ir.IRBuilder, base: ir.Value, dst: ir.Value, steps: int, lanes: int, width: int,
                      step_stride: int, lane_stride: int) -> None:
    """dst[lane // width][step][lane % width] = src[step * step_stride + lane * lane_stride], 0.0 for the lanes
    past `lanes`: the panels pack_b_block (lanes: B's columns) and pack_a_block (lanes: A's rows) write, as a
    plain element loop. It runs once per load, so compact code (a fraction of the vectorized packers' compile
    time) beats speed; the loop along the source's unit stride is innermost, so the reads stay sequential."""
    padded = -(-lanes // width) * width
    zero = ir.Constant(F32, 0.0)

    def copy(step: ir.Value, lane: ir.Value) -> None:
        at = builder.add(builder.mul(builder.sdiv(lane, const64(width)), const64(steps * width)),
                         builder.add(builder.mul(step, const64(width)), builder.srem(lane, const64(width))))
        inside = builder.icmp_signed("<", lane, const64(lanes))
        offset = builder.add(builder.mul(step, const64(step_stride)),
                             builder.mul(builder.select(inside, lane, const64(0)), const64(lane_stride)))
        value = builder.load(elem_ptr(builder, base, offset), typ=F32, align=4)
        builder.store(builder.select(inside, value, zero), elem_ptr(builder, dst, at), align=4)
    if step_stride == 1 and lane_stride != 1:
        with for_range(builder, 0, padded, name="pk.lane") as lane:
            with for_range(builder, 0, steps, name="pk.step") as step:
                copy(step, lane)
    else:
        with for_range(builder, 0, steps, name="pk.step") as step:
            with for_range(builder, 0, padded, name="pk.lane") as lane:
                copy(step, lane)


def emit_prepack_a(module: ir.Module, name: str, m: int, k: int, src: Strided, tiling: Tiling | None = None,
                   batch: Sequence[int] = ()) -> ir.Function:
    """Emit `void name(ptr src, ptr dst)` packing each (m x k) A of `batch` into dst, batch after batch."""
    tiling = tiling or default_tiling()
    size = prepacked_a_floats(m, k, tiling)

    def pack(builder: ir.IRBuilder, base: ir.Value, dst: ir.Value) -> None:
        _copy_into_panels(builder, base, dst, k, m, tiling.mr, src.cs, src.rs)
    return _emit_prepack(module, name, src, size, tuple(batch), pack, empty=m == 0 or k == 0)


def _emit_prepack(module, name, src: Strided, size: int, batch: tuple[int, ...], pack, empty: bool) -> ir.Function:
    if len(src.batch_strides) != len(batch):
        raise ValueError(f"{len(src.batch_strides)} source batch strides for batch {batch}")
    fn = optimize_for_size(define_function(module, name, [("src", PTR), ("dst", PTR)]))
    builder = entry_builder(fn)
    if not empty:
        with for_range(builder, 0, prod(batch), name="batch") as index:
            base = elem_ptr(builder, fn.args[0], batch_offset(builder, index, batch, src.batch_strides))
            pack(builder, base, elem_ptr(builder, fn.args[1], builder.mul(index, const64(size))))
    builder.ret_void()
    return fn


# --- epilogues ----------------------------------------------------------------------------------------------


def bias_cols(arg: int) -> Epilogue:
    """acc + bias[col]: a bias per output column (linear layers), read from extra pointer `arg`."""
    def apply(builder: ir.IRBuilder, acc: ir.Value, pos: TilePos) -> ir.Value:
        width = acc.type.count
        return builder.fadd(acc, load_vec(builder, elem_ptr(builder, pos.args[arg], pos.col), width, pos.mask))
    return apply


def bias_rows(arg: int) -> Epilogue:
    """acc + bias[row]: a bias per output row (conv output channels), read from extra pointer `arg`."""
    def apply(builder: ir.IRBuilder, acc: ir.Value, pos: TilePos) -> ir.Value:
        value = builder.load(elem_ptr(builder, pos.args[arg], pos.row), typ=F32, align=4)
        return builder.fadd(acc, splat(builder, value, acc.type.count))
    return apply


def relu(builder: ir.IRBuilder, acc: ir.Value, pos: TilePos) -> ir.Value:
    """max(acc, 0) that keeps NaN (as numpy.maximum does)."""
    zero = zeros(acc.type)
    return builder.select(builder.fcmp_ordered("<", acc, zero), zero, acc)


def scale(factor: float) -> Epilogue:
    """acc * factor."""
    def apply(builder: ir.IRBuilder, acc: ir.Value, pos: TilePos) -> ir.Value:
        return builder.fmul(acc, ir.Constant(acc.type, [factor] * acc.type.count))
    return apply


def residual(arg: int, row_stride: int, batch: Sequence[int] = (), batch_strides: Sequence[int] = ()) -> Epilogue:
    """acc + R[batch, row, col] from extra pointer `arg` (element strides; a 0 batch stride broadcasts)."""
    batch, batch_strides = tuple(batch), tuple(batch_strides)

    def apply(builder: ir.IRBuilder, acc: ir.Value, pos: TilePos) -> ir.Value:
        offset = builder.add(builder.mul(pos.row, const64(row_stride)), pos.col)
        if batch:
            offset = builder.add(offset, batch_offset(builder, pos.batch, batch, batch_strides))
        return builder.fadd(acc, load_vec(builder, elem_ptr(builder, pos.args[arg], offset), acc.type.count,
                                          pos.mask))
    return apply


def chain(*epilogues: Epilogue) -> Epilogue:
    """Apply epilogues left to right."""
    def apply(builder: ir.IRBuilder, acc: ir.Value, pos: TilePos) -> ir.Value:
        for epilogue in epilogues:
            acc = epilogue(builder, acc, pos)
        return acc
    return apply
