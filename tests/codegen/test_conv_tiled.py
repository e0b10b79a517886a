"""float64 conv2d on the register tile of codegen/lower/conv_tiled.py, against the numpy reference: strides 1 (one
masked load per tap) and 2-3 (gathers), padding over every side, dilation, groups and depthwise, with and without a
bias, output rows of one pixel to past two tiles and channel counts around the tile's 6 and 12, on the host's
instruction set and on AVX2 forced with BRAZE_CPU; one and three threads give the same bytes (check_node).

Tolerance: the accuracy table's sums of K terms (the conv of |x| with |w|, plus |bias|).
"""
from __future__ import annotations

import numpy as np
import pytest

from braze.ir.evaluate import evaluate
from tests.codegen.lowering_harness import check_node, force_cpu, make_node, random_array

CPUS = [None, "haswell"]
# (x shape, w shape, stride, padding, dilation, groups, bias)
CASES = [
    ((1, 1, 1, 1), (1, 1, 1, 1), (1, 1), (0, 0), (1, 1), 1, False),
    ((2, 3, 9, 17), (13, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, True),
    ((1, 4, 8, 33), (12, 4, 3, 3), (1, 1), (1, 1), (1, 1), 1, False),
    ((1, 2, 7, 15), (7, 2, 3, 5), (1, 1), (2, 0), (1, 1), 1, True),
    ((1, 3, 11, 19), (5, 3, 3, 3), (2, 2), (1, 1), (1, 1), 1, True),
    ((1, 2, 10, 23), (6, 2, 3, 3), (3, 2), (0, 2), (1, 1), 1, False),
    ((1, 2, 12, 20), (4, 2, 3, 3), (1, 1), (2, 2), (2, 2), 1, True),
    ((2, 6, 8, 9), (9, 2, 3, 3), (1, 1), (1, 1), (1, 1), 3, True),
    ((1, 8, 13, 13), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1), 8, True),
    ((1, 5, 6, 6), (25, 5, 1, 1), (1, 1), (0, 0), (1, 1), 1, False),
    ((1, 3, 4, 4), (2, 3, 5, 5), (1, 1), (3, 3), (1, 1), 1, True),
    ((0, 2, 3, 5), (3, 2, 1, 1), (1, 1), (0, 0), (1, 1), 1, False),
    ((1, 2, 3, 40), (3, 2, 1, 30), (1, 1), (0, 5), (1, 1), 1, True),   # more columns than the tile unrolls
]


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_conv2d_float64_matches_reference(case, cpu, monkeypatch) -> None:
    force_cpu(cpu, monkeypatch)
    x_shape, w_shape, stride, padding, dilation, groups, with_bias = case
    rng = np.random.default_rng(len(x_shape) + sum(w_shape))
    arrays = [random_array(rng, x_shape, "f64"), random_array(rng, w_shape, "f64")]
    if with_bias:
        arrays.append(random_array(rng, (w_shape[0],), "f64"))
    node = make_node("conv2d", *arrays, stride=stride, padding=padding, dilation=dilation, groups=groups)
    scale = evaluate("conv2d", [np.abs(a) for a in arrays], node.attr)[0]
    check_node(node, arrays, terms=w_shape[1] * w_shape[2] * w_shape[3], scale=scale)


def test_conv2d_float64_special_values_reach_their_windows() -> None:
    """An inf and a NaN in x reach exactly the outputs whose windows hold them."""
    x = np.ones((1, 1, 6, 10))
    x[0, 0, 1, 2], x[0, 0, 4, 8] = np.inf, np.nan
    w = np.ones((2, 1, 3, 3))
    node = make_node("conv2d", x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    check_node(node, [x, w], terms=9, scale=evaluate("conv2d", [np.abs(x), w], node.attr)[0])
