"""scatter_add against the numpy reference, bit for bit in every dtype (the kernel adds in the reference's order):
random shapes with repeated indices, index shapes smaller than the target, empty sources; an index outside the
target axis is reported as the reference raises it, whichever thread meets it."""
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

EXAMPLES = settings(max_examples=15, deadline=None, derandomize=True)


@EXAMPLES
@given(data=st.data(), shape=shapes(min_rank=1, nonempty=True), dtype=st.sampled_from([d.numpy_name for d in DTYPES]),
       index_dtype=st.sampled_from(["int32", "int64"]), seed=st.integers(0, 2 ** 32 - 1))
def test_scatter_add_matches_reference(data, shape, dtype: str, index_dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    index_shape = tuple(data.draw(st.integers(0, d + 3)) if a == axis % len(shape) else data.draw(st.integers(0, d))
                        for a, d in enumerate(shape))
    g = special_array(rng, index_shape, dtype)
    indices = rng.integers(0, shape[axis], index_shape).astype(index_dtype)
    check_node(make_node("scatter_add", g, indices, axis=axis, shape=shape), [g, indices])


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_scatter_add_along_the_last_axis_writes_every_row(dtype: str) -> None:
    """Rows of 37 and of 1 along the last axis with more indices than positions (repeats), and a target row past
    the indices' rows (zeros)."""
    rng = np.random.default_rng(3)
    for shape, index_shape in (((4, 37), (3, 50)), ((5, 1), (5, 3))):
        g = special_array(rng, index_shape, dtype)
        indices = rng.integers(0, shape[-1], index_shape)
        check_node(make_node("scatter_add", g, indices, axis=-1, shape=shape), [g, indices])


@pytest.mark.parametrize("nthreads", [1, 3])
def test_out_of_range_index_reports_the_first_bad_value_in_order(nthreads: int) -> None:
    g = np.ones((3, 2), np.float32)
    indices = np.asarray([[0, 1], [4, 0], [-1, 9]], np.int64)
    node = make_node("scatter_add", g, indices, axis=0, shape=(4, 2))
    with pytest.raises(IndexRangeError) as raised:
        reference(node, [g, indices])
    number, value = run_node_reporting(node, [g, indices], nthreads)[1]
    template = module_checks(compile_node(node).module)[number]
    assert template.replace("{}", str(value), 1).startswith(str(raised.value))
