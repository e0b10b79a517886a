"""The SGEMM kernels against numpy (float64) on many shapes, strides, batches, epilogues and thread splits.

Tolerance: each element within 8*sqrt(K+1)*2^-24 times sum_k |a_ik*b_kj| (+|bias|, |residual|) of the float64
result; see native.dot_tolerance for why that bound holds for float32 sums and still catches wrong indices.
"""
from __future__ import annotations

import ctypes
from dataclasses import replace

import llvmlite.ir as ir
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from braze.codegen import gemm_driver, host_target
from braze.codegen.gemm import (GemmSpec, Prepacked, Strided, bias_cols, chain, emit_gemm, emit_prepack_b,
                                gemm_plan, gemm_scratch_bytes, gemm_shared_bytes, matmul_spec, prepacked_b_floats,
                                relu, residual, scale, tiling_for)
from braze.codegen.cache_sizes import CacheSizes
from braze.codegen.gemm_kernel import Tiling, const64, elem_ptr, load_vec, store_vec
from tests.codegen.native import (aligned, assert_close, build, dot_tolerance, kernel, require, run_threads)

WIDTHS = [w for w in (4, 8, 16) if w <= host_target().vector_width]
HOST = tiling_for(host_target().vector_width)
RNG = np.random.default_rng(7)


def count_writes(arg: int, m: int, n: int):
    """An epilogue adding 1 to counts[batch, row, col] for every element it stores (checks 'exactly once')."""
    def apply(builder, acc, pos):
        offset = builder.add(builder.add(builder.mul(pos.batch, const64(m * n)), builder.mul(pos.row, const64(n))),
                             pos.col)
        ptr = elem_ptr(builder, pos.args[arg], offset)
        width = acc.type.count
        old = load_vec(builder, ptr, width, pos.mask)
        store_vec(builder, builder.fadd(old, ir.Constant(acc.type, [1.0] * width)), ptr,
                  pos.mask)
        return acc
    return apply


def run(spec: GemmSpec, a: np.ndarray, b: np.ndarray, *, tiling=HOST, epilogue=None, tag: str = "",
        extras=(), nthreads: int = 1, b_source: Strided | None = None, concurrent: bool = False,
        calls: int = 0) -> np.ndarray:
    """C for `spec` from flat operand buffers a, b (b in the layout b_source describes when spec.b is Prepacked),
    the threads called one after another or, `concurrent`, at once, `calls` calls having ended before."""
    n_extra = len(extras)

    def emit(module, name):
        emit_gemm(module, name, spec, tiling, epilogue, n_extra)
        if b_source is not None:
            emit_prepack_b(module, name + "_pack", spec.k, spec.n, b_source, tiling,
                           batch=spec.batch if b_source.batch_strides else ())
    library, name = build("t_gemm", (spec, tiling, tag, n_extra, b_source), emit)
    a_extent, b_extent, c_extent = spec.extents()
    c = np.full(max(c_extent, 1), np.nan, np.float32)
    if b_source is not None:
        batches = spec.count if b_source.batch_strides else 1
        packed = aligned(max(batches * prepacked_b_floats(spec.k, spec.n, tiling), 1))
        pack = library.cfunc(name + "_pack", None, ctypes.c_void_p, ctypes.c_void_p)
        pack(require(b, None, "b"), packed.ctypes.data)
        b = packed
    pointers = [require(a, a_extent, "a"), require(b, b_extent, "b"), require(c, c_extent, "c")]
    run_threads(kernel(library, name, n_extra), pointers, [require(x, None, "extra") for x in extras],
                gemm_scratch_bytes(spec, tiling), nthreads, concurrent=concurrent,
                shared_bytes=gemm_shared_bytes(spec, tiling), calls=calls)
    return c


def check(m, n, k, *, batch=(), trans_b=False, tiling=HOST, nthreads=1) -> None:
    spec = GemmSpec.contiguous(m, n, k, batch, trans_b=trans_b)
    a = RNG.standard_normal((*batch, m, k)).astype(np.float32)
    b = RNG.standard_normal((*batch, n, k) if trans_b else (*batch, k, n)).astype(np.float32)
    bm = np.swapaxes(b, -1, -2) if trans_b else b
    c = run(spec, a.ravel(), b.ravel(), tiling=tiling, nthreads=nthreads).reshape(*batch, m, n)
    want = a.astype(np.float64) @ bm.astype(np.float64)
    assert_close(c, want, dot_tolerance(k, np.abs(a.astype(np.float64)) @ np.abs(bm.astype(np.float64))),
                 f"{m}x{n}x{k} batch={batch} trans_b={trans_b} W={tiling.width} threads={nthreads}")


