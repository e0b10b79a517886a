"""The sort lowering (radix sort for lines of RADIX_LEAST or more float32 or int32 values, else merge sort), and
topk's (lines side by side in lanes, by insertion with a vector of a long line passed over at once where none of it
enters, or from the sort), against the numpy reference (a stable argsort, NaN largest), bit for bit: values and
positions, on edge lengths, ties, NaN, signed zeros, both directions, inner axes, integer and bool lines, 1 and 3
threads."""
from __future__ import annotations

import numpy as np
import pytest

from braze.codegen.lower.scan import RADIX_LEAST
from tests.codegen.lowering_harness import check_node, force_cpu, make_node

LENGTHS = [0, 1, 5, 33, RADIX_LEAST - 1, RADIX_LEAST, 301]


def _line(n: int, seed: int) -> np.ndarray:
    """n float32 values with many ties, signed zeros and NaNs."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, n).astype(np.float32)
    x[rng.random(n) < 0.15] = np.nan
    x[rng.random(n) < 0.1] = -0.0
    return x


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("n", LENGTHS)
def test_sort_lowering_is_stable_with_nan_largest(n, descending):
    x = np.stack([_line(n, seed) for seed in range(3)])
    check_node(make_node("sort", x, axis=1, descending=descending), [x])


@pytest.mark.parametrize("descending", [False, True])
def test_sort_lowering_sorts_an_inner_axis(descending):
    x = np.random.default_rng(1).standard_normal((4, 9, 3)).astype(np.float64)
    check_node(make_node("sort", x, axis=1, descending=descending), [x])


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_sort_lowering_sorts_integer_and_bool_lines(dtype):
    x = np.random.default_rng(2).integers(0, 3, (2, 17)).astype(dtype)
    check_node(make_node("sort", x, axis=-1), [x])
    check_node(make_node("sort", x, axis=-1, descending=True), [x])


def test_sort_lowering_orders_sorted_and_reversed_runs():
    x = np.stack([np.arange(64, dtype=np.float32), np.arange(64, 0, -1, dtype=np.float32),
                  np.full(64, 2.0, np.float32)])
    values, positions = check_node(make_node("sort", x, axis=1), [x])
    np.testing.assert_array_equal(positions[2], np.arange(64))   # all ties: positions keep their order


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # signaling NaNs compared as float64
@pytest.mark.parametrize("descending", [False, True])
def test_sort_lowering_radix_orders_every_byte_of_the_key(descending):
    """Values whose four key bytes all differ (both signs, infinities, subnormals, NaNs with payloads, signed zeros)
    and int32 lines from INT_MIN to INT_MAX: every byte's scatter runs, and the values come back with their bits."""
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2 ** 32, 4 * 257, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32).reshape(4, 257).copy()
    x[0, :6] = [np.inf, -np.inf, 1e-45, -1e-45, 0.0, -0.0]
    x[1, 3:9] = np.float32(2.5)
    values, positions = check_node(make_node("sort", x, axis=1, descending=descending), [x])
    np.testing.assert_array_equal(values.view(np.uint32), np.take_along_axis(x, positions, 1).view(np.uint32))
    i = rng.integers(-2 ** 31, 2 ** 31, (3, 130), dtype=np.int64).astype(np.int32)
    i[0, :4] = [-2 ** 31, 2 ** 31 - 1, 0, -1]
    check_node(make_node("sort", i, axis=1, descending=descending), [i])
    check_node(make_node("sort", i.T.copy(), axis=0, descending=descending), [i.T.copy()])


