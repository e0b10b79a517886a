"""Long float sums are blocked into compensated totals (codegen/lower/reduction.py): against float64, a row of 10^5
to 10^7 float32 terms sums with a relative error below F32_BOUND in every layout (contiguous rows, rows side by side,
a broadcast value), and so do mean and the sums inside softmax and layer norm. Fixed seeds."""
from __future__ import annotations

import math

import numpy as np
import pytest

from braze import ir
from braze.runtime.compile_path import compile_graph
from tests.codegen.lowering_harness import make_node, run_node

F32_BOUND = 2e-6   # observed: at most 6e-7 (a broadcast 0.1), typically 1e-8 to 1e-7
F64_BOUND = 1e-14


def _exact_sum(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """The correctly rounded float64 sum over `axes` (math.fsum per row): numpy's own float64 sum along a strided
    axis adds in sequence and is less accurate than the blocked one it checks."""
    kept = [a for a in range(x.ndim) if a not in axes]
    rows = np.moveaxis(x.astype(np.float64), list(axes), list(range(-len(axes), 0)))
    flat = rows.reshape(-1, int(np.prod([x.shape[a] for a in axes])))
    return np.array([math.fsum(r) for r in flat]).reshape([x.shape[a] for a in kept])


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - want) / np.abs(want)))


def _bound(dtype: str) -> float:
    return F32_BOUND if dtype == "float32" else F64_BOUND


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,axes", [((100_000,), (0,)), ((3, 200_000), (1,)), ((60_000, 16), (0,)),
                                        ((4, 50_000, 3), (1,)), ((300, 3, 400), (0, 2))])
def test_long_sums_match_float64(shape, axes, dtype: str) -> None:
    x = np.random.default_rng(7).random(shape).astype(dtype) + 0.5
    got, = run_node(make_node("sum", x, axes=axes, keepdim=False), [x])
    assert _relative(got, _exact_sum(x, axes)) < _bound(dtype)


@pytest.mark.parametrize("n", [100_000, 10_000_000])
def test_sum_of_a_broadcast_value_matches_float64(n: int) -> None:
    """The case that once lost three digits: one value broadcast along a long axis and summed (a strided-0 read)."""
    graph = ir.parse(f"""graph @g(%x: f32[1]) -> (f32[2]) {{
  %0 = broadcast_to %x {{shape=[2, {n}]}} : f32[2,{n}]
  %1 = sum %0 {{axes=[1], keepdim=false}} : f32[2]
  return %1
}}""")
    x = np.array([0.1], np.float32)
    got = compile_graph(graph, untrusted=True)(x)
    assert _relative(got, np.full(2, n * np.float64(x[0]))) < F32_BOUND


def test_long_mean_matches_float64() -> None:
    x = np.random.default_rng(8).standard_normal((2, 300_000)).astype(np.float32) + 3.0
    got, = run_node(make_node("mean", x, axes=(1,), keepdim=False), [x])
    assert _relative(got, x.astype(np.float64).mean(axis=1)) < F32_BOUND


def test_long_softmax_matches_float64() -> None:
    x = np.random.default_rng(9).standard_normal((2, 200_000)).astype(np.float32)
    got, = run_node(make_node("softmax", x, axis=1), [x])
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    assert _relative(got, e / e.sum(axis=1, keepdims=True)) < 8 * F32_BOUND  # each element: exp's few ulps too


def test_long_layer_norm_matches_float64() -> None:
    """Mean and variance of 10^5 terms far from zero: an inaccurate mean shows up in every output."""
    x = (np.random.default_rng(10).standard_normal((2, 100_000)) + 100.0).astype(np.float32)
    got, = run_node(make_node("layer_norm", x, normalized_shape=(100_000,), eps=1e-5), [x])
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    want = (x64 - mean) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5)
    assert float(np.max(np.abs(got - want))) < 1e-3  # |x - mean| / std rounds like 100 / 1 in float32: 1e-5 each