@settings(max_examples=30, deadline=None, derandomize=True)
@given(m=st.integers(1, 300), n=st.integers(1, 300), k=st.integers(1, 300), trans_b=st.booleans(),
       width=st.sampled_from(WIDTHS), nthreads=st.integers(1, 3))
def test_gemm_matches_numpy_on_random_shapes(m, n, k, trans_b, width, nthreads) -> None:
    check(m, n, k, trans_b=trans_b, tiling=tiling_for(width), nthreads=nthreads)


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (1, 512, 784), (2, 3, 1), (13, 1, 700), (512, 512, 512),
                                   (64, 512, 784), (37, 1000, 33), (700, 20, 5)])
def test_gemm_fixed_shapes(m, n, k) -> None:
    check(m, n, k)


@pytest.mark.parametrize("width", WIDTHS)
def test_gemm_every_vector_width_on_edges(width) -> None:
    check(2 * tiling_for(width).mr + 1, 3 * tiling_for(width).nr - 1, 97, tiling=tiling_for(width), nthreads=2)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("m,n,k,nthreads", [(2 * 12 + 5, 3 * 32 - 1, 300, 1), (300, 70, 97, 2), (1, 33, 5, 1)])
def test_gemm_tile_loop_orders_give_the_same_bits(width, m, n, k, nthreads) -> None:
    """Tiling.rows_outer only reorders whole tiles (each accumulates its K blocks alike): both orders give the
    bits of each other, within the dot-product bound of float64, over edge tiles and several K, M and N blocks."""
    small = replace(tiling_for(width), kc=64, mc=2 * tiling_for(width).mr, nc=2 * tiling_for(width).nr)
    spec = GemmSpec.contiguous(m, n, k)
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    got = {order: run(spec, a.ravel(), b.ravel(), tiling=replace(small, rows_outer=order), nthreads=nthreads)
           for order in (False, True)}
    np.testing.assert_array_equal(got[True], got[False])
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert_close(got[True].reshape(m, n), want, dot_tolerance(k, np.abs(a.astype(np.float64)) @
                                                              np.abs(b.astype(np.float64))), "rows outer")


def test_rows_outer_where_the_b_panel_would_fill_l1() -> None:
    zen = CacheSizes(32 * 1024, 1024 * 1024, 32 * 1024 * 1024)
    assert tiling_for(16, zen).rows_outer and not tiling_for(8, zen).rows_outer