def test_sort_lowering_of_a_scalar_and_of_long_lines():
    check_node(make_node("sort", np.float32(4.0), axis=0), [np.float32(4.0)])
    x = np.random.default_rng(3).standard_normal((2, 5000)).astype(np.float32)
    check_node(make_node("sort", x, axis=1), [x])


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("n, k", [(1, 1), (5, 1), (33, 3), (33, 8), (200, 5), (200, 64), (200, 65), (40, 40), (7, 0)])
def test_topk_lowering_is_sorts_first_k(n, k, largest):
    """Ties keep the lower position and NaN is largest, as in sort: by insertion (k <= 64 and at most a quarter of
    the line) and from the merge sort (beyond), whose boundaries these k straddle."""
    x = np.stack([_line(n, seed) for seed in range(3)])
    check_node(make_node("topk", x, axis=1, k=k, largest=largest), [x])


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("k", [1, 7, 20])
def test_topk_passes_over_vectors_none_of_whose_values_enter(k, cpu, monkeypatch):
    """Long contiguous lines are read a vector at a time and a vector is skipped when none of its values sorts
    before the last kept one: the same values and positions as the sort, with NaN and ties in the vectors that do
    hold entering values, on AVX-512 and AVX2 widths."""
    force_cpu(cpu, monkeypatch)
    rng = np.random.default_rng(k)
    x = rng.standard_normal((4, 517 + k)).astype(np.float32)
    x[1, ::37] = np.nan
    x[2, 100:140] = x[2].max()
    x[3] = np.round(x[3])
    for largest in (True, False):
        check_node(make_node("topk", x, axis=1, k=k, largest=largest), [x])


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_topk_of_lines_side_by_side_in_lanes(dtype, cpu, monkeypatch):
    """Small k over many short rows (a gather per column) or along an inner axis (vector loads), lines in lanes
    through an insertion network: sort's order with ties, NaN and signed zeros, k up to the whole line, a last
    group of fewer lines than lanes, on AVX-512 and AVX2 widths."""
    force_cpu(cpu, monkeypatch)
    rng = np.random.default_rng(11)
    for shape, axis, k in (((37, 8), 1, 2), ((19, 33), 1, 8), ((40, 128), 1, 1), ((21, 5), 1, 5),
                           ((3, 50, 37), 1, 6), ((2, 9, 16), 1, 8), ((8, 5, 17), 0, 3)):
        x = rng.integers(-3, 4, shape).astype(dtype)
        if dtype.startswith("float"):
            x[rng.random(shape) < 0.15] = np.nan
            x[rng.random(shape) < 0.1] = -0.0
        for largest in (True, False):
            check_node(make_node("topk", x, axis=axis, k=k, largest=largest), [x])


@pytest.mark.parametrize("dtype", ["float64", "int32", "uint8", "bool"])
def test_topk_lowering_of_an_inner_axis_and_other_dtypes(dtype):
    x = np.random.default_rng(4).integers(0, 5, (3, 50, 4)).astype(dtype)
    check_node(make_node("topk", x, axis=1, k=6), [x])
    check_node(make_node("topk", x, axis=-1, k=2, largest=False), [x])


def test_topk_lowering_of_ordered_lines_and_all_ties():
    """Ascending lines make every value enter (each moving up past all kept), descending ones none after the first
    k; a line of equal values keeps its first k positions."""
    x = np.stack([np.arange(300, dtype=np.float32), np.arange(300, 0, -1, dtype=np.float32),
                  np.full(300, 2.0, np.float32)])
    values, positions = check_node(make_node("topk", x, axis=1, k=10), [x])
    np.testing.assert_array_equal(positions[2], np.arange(10))
    np.testing.assert_array_equal(values[0], np.arange(299, 289, -1, dtype=np.float32))


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_scans_along_a_leading_axis_take_lines_side_by_side(op, dtype):
    """W neighbouring lines at once, the last inner % W one at a time: every element in numpy's order, bit for bit."""
    rng = np.random.default_rng(6)
    for shape, axis in (((7, 37), 0), ((3, 9, 40), 1), ((5, 16), 0), ((4, 3), 0), ((2, 6, 1), 1)):
        x = rng.uniform(0.5, 1.5, shape).astype(dtype) if dtype != "int64" else rng.integers(-3, 4, shape)
        check_node(make_node(op, x, axis=axis), [x])
