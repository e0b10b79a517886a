"""The backward ops of pooling against the numpy reference on random geometries, x with ties, NaN and -inf
(windows whose first maximum is a padding tap included): max_pool2d_select bit-exact, the gradients within the
accuracy table's sum bound; 3 threads write the same bytes as 1."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from braze.ir.evaluate import evaluate
from tests.codegen.lowering_harness import check_node, random_array
from tests.codegen.test_lower_pool import floats, pool_node, pooling

EXAMPLES = settings(max_examples=10, deadline=None, derandomize=True)


def _awkward(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values with ties (rounded to halves), some NaN and some -inf."""
    x = np.round(2 * random_array(rng, shape, dtype)) / 2
    x.reshape(-1)[::11] = -np.inf
    x.reshape(-1)[5::13] = np.nan
    return x


@EXAMPLES
@given(case=pooling(dilation=True), dtype=floats, seed=st.integers(0, 2 ** 32 - 1))
def test_max_pool2d_select_and_grad_match_reference(case, dtype: str, seed: int) -> None:
    shape, attrs = case
    rng = np.random.default_rng(seed)
    x, v = _awkward(rng, shape, dtype), random_array(rng, shape, dtype)
    select = pool_node("max_pool2d_select", v, x, **attrs)
    check_node(select, [v, x])
    g = random_array(rng, select.out.shape, dtype)
    grad = pool_node("max_pool2d_grad", g, x, **attrs)
    scale = evaluate("max_pool2d_grad", [np.abs(g), x], grad.attr)[0]
    check_node(grad, [g, x], terms=g.size, scale=scale)


def test_max_pool2d_grad_drops_a_window_whose_first_maximum_is_padding() -> None:
    x = np.full((1, 3, 4), -np.inf)
    x[0, 2, 3] = 1.0
    attrs = dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))
    g = np.arange(1.0, 5.0).reshape(1, 2, 2)
    want = evaluate("max_pool2d_grad", [g, x], pool_node("max_pool2d_grad", g, x, **attrs).attr)[0]
    assert want.sum() < g.sum()  # the reference really drops some windows here
    check_node(pool_node("max_pool2d_grad", g, x, **attrs), [g, x])
    check_node(pool_node("max_pool2d_select", g.repeat(2, 1).repeat(2, 2)[:, :3], x, **attrs),
               [g.repeat(2, 1).repeat(2, 2)[:, :3], x])


@EXAMPLES
@given(case=pooling(dilation=False), include=st.booleans(), dtype=floats, seed=st.integers(0, 2 ** 32 - 1))
def test_avg_pool2d_grad_matches_reference(case, include: bool, dtype: str, seed: int) -> None:
    shape, attrs = case
    rng = np.random.default_rng(seed)
    pooled = pool_node("avg_pool2d", random_array(rng, shape, dtype), count_include_pad=include, **attrs)
    g = random_array(rng, pooled.out.shape, dtype)
    node = pool_node("avg_pool2d_grad", g, input_shape=shape, count_include_pad=include, **attrs)
    scale = evaluate("avg_pool2d_grad", [np.abs(g)], node.attr)[0]
    check_node(node, [g], terms=attrs["kernel_size"][0] * attrs["kernel_size"][1], scale=scale)