def check_transposed_a(m: int, n: int, k: int, *, pad: int = 0, tiling: Tiling = HOST) -> None:
    """A given as a (k, m) array and C with a row stride of n + pad: both are only strides."""
    at = RNG.standard_normal((k, m)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    spec = GemmSpec(m, n, k, Strided(1, m), Strided(n, 1), Strided(n + pad, 1))
    c = run(spec, at.ravel(), b.ravel(), tiling=tiling)
    c = np.pad(c, (0, m * (n + pad) - c.size), constant_values=np.nan).reshape(m, n + pad)[:, :n]
    a64 = at.T.astype(np.float64)
    assert_close(c, a64 @ b, dot_tolerance(k, np.abs(a64) @ np.abs(b.astype(np.float64))),
                 f"transposed A {m}x{n}x{k} W={tiling.width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_gemm_packed_a_on_every_edge_row_count(width, monkeypatch) -> None:
    """A packed (not read in place) with each possible row count of the last panel: rows of row-major A are loaded
    W steps at a time and transposed like a full panel's, the K remainder one step at a time; columns of a
    transposed A one step at a time. Each step's store spills onto the next step's slots (rewritten right after),
    the panel's last step does not."""
    monkeypatch.setattr(gemm_driver, "CACHED_BYTES", 0)
    tiling = replace(tiling_for(width), a_in_place=False)
    for m in range(tiling.mr + 1, 2 * tiling.mr + 1):
        assert gemm_plan(GemmSpec.contiguous(m, 40, 2 * width + 3), tiling).a_mode == "pack"
        check(m, 40, 2 * width + 3, tiling=tiling)
        check_transposed_a(m, 40, 2 * width + 3, tiling=tiling)


@pytest.mark.parametrize("width", WIDTHS)
def test_gemm_reads_a_row_major_a_in_place_where_the_tiling_says(width, monkeypatch) -> None:
    """Tiling.a_in_place: a row-major A of any size is read where it lies (not packed), over several K blocks and
    with each possible row count of the last panel, its rows 4 KB apart or not; on 1 and 3 threads. A transposed A
    is still packed (its k steps would be a stride apart)."""
    monkeypatch.setattr(gemm_driver, "CACHED_BYTES", 0)
    tiling = replace(tiling_for(width), a_in_place=True, kc=64)
    for m in range(tiling.mr + 1, 2 * tiling.mr + 1):
        for k in (1024, 2 * width + 3):
            spec = GemmSpec.contiguous(m, 40, k)
            assert gemm_plan(spec, tiling).a_mode == "direct"
            check(m, 40, k, tiling=tiling)
    check(3 * tiling.mr + 1, 3 * tiling.nr + 5, 200, tiling=tiling, nthreads=3)
    transposed = GemmSpec(50, 40, 30, Strided(1, 50), Strided(40, 1), Strided(40, 1))
    assert gemm_plan(transposed, tiling).a_mode == "pack"


def test_gemm_transposed_b_large() -> None:
    check(256, 384, 512, trans_b=True)


def test_gemm_transposed_a_and_row_padding() -> None:
    check_transposed_a(45, 70, 61, pad=5)


@pytest.mark.parametrize("x_shape,y_shape", [((3, 1, 5, 7), (4, 7, 6)), ((2, 9, 20), (20, 31)), ((20,), (20, 17)),
                                             ((4, 15, 8), (8,)), ((8,), (8,)), ((1, 40, 33), (5, 33, 2))])
def test_gemm_batched_with_broadcast_matches_numpy_matmul(x_shape, y_shape) -> None:
    x = RNG.standard_normal(x_shape).astype(np.float32)
    y = RNG.standard_normal(y_shape).astype(np.float32)
    spec = matmul_spec(x_shape, y_shape)
    want = np.matmul(x.astype(np.float64), y.astype(np.float64))
    c = run(spec, x.ravel(), y.ravel(), nthreads=2)[:want.size].reshape(want.shape)
    scale_ = np.matmul(np.abs(x.astype(np.float64)), np.abs(y.astype(np.float64)))
    assert_close(c, want, dot_tolerance(spec.k, scale_), f"matmul {x_shape} @ {y_shape}")


def test_gemm_bias_relu_residual_epilogue() -> None:
    m, n, k = 50, 77, 130
    a = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((n, k)).astype(np.float32)  # a linear layer's weight, read as W^T
    bias = RNG.standard_normal(n).astype(np.float32)
    res = RNG.standard_normal((m, n)).astype(np.float32)
    spec = GemmSpec.contiguous(m, n, k, trans_b=True)
    epilogue = chain(bias_cols(0), relu, residual(1, n), scale(0.5))
    c = run(spec, a.ravel(), w.ravel(), epilogue=epilogue, tag="bias-relu-res-half", extras=(bias, res.ravel()))
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    want = 0.5 * (np.maximum(a64 @ w64.T + bias, 0) + res)
    tol = dot_tolerance(k, np.abs(a64) @ np.abs(w64.T) + np.abs(bias) + np.abs(res))
    assert_close(c.reshape(m, n), want, tol, "epilogue")


def test_gemm_relu_propagates_nan() -> None:
    a = np.ones((3, 4), np.float32)
    a[1, 2] = np.nan
    b = np.ones((4, 5), np.float32)
    c = run(GemmSpec.contiguous(3, 5, 4), a.ravel(), b.ravel(), epilogue=relu, tag="relu").reshape(3, 5)
    assert np.isnan(c[1]).all() and (c[[0, 2]] == 4).all()


def test_gemm_residual_with_broadcast_batch() -> None:
    batch, m, n, k = (2, 3), 14, 40, 9
    spec = GemmSpec.contiguous(m, n, k, batch)
    a = RNG.standard_normal((*batch, m, k)).astype(np.float32)
    b = RNG.standard_normal((*batch, k, n)).astype(np.float32)
    res = RNG.standard_normal((3, m, n)).astype(np.float32)  # broadcast over the first batch dimension
    epilogue = residual(0, n, batch, (0, m * n))
    c = run(spec, a.ravel(), b.ravel(), epilogue=epilogue, tag="res-bcast", extras=(res.ravel(),), nthreads=4)
    want = a.astype(np.float64) @ b.astype(np.float64) + res
    scale_ = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(res)
    assert_close(c.reshape(want.shape), want, dot_tolerance(k, scale_), "broadcast residual")


@pytest.mark.parametrize("m,n,k,batch", [(1, 96, 64, ()), (200, 70, 700, ()), (12, 32, 5, (3,)), (300, 1, 2, ())])
@pytest.mark.parametrize("nthreads", [2, 3, 5, 64])
def test_gemm_thread_shares_cover_c_exactly_once(m, n, k, batch, nthreads) -> None:
    spec = GemmSpec.contiguous(m, n, k, batch)
    a = RNG.standard_normal((*batch, m, k)).astype(np.float32)
    b = RNG.standard_normal((*batch, k, n)).astype(np.float32)
    counts = np.zeros((*batch, m, n), np.float32)
    c = run(spec, a.ravel(), b.ravel(), epilogue=count_writes(0, m, n), tag="count", extras=(counts.ravel(),),
            nthreads=nthreads)
    assert (counts == 1).all()
    want = a.astype(np.float64) @ b.astype(np.float64)
    scale_ = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert_close(c.reshape(want.shape), want, dot_tolerance(k, scale_), f"{nthreads} threads")


@pytest.mark.parametrize("m,n,k,trans", [(1, 512, 784, True), (64, 500, 300, True), (7, 45, 20, False),
                                         (130, 33, 1000, False)])
def test_gemm_prepacked_b(m, n, k, trans) -> None:
    w = RNG.standard_normal((n, k) if trans else (k, n)).astype(np.float32)
    a = RNG.standard_normal((m, k)).astype(np.float32)
    source = Strided(1, k) if trans else Strided(n, 1)
    spec = GemmSpec(m, n, k, Strided(k, 1), Prepacked(), Strided(n, 1))
    assert gemm_plan(spec).b_mode == "prepacked"
    c = run(spec, a.ravel(), w.ravel(), b_source=source, nthreads=2)
    bm = (w.T if trans else w).astype(np.float64)
    assert_close(c.reshape(m, n), a.astype(np.float64) @ bm,
                 dot_tolerance(k, np.abs(a.astype(np.float64)) @ np.abs(bm)), "prepacked")


def test_gemm_prepacked_b_per_batch() -> None:
    batch, m, n, k = (3,), 20, 50, 30
    b = RNG.standard_normal((3, k, n)).astype(np.float32)
    a = RNG.standard_normal((3, m, k)).astype(np.float32)
    spec = GemmSpec(m, n, k, Strided(k, 1, (m * k,)), Prepacked((prepacked_b_floats(k, n, HOST),)),
                    Strided(n, 1, (m * n,)), batch)
    c = run(spec, a.ravel(), b.ravel(), b_source=Strided(n, 1, (k * n,)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert_close(c.reshape(want.shape), want,
                 dot_tolerance(k, np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))), "batched prepack")


def test_gemm_empty_inner_dimension_gives_the_epilogue_of_zero() -> None:
    bias = np.arange(6, dtype=np.float32)
    spec = GemmSpec.contiguous(4, 6, 0)
    c = run(spec, np.zeros(1, np.float32), np.zeros(1, np.float32), epilogue=bias_cols(0), tag="k0",
            extras=(bias,))
    np.testing.assert_array_equal(c.reshape(4, 6), np.tile(bias, (4, 1)))


@pytest.mark.parametrize("m,n", [(0, 5), (5, 0)])
def test_gemm_empty_output_touches_nothing(m, n) -> None:
    spec = GemmSpec.contiguous(m, n, 3)
    assert spec.extents()[2] == 0
    run(spec, np.zeros(16, np.float32), np.zeros(16, np.float32))


@pytest.mark.parametrize("m,n,k,batch", [(37, 5 * HOST.nr + 3, 67, ()), (301, 9, 33, ()),
                                         (301, 2 * HOST.nr + 1, 400, ()), (7, 3 * HOST.nr + 1, 13, (3,))])
def test_gemm_threads_claiming_at_once_match_one_thread_bit_for_bit(m, n, k, batch) -> None:
    """Panels claimed by 2-4 threads running at once (odd panel counts, split by columns or rows, packed or not,
    batched): the same bits as one thread, every element written."""
    spec = GemmSpec.contiguous(m, n, k, batch)
    a = RNG.standard_normal((*batch, m, k)).astype(np.float32).ravel()
    b = RNG.standard_normal((*batch, k, n)).astype(np.float32).ravel()
    one = run(spec, a, b)
    assert not np.isnan(one).any()
    for nthreads in (2, 3, 4):
        assert run(spec, a, b, nthreads=nthreads, concurrent=True).tobytes() == one.tobytes(), f"{nthreads} threads"


@pytest.mark.parametrize("m,n,split_n", [(128, 256, True), (128, 768, True), (1024, 256, False), (64, 512, True),
                                         (64, 10, False)])
def test_gemm_threads_split_the_side_whose_panels_share_out_evenly(m, n, split_n) -> None:
    """On the 12 x 32 tile, a transformer's 128 x 256 output at batch 1 is split by its 8 column panels (4 and 4 for
    two threads), not its 11 row panels (6 and 5), though rows outnumber columns; elsewhere the longer side is
    split. Either way two threads give the one-thread bits."""
    tiling = tiling_for(16)
    spec = GemmSpec.contiguous(m, n, 64)
    assert gemm_plan(spec, tiling).split_n is split_n
    if 16 in WIDTHS:
        a = RNG.standard_normal((m, 64)).astype(np.float32).ravel()
        b = RNG.standard_normal((64, n)).astype(np.float32).ravel()
        one = run(spec, a, b, tiling=tiling)
        assert run(spec, a, b, tiling=tiling, nthreads=2, concurrent=True).tobytes() == one.tobytes()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("m,n,k,kept", [(None, 600, 600, "b"), (150, 450, 700, "a")], ids=["rows", "columns"])
@pytest.mark.parametrize("how", ["kept", "shared"])
def test_gemm_operand_packed_whole_gives_the_same_bits(width, m, n, k, kept, how) -> None:
    """Rows split with B packed (columns split with A packed): each thread packs the whole operand once and keeps it
    for its later chunks (while it fits Tiling.private_bytes, here 16 MB), or (past it, here 0) the threads pack it
    once per call into the shared area, claiming its panels, before any tile is computed. Several K blocks and edge
    panels: the bits of one thread (which packs block by block), for 2-4 threads claiming at once and one after
    another, and numpy's result. A batched problem keeps and shares nothing (its chunks mostly span whole batches)."""
    tiling, batch = replace(tiling_for(width), kc=256, private_bytes=16 << 20 if how == "kept" else 0,
                            a_in_place=False), ()
    m = m or (n // tiling.nr + 2) * tiling.mr + 1  # more row panels than column panels: rows are split
    spec = GemmSpec.contiguous(m, n, k, batch)
    plan = gemm_plan(spec, tiling)
    assert (plan.keep_a, plan.keep_b, plan.share) == ((kept == "a", kept == "b", None) if how == "kept" else
                                                     (False, False, kept))
    assert plan.blocks > 1 and plan.split_n == (kept == "a")
    extent = k * (-(-m // tiling.mr) * tiling.mr if kept == "a" else -(-n // tiling.nr) * tiling.nr)
    assert gemm_shared_bytes(spec, tiling) == (4 * extent if how == "shared" else 0)
    batched = gemm_plan(GemmSpec.contiguous(m, n, k, (2,)), tiling)
    assert not (batched.keep_a or batched.keep_b or batched.share) and batched.shared_bytes == 0
    a = RNG.standard_normal((*batch, m, k)).astype(np.float32)
    b = RNG.standard_normal((*batch, k, n)).astype(np.float32)
    one = run(spec, a.ravel(), b.ravel(), tiling=tiling, tag=how)
    want = a.astype(np.float64) @ b.astype(np.float64)
    scale_ = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert_close(one.reshape(want.shape), want, dot_tolerance(k, scale_), f"{how} {kept}, W={width}")
    for nthreads in (2, 3, 4):
        for concurrent in (True, False):
            many = run(spec, a.ravel(), b.ravel(), tiling=tiling, nthreads=nthreads, concurrent=concurrent, tag=how)
            assert many.tobytes() == one.tobytes(), f"{nthreads} threads, concurrent {concurrent}"


@pytest.mark.parametrize("n, how", [(512, "kept"), (768, "shared"), (4096, "shared"), (9000, "packed")])
def test_gemm_keeps_b_that_fits_l2_per_thread_and_shares_a_larger_one(n, how) -> None:
    """Rows split, B packed, a core with 1 MB of L2: SGEMM n = 512 (B 1 MB) keeps B whole in each thread's scratch,
    so that two threads pack it once each rather than once per chunk; a larger B is packed once per call into the
    shared area (B's own size, for any thread count), and one larger than SHARED_BYTES once per chunk; the scratch
    then holds one block of A and one of B."""
    spec = GemmSpec.contiguous(n, n, n)
    tiling = tiling_for(16, CacheSizes(32 << 10, 1 << 20, 4 << 20))
    plan = gemm_plan(spec, tiling)
    assert not plan.split_n and plan.keep_b == (how == "kept") and plan.share == ("b" if how == "shared" else None)
    assert gemm_shared_bytes(spec, tiling) == (4 * n * -(-n // tiling.nr) * tiling.nr if how == "shared" else 0)
    blocks = 4 * (plan.mc * plan.kc + plan.kc * plan.nc + 32)
    assert gemm_scratch_bytes(spec, tiling) <= ((1 << 20) + blocks if how == "kept" else blocks)


def test_gemm_without_claim_words_threads_take_static_shares() -> None:
    spec = GemmSpec.contiguous(37, 5 * HOST.nr + 3, 67)
    a = RNG.standard_normal((37, 67)).astype(np.float32).ravel()
    b = RNG.standard_normal((67, spec.n)).astype(np.float32).ravel()
    library, name = build("t_gemm_static", (spec, HOST), lambda module, nm: emit_gemm(module, nm, spec, HOST))
    c = np.full(37 * spec.n, np.nan, np.float32)
    run_threads(kernel(library, name, 0), [a.ctypes.data, b.ctypes.data, c.ctypes.data], [],
                gemm_scratch_bytes(spec, HOST), 3, claims=False, concurrent=True)
    assert c.tobytes() == run(spec, a, b).tobytes()


@pytest.mark.parametrize("m, n, k", [(5, 6, 7), (600, 300, 400)], ids=["small", "shared"])
def test_gemm_ignores_invalid_thread_ids(m, n, k) -> None:
    """A thread id outside [0, nthreads) computes nothing and returns, also where the threads share the packing
    of B (it does not wait for units nobody packs)."""
    spec, tiling = GemmSpec.contiguous(m, n, k), replace(HOST, private_bytes=0)
    assert (gemm_plan(spec, tiling).share is not None) == (m > 5)
    library, name = build("t_gemm_tid", (spec, tiling), lambda module, nm: emit_gemm(module, nm, spec, tiling))
    fn = kernel(library, name, 0)
    a, b, c = np.ones(m * k, np.float32), np.ones(k * n, np.float32), np.full(m * n, 3.0, np.float32)
    claim, share = aligned(16), aligned(16)
    for tid, nthreads in ((0, 0), (-1, 2), (2, 2), (0, -4)):
        fn(a.ctypes.data, b.ctypes.data, c.ctypes.data, aligned(1 << 20).ctypes.data, tid, nthreads,
           claim.ctypes.data, share.ctypes.data)
    assert (c == 3.0).all() and not claim.any() and not share.any()


def test_gemm_spec_rejects_bad_layouts() -> None:
    with pytest.raises(ValueError, match="unit column stride"):
        GemmSpec(2, 2, 2, Strided(2, 1), Strided(2, 1), Strided(1, 2))
    with pytest.raises(ValueError, match="batch strides"):
        GemmSpec(2, 2, 2, Strided(2, 1, (4,)), Strided(2, 1), Strided(2, 1, (4,)), (3,))
    with pytest.raises(ValueError, match="negative"):
        GemmSpec(-1, 2, 2, Strided(2, 1), Strided(2, 1), Strided(2, 1))
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul_spec((3, 4), (5, 6))
    with pytest.raises(ValueError, match="broadcast"):
        matmul_spec((2, 3, 4), (3, 4, 5))


def test_gemm_extents_cover_the_operands() -> None:
    spec = matmul_spec((3, 1, 5, 7), (4, 7, 6))
    assert spec.extents() == (3 * 5 * 7, 4 * 7 * 6, 3 * 4 * 5 * 6)


def test_gemm_micro_kernel_uses_full_width_fma() -> None:
    spec = GemmSpec.contiguous(64, 64, 64)
    library, _ = build("t_gemm_ir", (spec, HOST), lambda module, nm: emit_gemm(module, nm, spec, HOST))
    text = library.llvm_ir()
    assert f"llvm.fma.v{HOST.width}f32" in text or HOST.width == 4
    assert f"<{HOST.width} x float>" in text


def test_gemm_scratch_is_zero_when_nothing_is_packed() -> None:
    assert gemm_scratch_bytes(GemmSpec.contiguous(1, 100, 100)) == 0
    assert gemm_scratch_bytes(GemmSpec.contiguous(100, 100, 100)) % 64 == 0
