"""gather, index_select, index_add and one_hot against the numpy reference, bit for bit, with i32 and i64 indices;
indices outside the operand never read or write outside it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from braze.codegen.lower.checks import module_checks
from braze.ir.errors import IndexRangeError
from braze.ir.types import DTYPES
from tests.codegen.lowering_harness import (check_node, compile_node, make_node, reference, run_node_reporting, shapes,
                                            special_array)

DTYPE_NAMES = [d.numpy_name for d in DTYPES]
EXAMPLES = settings(max_examples=10, deadline=None, derandomize=True)
index_dtypes = st.sampled_from(["int32", "int64"])


@EXAMPLES
@given(data=st.data(), shape=shapes(min_rank=1, nonempty=True), dtype=st.sampled_from(DTYPE_NAMES),
       index_dtype=index_dtypes, seed=st.integers(0, 2 ** 32 - 1))
def test_gather_matches_reference(data, shape, dtype: str, index_dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(0, len(shape) - 1))
    index_shape = tuple(data.draw(st.integers(0, d + 2)) if a == axis else data.draw(st.integers(0, d))
                        for a, d in enumerate(shape))
    x = special_array(rng, shape, dtype)
    indices = rng.integers(0, shape[axis], index_shape).astype(index_dtype)
    check_node(make_node("gather", x, indices, axis=axis), [x, indices])


@EXAMPLES
@given(data=st.data(), shape=shapes(min_rank=1, nonempty=True), index_shape=shapes(max_rank=2),
       dtype=st.sampled_from(DTYPE_NAMES), index_dtype=index_dtypes, seed=st.integers(0, 2 ** 32 - 1))
def test_index_select_matches_reference(data, shape, index_shape, dtype: str, index_dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = special_array(rng, shape, dtype)
    indices = rng.integers(0, shape[axis], index_shape).astype(index_dtype)
    check_node(make_node("index_select", x, indices, axis=axis), [x, indices])


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_index_select_along_the_last_axis_takes_rows_of_indices(dtype: str) -> None:
    """Reflect padding's and nearest upsampling's index lists over a last axis, and repeated and reversed ones."""
    x = special_array(np.random.default_rng(5), (2, 3, 5, 56), dtype)
    for indices in (np.asarray([1, *range(56), 54]), np.repeat(np.arange(56), 2), np.arange(55, -1, -1, dtype=np.int32),
                    np.asarray([7])):
        check_node(make_node("index_select", x, indices, axis=3), [x, indices])


@EXAMPLES
@given(data=st.data(), shape=shapes(min_rank=1), index_shape=shapes(max_rank=2), dtype=st.sampled_from(DTYPE_NAMES),
       index_dtype=index_dtypes, seed=st.integers(0, 2 ** 32 - 1))
def test_index_add_matches_reference(data, shape, index_shape, dtype: str, index_dtype: str, seed: int) -> None:
    """Repeated indices sum in index order, as np.add.at does: bit-exact, and the same bytes on 3 threads."""
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    indices = rng.integers(0, max(shape[axis], 1), index_shape if shape[axis] else (0,)).astype(index_dtype)
    source = shape[:axis % len(shape)] + indices.shape + shape[axis % len(shape) + 1:]
    g = special_array(rng, source, dtype)
    check_node(make_node("index_add", g, indices, axis=axis, shape=shape), [g, indices])


def test_index_add_sums_a_repeated_index_in_order() -> None:
    """Float addition does not associate: the compiled sum of one row's terms is the reference's, left to right."""
    g = np.asarray([[1.0], [1e8], [-1e8], [1.0]] * 3, np.float32)
    indices = np.asarray([0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 1], np.int64)
    node = make_node("index_add", g, indices, axis=0, shape=(2, 1))
    want = reference(node, [g, indices])[0]
    for nthreads in (1, 3):
        np.testing.assert_array_equal(run_node_reporting(node, [g, indices], nthreads)[0][0], want)


@EXAMPLES
@given(index_shape=shapes(max_rank=3), classes=st.sampled_from([1, 3, 16, 21]), dtype=st.sampled_from(DTYPE_NAMES),
       index_dtype=index_dtypes, seed=st.integers(0, 2 ** 32 - 1))
def test_one_hot_matches_reference(index_shape, classes: int, dtype: str, index_dtype: str, seed: int) -> None:
    indices = np.random.default_rng(seed).integers(0, classes, index_shape).astype(index_dtype)
    check_node(make_node("one_hot", indices, num_classes=classes, dtype=dtype), [indices])


def test_out_of_range_indices_stay_inside_the_operand() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    wild = np.asarray([-5, 0, 2, 99, 2 ** 40], np.int64)
    rows = run_node_reporting(make_node("index_select", x, wild, axis=0), [x, wild])[0][0]
    np.testing.assert_array_equal(rows, x[[0, 0, 2, 2, 2]])
    picks = np.asarray([[-1, 7, 3, 0]], np.int64)
    np.testing.assert_array_equal(run_node_reporting(make_node("gather", x, picks, axis=1), [x, picks])[0][0],
                                  [[0, 3, 3, 0]])
    spread = run_node_reporting(make_node("index_add", np.ones((5, 4), np.float32), wild, axis=0, shape=(3, 4)),
                                [np.ones((5, 4), np.float32), wild])[0][0]
    np.testing.assert_array_equal(spread, [[2] * 4, [0] * 4, [3] * 4])
    hot = run_node_reporting(make_node("one_hot", wild, num_classes=4), [wild])[0][0]
    np.testing.assert_array_equal(hot.sum(axis=1), [0, 1, 1, 0, 0])


OUT_OF_RANGE = [
    ("index_select", np.arange(12, dtype=np.float32).reshape(3, 4), np.asarray([0, 2, 3, -1], np.int64), {"axis": 0}),
    ("index_select", np.arange(12, dtype=np.float32).reshape(3, 4), np.asarray([[1, -4], [4, 0]], np.int32),
     {"axis": -1}),
    ("gather", np.arange(12, dtype=np.float32).reshape(3, 4), np.asarray([[0, 1], [2, 3], [7, -1]], np.int64),
     {"axis": 0}),
    ("one_hot", None, np.asarray([[2, 0], [5, -3]], np.int64), {"num_classes": 5}),
    ("index_add", np.ones((4, 2), np.float32), np.asarray([1, 3, 0, -2], np.int32), {"axis": 0, "shape": (3, 2)}),
    ("index_add", np.ones((2, 0), np.float32), np.asarray([0, 5], np.int64), {"axis": 0, "shape": (3, 0)}),
    # an indexed axis of size 0: every index is bad, and the kernel must not read the empty operand at all
    ("index_select", np.zeros((0, 4), np.float32), np.asarray([1, 0], np.int64), {"axis": 0}),
    ("gather", np.zeros((0, 3), np.float32), np.asarray([[0, 1, 0]], np.int64), {"axis": 0}),
]


@pytest.mark.parametrize("op,x,indices,attrs", OUT_OF_RANGE, ids=lambda v: v if isinstance(v, str) else None)
@pytest.mark.parametrize("nthreads", [1, 3])
def test_out_of_range_index_reports_the_first_bad_value_in_order(op, x, indices, attrs, nthreads: int) -> None:
    """The kernel reports what the reference raises: the first bad index in row-major order, whichever thread meets
    it; the report's message template carries the reference's wording."""
    operands = [indices] if x is None else [x, indices]
    node = make_node(op, *operands, **attrs)
    with pytest.raises(IndexRangeError) as raised:
        reference(node, operands)
    number, value = run_node_reporting(node, operands, nthreads)[1]
    template = module_checks(compile_node(node).module)[number]
    assert template.replace("{}", str(value), 1).startswith(str(raised.value))
