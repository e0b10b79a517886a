"""matmul and conv2d lowerings against the numpy reference: numpy.matmul's shapes (1-d operands, broadcast batch
dimensions, empty axes), float32 on the GEMM and conv kernels, other dtypes on the fallback kernels, and a
transposed param read in place through KernelContext.producer. Sums within the accuracy table's bound."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from braze.ir.evaluate import evaluate
from braze.ir.graph import Node, Value
from braze.ir.types import TensorType, float32
from tests.codegen.lowering_harness import check_node, compile_node, make_node, random_array, reference, run_node

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


def test_matmul_reads_a_transposed_param_in_place() -> None:
    """matmul(x, transpose(W)) with W a param: the kernel reads W itself (B's packing transposes it)."""
    rng = np.random.default_rng(9)
    x, weight = random_array(rng, (7, 24), "f32"), random_array(rng, (37, 24), "f32")
    w_value = Value("fc.weight", TensorType((37, 24), float32))
    param = Node("param", (), (w_value,), (("buffer", False), ("id", 1), ("path", "fc.weight"), ("trainable", True)))
    wt = Value("wt", TensorType((24, 37), float32))
    transpose = Node("transpose", (w_value,), (wt,), (("perm", (1, 0)),))
    node = make_node("matmul", x, wt.type).replace(inputs=(Value("in0", TensorType((7, 24), float32)), wt))
    producers = {"wt": transpose, "fc.weight": param}
    assert [v.name for v in compile_node(node, producers=producers).spec.inputs] == ["in0", "fc.weight"]
    got = run_node(node, [x, weight.T.copy()], producers=producers, values={"fc.weight": weight})[0]
    want = reference(node, [x, weight.T.copy()])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    split = run_node(node, [x, weight.T.copy()], 3, producers=producers, values={"fc.weight": weight})[0]
    assert got.tobytes() == split.tobytes()
