"""The GEMV kernel emit_gemm picks for a few rows of A times a row-major W^T (a linear layer at batch 1-3), against
numpy (float64) on edge shapes of every vector width, with epilogues, batches and thread splits.

Tolerance: test_gemm's (native.dot_tolerance: 8*sqrt(K+1)*2^-24 times sum_k |a_ik*b_kj|, plus the epilogue's
operands).
"""
from __future__ import annotations

import numpy as np
import pytest

from braze.codegen.gemm import (GemmSpec, Strided, bias_cols, chain, gemm_scratch_bytes, matmul_spec, relu,
                                residual, tiling_for, uses_gemv)
from braze.codegen.gemv import GEMV_ROWS, gemv_applies
from tests.codegen.native import assert_close, dot_tolerance
from tests.codegen.test_gemm import RNG, WIDTHS, check, count_writes, run


def test_the_gemv_kernel_takes_a_few_rows_of_a_times_a_transposed_weight() -> None:
    assert uses_gemv(GemmSpec.contiguous(1, 4096, 4096, trans_b=True))
    assert uses_gemv(GemmSpec.contiguous(GEMV_ROWS, 10, 7, trans_b=True))
    assert uses_gemv(matmul_spec((2, 1, 9), (9, 5), None, (1, 9)))  # two batches of one row, one W
    assert gemm_scratch_bytes(GemmSpec.contiguous(1, 64, 64, trans_b=True)) == 0
    assert not uses_gemv(GemmSpec.contiguous(GEMV_ROWS + 1, 10, 7, trans_b=True))
    assert not gemv_applies(1, (), Strided(7, 1), Strided(10, 1))  # B's rows contiguous: codegen/gemv_rows.py
    assert not uses_gemv(GemmSpec.contiguous(1, 10, 7, (2,), trans_b=True))  # a W per batch


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("m", range(1, GEMV_ROWS + 1))
def test_gemv_matches_numpy_on_edge_shapes(width: int, m: int) -> None:
    """K of 0, 1, a vector +- 1, two, primes and a long row; N around the group of four rows and the vector."""
    tiling = tiling_for(width)
    for n, k in ((1, 1), (3, width - 1), (4, width), (5, width + 1), (width - 1, 2 * width + 1),
                 (width + 1, 97), (13, 0), (31, 4099)):
        check(m, n, k, trans_b=True, tiling=tiling)


@pytest.mark.parametrize("nthreads", [2, 3, 7])
def test_gemv_threads_cover_c_exactly_once_and_agree_with_one_thread(nthreads: int) -> None:
    m, n, k = 2, 43, 37
    spec = GemmSpec.contiguous(m, n, k, trans_b=True)
    a = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((n, k)).astype(np.float32)
    counts = np.zeros((m, n), np.float32)
    c = run(spec, a.ravel(), w.ravel(), epilogue=count_writes(0, 1, n), tag="count", extras=(counts.ravel(),),
            nthreads=nthreads, concurrent=True)
    assert (counts == 1).all()
    alone = run(spec, a.ravel(), w.ravel())
    np.testing.assert_array_equal(c, alone)  # a row of C is one dot product whichever thread computes it


@pytest.mark.parametrize("nthreads", [1, 2, 3])
@pytest.mark.parametrize("m, n, k", [(1, 43, 37), (2, 4, 16), (3, 1, 5), (1, 1030, 200)])
def test_gemv_walks_w_backward_on_odd_calls_to_the_same_bytes(nthreads: int, m: int, n: int, k: int) -> None:
    """On odd calls (the count of calls ended, codegen/abi.py) each thread walks its groups of W's rows backward:
    every row of C is still written once, with the same dot product."""
    spec = GemmSpec.contiguous(m, n, k, trans_b=True)
    a = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((n, k)).astype(np.float32)
    forward = run(spec, a.ravel(), w.ravel(), nthreads=nthreads)
    for calls in (1, 3, 2 ** 40 + 1):
        counts = np.zeros((m, n), np.float32)
        backward = run(spec, a.ravel(), w.ravel(), epilogue=count_writes(0, 1, n), tag="count",
                       extras=(counts.ravel(),), nthreads=nthreads, concurrent=True, calls=calls)
        assert (counts == 1).all()
        np.testing.assert_array_equal(backward, forward)


@pytest.mark.parametrize("trans_b", [True, False], ids=["w_t", "b_by_rows"])
@pytest.mark.parametrize("width", WIDTHS)
def test_gemv_bias_relu_residual_epilogue(width: int, trans_b: bool) -> None:
    """Both GEMVs: W^T (this module's) and a row-major B read by its rows (codegen/gemv_rows.py), over C's columns
    in more than one claimed block."""
    m, n, k = 3, 9 * width + 3, 3 * width - 1
    a = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    res = RNG.standard_normal((m, n)).astype(np.float32)
    spec = GemmSpec.contiguous(m, n, k, trans_b=trans_b)
    c = run(spec, a.ravel(), w.ravel(), tiling=tiling_for(width), epilogue=chain(bias_cols(0), relu, residual(1, n)),
            tag="gemv-bias-relu-res", extras=(bias, res.ravel()), nthreads=2)
    a64, b64 = a.astype(np.float64), (w.T if trans_b else w).astype(np.float64)
    want = np.maximum(a64 @ b64 + bias, 0) + res
    tol = dot_tolerance(k, np.abs(a64) @ np.abs(b64) + np.abs(bias) + np.abs(res))
    assert_close(c.reshape(m, n), want, tol, f"GEMV epilogue W={width} trans_b={trans_b}")


@pytest.mark.parametrize("x_shape", [(3, 1, 20), (1, 2, 20), (1, 1, 1, 20)])
def test_gemv_rows_of_a_from_batch_dimensions(x_shape) -> None:
    """Leading dimensions of x (a sequence of one token, a batch of single rows) are rows of the same W."""
    n, k = 11, x_shape[-1]
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = RNG.standard_normal((n, k)).astype(np.float32)
    spec = matmul_spec(x_shape, (k, n), None, (1, k))
    assert uses_gemv(spec)
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    c = run(spec, x.ravel(), w.ravel(), nthreads=2)[:want.size].reshape(want.shape)
    scale_ = np.abs(x.astype(np.float64)) @ np.abs(w.T.astype(np.float64))
    assert_close(c, want, dot_tolerance(k, scale_), f"x {x_shape} @ W^T")


@pytest.mark.parametrize("threads", [1, 2])
def test_each_call_advances_the_count_and_gives_the_same_bytes(threads: int) -> None:
    """The entry's thread 0 counts the calls that ended (codegen/abi.py: CALLS); a layer at batch 1 walks its weight
    the other way on each call and gives the same bytes every time."""
    import braze
    from braze import nn
    from braze.codegen.abi import CALLS

    braze.manual_seed(0)
    model = nn.Sequential(nn.Linear(300, 200), nn.ReLU(), nn.Linear(200, 70)).eval()
    x = RNG.standard_normal((1, 300)).astype(np.float32)
    compiled = braze.compile(model, x, threads=threads)
    count = compiled.executable._sync[CALLS:CALLS + 8].view(np.int64)
    first = compiled(x)
    for _ in range(3):
        before = int(count[0])
        np.testing.assert_array_equal(compiled(x), first)
        assert int(count[0]) == before + 1
    want = np.asarray(model(braze.tensor(x)))
    np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-5)
