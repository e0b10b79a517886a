"""matmul, linear and conv2d lowerings against the numpy reference: numpy.matmul's shapes (1-d operands, broadcast
batch dimensions, empty axes), float32 on the GEMM and conv kernels, other dtypes on the fallback kernels, and a
fixed linear weight read pre-packed. Sums within the accuracy table's bound."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from braze.ir.evaluate import evaluate
from tests.codegen.lowering_harness import check_node, compile_node, make_node, random_array, run_node

EXAMPLES = settings(max_examples=12, deadline=None, derandomize=True)
dims = st.sampled_from([0, 1, 2, 5, 13, 17, 40])


@st.composite
def matmul_shapes(draw):
    m, k, n = draw(dims), draw(dims), draw(dims)
    batch = draw(st.sampled_from([(), (3,), (2, 1), (1, 4)]))
    other = tuple(1 if draw(st.booleans()) else d for d in batch)[draw(st.integers(0, len(batch))):]
    x = (k,) if draw(st.integers(0, 5)) == 0 else batch + (m, k)
    y = (k,) if draw(st.integers(0, 5)) == 0 else other + (k, n)
    return x, y


@EXAMPLES
@given(shapes=matmul_shapes(), dtype=st.sampled_from(["float32", "float32", "float64", "int32"]),
       seed=st.integers(0, 2 ** 32 - 1))
def test_matmul_matches_reference(shapes, dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, y = random_array(rng, shapes[0], dtype), random_array(rng, shapes[1], dtype)
    node = make_node("matmul", x, y)
    scale = np.abs(x.astype(np.float64)) @ np.abs(y.astype(np.float64))
    check_node(node, [x, y], terms=x.shape[-1], scale=scale)


@st.composite
def convolutions(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c_in, c_out = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    attrs = {"stride": (draw(st.integers(1, 2)), draw(st.integers(1, 2))),
             "padding": (draw(st.integers(0, 2)), draw(st.integers(0, 2))),
             "dilation": (draw(st.integers(1, 2)), draw(st.integers(1, 2))), "groups": groups}
    size = (draw(st.integers(5, 11)), draw(st.integers(5, 19)))
    return (draw(st.integers(1, 2)), c_in) + size, (c_out, c_in // groups) + kernel, attrs, draw(st.booleans())


@EXAMPLES
@given(case=convolutions(), dtype=st.sampled_from(["float32", "float32", "float64"]), seed=st.integers(0, 2 ** 32 - 1))
def test_conv2d_matches_reference(case, dtype: str, seed: int) -> None:
    x_shape, w_shape, attrs, with_bias = case
    rng = np.random.default_rng(seed)
    arrays = [random_array(rng, x_shape, dtype), random_array(rng, w_shape, dtype)]
    if with_bias:
        arrays.append(random_array(rng, (w_shape[0],), dtype))
    node = make_node("conv2d", *arrays, **attrs)
    scale = evaluate("conv2d", [np.abs(a.astype(np.float64)) for a in arrays], node.attr)[0]
    check_node(node, arrays, terms=w_shape[1] * w_shape[2] * w_shape[3], scale=scale)


def test_depthwise_conv2d_matches_reference() -> None:
    rng = np.random.default_rng(5)
    x, w, b = random_array(rng, (2, 6, 9, 13), "f32"), random_array(rng, (6, 1, 3, 3), "f32"), \
        random_array(rng, (6,), "f32")
    node = make_node("conv2d", x, w, b, padding=(1, 1), groups=6)
    scale = evaluate("conv2d", [np.abs(x), np.abs(w), np.abs(b)], node.attr)[0]
    check_node(node, [x, w, b], terms=9, scale=scale)


@EXAMPLES
@given(shapes=matmul_shapes(), dtype=st.sampled_from(["float32", "float64", "int32"]))
def test_linear_matches_reference(shapes, dtype) -> None:
    """linear(x, W) reads W (out, in) as stored, with swapped strides, on the GEMM and on the fallback kernel."""
    x_shape, y_shape = shapes
    if len(y_shape) != 2:
        y_shape = (x_shape[-1], 3)
    rng = np.random.default_rng(9)
    x, weight = random_array(rng, x_shape, dtype), random_array(rng, y_shape[::-1], dtype)
    node = make_node("linear", x, weight)
    scale = evaluate("linear", [np.abs(x.astype(np.float64)), np.abs(weight.astype(np.float64))])[0]
    check_node(node, [x, weight], terms=x_shape[-1], scale=scale)


def test_linear_reads_a_fixed_weight_prepacked() -> None:
    """A fixed (param) weight is read pre-packed; the results equal those of the weight read in place."""
    rng = np.random.default_rng(9)
    x, weight = random_array(rng, (37, 24), "f32"), random_array(rng, (40, 24), "f32")
    node = make_node("linear", x, weight)
    assert compile_node(node, fixed=frozenset({"in1"})).spec.prepared
    assert not compile_node(node).spec.prepared
    packed = run_node(node, [x, weight], fixed=frozenset({"in1"}))[0]
    assert packed.tobytes() == run_node(node, [x, weight])[0].tobytes()
    assert packed.tobytes() == run_node(node, [x, weight], 3, fixed=frozenset({"in1"}))[0].tobytes()
