"""float64 matmul and linear on the kernels of codegen/lower/matmul_tiled.py, against numpy: both forms (packed
blocks; the dot tile for a few rows or columns), B's rows or its columns contiguous, every edge of the tiles (one
row or column, a vector's lanes +- 1, primes, a tile +- 1, K of 0 and past a K block), batches broadcast either way
and 1-d operands, on the host's instruction set and on AVX2 forced with BRAZE_CPU; one and three threads give the
same bytes (check_node).

Tolerance: the accuracy table's sums of K terms (8 sqrt(K + 1) eps times |A| @ |B|).
"""
from __future__ import annotations

import numpy as np
import pytest

from braze.codegen.gemm import matmul_spec
from braze.codegen.lower.matmul_tiled import tiled_form
from tests.codegen.lowering_harness import check_node, force_cpu, make_node, random_array

CPUS = [None, "haswell"]
# M, K, N: one row or column, 3 and 5 (below a vector of 4 or 8 float64 lanes), 7-9 and 15-17 around the lanes and
# a tile's 16 columns, 11-13 around AVX-512's 12 rows, 97 past a unit's 8 row blocks, 0 for an empty K
SHAPES = [(1, 1, 1), (1, 9, 17), (3, 5, 7), (5, 3, 4), (6, 8, 8), (7, 16, 15), (11, 13, 16), (12, 9, 17),
          (13, 17, 33), (25, 4, 9), (97, 6, 19), (4, 0, 5), (2, 64, 3), (14, 300, 21)]


def _check(op: str, x: np.ndarray, y: np.ndarray) -> None:
    node = make_node(op, x, y)
    w = y.T if op == "linear" else y
    with np.errstate(invalid="ignore"):
        scale = np.abs(x) @ np.abs(w)
    check_node(node, [x, y], terms=x.shape[-1], scale=scale)


def test_few_rows_or_columns_take_the_dot_tile_and_the_rest_packed_blocks() -> None:
    assert tiled_form(matmul_spec((1, 4096), (4096, 4096), None, (1, 4096))) == "dot"   # x @ W^T at batch 1
    assert tiled_form(matmul_spec((512, 64), (64,))) == "dot"                            # a matrix times a vector
    assert tiled_form(matmul_spec((64, 784), (784, 512), None, (1, 784))) == "packed"    # a batch through a layer
    assert tiled_form(matmul_spec((1, 64), (64, 512))) == "packed"                       # B's columns apart
    assert tiled_form(matmul_spec((256, 256), (256, 256))) == "packed"


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_matmul_matches_numpy(m, k, n, cpu, monkeypatch) -> None:
    force_cpu(cpu, monkeypatch)
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    _check("matmul", random_array(rng, (m, k), "f64"), random_array(rng, (k, n), "f64"))


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_linear_matches_numpy(m, k, n, cpu, monkeypatch) -> None:
    force_cpu(cpu, monkeypatch)
    rng = np.random.default_rng(m * 1000 + k * 10 + n + 1)
    x, weight = random_array(rng, (m, k), "f64"), random_array(rng, (n, k), "f64")
    _check("linear", x, weight)


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("x_shape, y_shape", [((3, 13, 9), (9, 17)), ((2, 1, 5, 7), (1, 4, 7, 9)), ((7,), (7, 19)),
                                              ((4, 13, 9), (9,)), ((9,), (9,)), ((2, 3, 0, 5), (5, 4))])
def test_batched_and_vector_operands_match_numpy(x_shape, y_shape, cpu, monkeypatch) -> None:
    """Batches broadcast on either side, a 1-d x (one row), a 1-d y (the dot tile: one column of stride 0)."""
    force_cpu(cpu, monkeypatch)
    rng = np.random.default_rng(len(x_shape) * 10 + len(y_shape))
    _check("matmul", random_array(rng, x_shape, "f64"), random_array(rng, y_shape, "f64"))


def test_linear_of_a_batch_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    _check("linear", random_array(rng, (2, 3, 21), "f64"), random_array(rng, (10, 21), "f64"))


def test_large_operands_span_units_and_blocks() -> None:
    """B's rows a page apart (512 float64 columns), more row blocks than one unit takes, K past one K block and
    more columns than one packed block of B: units of a column block and a run of row blocks."""
    rng = np.random.default_rng(4)
    _check("matmul", random_array(rng, (130, 300), "f64"), random_array(rng, (300, 1100), "f64"))
    _check("linear", random_array(rng, (130, 300), "f64"), random_array(rng, (1100, 300), "f64"))


def test_special_values_propagate() -> None:
    """inf and NaN reach exactly the elements of C whose row of A or column of B holds them, as in numpy."""
    x = np.ones((5, 6))
    y = np.ones((6, 9))
    x[1, 2], y[3, 4] = np.inf, np.nan
    _check("matmul", x, y)
    _check("linear", x, np.ascontiguousarray(y.T))
