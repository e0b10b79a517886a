"""The GEMV kernel for a few rows of A times a row-major (k, n) B read by its rows (x @ w, w an input or a param read
in place), against numpy (float64) on edge shapes of every vector width, batches and thread splits: every element
of C written once, the same bytes on any number of threads (its epilogues: test_gemv.py).

Tolerance: test_gemm's (native.dot_tolerance).
"""
from __future__ import annotations

import numpy as np
import pytest

from braze.codegen.gemm import GemmSpec, Strided, gemm_scratch_bytes, matmul_spec, tiling_for, uses_gemv
from braze.codegen.gemv import GEMV_ROWS
from braze.codegen.gemv_rows import rows_gemv_applies
from tests.codegen.native import assert_close, dot_tolerance
from tests.codegen.test_gemm import RNG, WIDTHS, count_writes, run


def _check(m: int, n: int, k: int, width: int, nthreads: int = 1) -> np.ndarray:
    """C = A @ B for a row-major (k, n) B; returns C."""
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    c = run(GemmSpec.contiguous(m, n, k), a.ravel(), b.ravel(), tiling=tiling_for(width),
            nthreads=nthreads)[:m * n].reshape(m, n)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert_close(c, a64 @ b64, dot_tolerance(k, np.abs(a64) @ np.abs(b64)), f"{m}x{n}x{k} W={width} threads={nthreads}")
    return c


def test_few_rows_times_a_row_major_b_take_the_gemv_by_rows() -> None:
    assert rows_gemv_applies(1, (), Strided(4096, 1), Strided(4096, 1), Strided(4096, 1))
    assert uses_gemv(GemmSpec.contiguous(1, 10, 7)) and uses_gemv(GemmSpec.contiguous(GEMV_ROWS, 10, 7))
    assert gemm_scratch_bytes(GemmSpec.contiguous(1, 64, 64)) == 0
    assert uses_gemv(matmul_spec((2, 1, 9), (9, 5), None, None))  # two batches of one row, one B
    assert not uses_gemv(GemmSpec.contiguous(GEMV_ROWS + 1, 10, 7))
    assert not uses_gemv(GemmSpec.contiguous(1, 10, 7, (2,)))  # a B per batch
    assert not rows_gemv_applies(1, (), Strided(7, 1), Strided(1, 7), Strided(10, 1))  # B's columns apart


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("m", range(1, GEMV_ROWS + 1))
def test_gemv_of_b_by_rows_matches_numpy_on_edge_shapes(m: int, width: int) -> None:
    """N around the vector and the claimed block of four; K of 0, 1, not a multiple of four, long."""
    for n, k in ((1, 1), (width - 1, 3), (width, 4), (width + 1, 5), (4 * width - 1, 2 * width + 1),
                 (4 * width + 1, 97), (4 * width + 3, 4099), (13, 0), (20 * width + 7, 33)):
        _check(m, n, k, width)


@pytest.mark.parametrize("nthreads", [2, 3, 7])
def test_threads_write_each_column_once_and_agree_with_one_thread(nthreads: int) -> None:
    """Threads claim blocks of C's columns; each column sums its k products in k order."""
    m, n, k = 2, 301, 37
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    spec = GemmSpec.contiguous(m, n, k)
    counts = np.zeros((m, n), np.float32)
    c = run(spec, a.ravel(), b.ravel(), epilogue=count_writes(0, 1, n), tag="count", extras=(counts.ravel(),),
            nthreads=nthreads, concurrent=True)
    assert (counts == 1).all()
    np.testing.assert_array_equal(c, run(spec, a.ravel(), b.ravel()))


@pytest.mark.parametrize("x_shape", [(3, 1, 20), (1, 2, 20), (1, 1, 1, 20)])
def test_rows_of_a_from_batch_dimensions_share_one_b(x_shape) -> None:
    n, k = 37, x_shape[-1]
    x = RNG.standard_normal(x_shape).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    spec = matmul_spec(x_shape, (k, n), None, None)
    assert rows_gemv_applies(spec.m, spec.batch, spec.a, spec.b, spec.c)
    want = x.astype(np.float64) @ b.astype(np.float64)
    c = run(spec, x.ravel(), b.ravel(), nthreads=2)[:want.size].reshape(want.shape)
    assert_close(c, want, dot_tolerance(k, np.abs(x.astype(np.float64)) @ np.abs(b.astype(np.float64))),
                 f"x {x_shape} @ B")
