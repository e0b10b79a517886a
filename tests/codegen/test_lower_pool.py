"""Pooling against the numpy reference: random windows, strides, padding, dilation, ceil mode and
count_include_pad, 3-d and 4-d inputs, float32 and float64; max pooling exact (NaN included), averages within
the accuracy table's sum bound."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from braze.ir.errors import BrazeError
from braze.ir.evaluate import evaluate
from tests.codegen.lowering_harness import check_node, make_node, random_array

EXAMPLES = settings(max_examples=10, deadline=None, derandomize=True)
floats = st.sampled_from(["float32", "float64"])


@st.composite
def pooling(draw, dilation: bool):
    lead = draw(st.sampled_from([(2,), (1, 3), (2, 1)]))
    h, w = draw(st.integers(1, 12)), draw(st.integers(1, 35))
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    attrs = {"kernel_size": kernel, "stride": (draw(st.integers(1, 3)), draw(st.integers(1, 3))),
             "padding": (draw(st.integers(0, kernel[0] // 2)), draw(st.integers(0, kernel[1] // 2))),
             "ceil_mode": draw(st.booleans())}
    if dilation:
        attrs["dilation"] = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    return lead + (h, w), attrs


def pool_node(op: str, *operands: np.ndarray, **attrs):
    """The node, or the example skipped when the drawn geometry is one the op refuses."""
    try:
        return make_node(op, *operands, **attrs)
    except BrazeError:
        assume(False)


@EXAMPLES
@given(case=pooling(dilation=True), dtype=floats, seed=st.integers(0, 2 ** 32 - 1))
def test_max_pool2d_matches_reference(case, dtype: str, seed: int) -> None:
    shape, attrs = case
    x = random_array(np.random.default_rng(seed), shape, dtype)
    x.reshape(-1)[::7] = np.nan
    check_node(pool_node("max_pool2d", x, **attrs), [x])


@EXAMPLES
@given(case=pooling(dilation=False), include=st.booleans(), dtype=floats, seed=st.integers(0, 2 ** 32 - 1))
def test_avg_pool2d_matches_reference(case, include: bool, dtype: str, seed: int) -> None:
    shape, attrs = case
    x = random_array(np.random.default_rng(seed), shape, dtype)
    node = pool_node("avg_pool2d", x, count_include_pad=include, **attrs)
    scale = evaluate("avg_pool2d", [np.abs(x)], node.attr)[0]
    check_node(node, [x], terms=attrs["kernel_size"][0] * attrs["kernel_size"][1], scale=scale)


@EXAMPLES
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 20), st.integers(1, 20)),
       out=st.tuples(st.integers(1, 7), st.integers(1, 7)) | st.just((1, 1)), dtype=floats,
       seed=st.integers(0, 2 ** 32 - 1))
def test_adaptive_avg_pool2d_matches_reference(shape, out, dtype: str, seed: int) -> None:
    x = random_array(np.random.default_rng(seed), shape, dtype)
    node = make_node("adaptive_avg_pool2d", x, output_size=out)
    scale = evaluate("adaptive_avg_pool2d", [np.abs(x)], node.attr)[0]
    terms = (-(-shape[2] // out[0]) + 1) * (-(-shape[3] // out[1]) + 1)
    check_node(node, [x], terms=terms, scale=scale)


@pytest.mark.parametrize("stride", [2, 3, 4, 5])
@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_strided_pooling_reads_each_tap_whole_at_every_row_width(stride: int, op: str, dtype: str) -> None:
    """Strides up to 4 load a tap's stride x W elements at once and keep every stride-th, larger ones gather: rows
    whose outputs are one short of a vector, a vector, one more and several, the padding and a ceil-mode edge at
    both ends, NaN kept by max."""
    rng = np.random.default_rng(stride)
    for outputs in (15, 16, 17, 35):
        width = (outputs - 1) * stride + 2
        x = random_array(rng, (2, 3, 7, width), dtype)
        x.reshape(-1)[::11] = np.nan if op == "max_pool2d" else 0.0
        attrs = dict(kernel_size=(3, 3), stride=(2, stride), padding=(1, 1), ceil_mode=True)
        node = make_node(op, x, **attrs)
        if op == "max_pool2d":
            check_node(node, [x])
        else:
            scale = evaluate(op, [np.abs(x)], node.attr)[0]
            check_node(node, [x], terms=9, scale=scale)
