"""Graphs cut to a chunk of their batch (ir/rows.py) and the registry's `rows` trait: wherever an op says it computes
its rows independently, a chunk's rows computed alone are those rows of the whole batch's result (every op's
samples, against the reference interpreter); where a node mixes rows, the graph is not cut."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from braze import ir
from braze.ir.errors import BrazeError
from braze.ir.interpret import interpret
from braze.ir.registry import get_op
from braze.ir.rows import batch_of, rows_graph

from .samples import Sample, all_samples
from .test_roundtrip_hypothesis import OPS, attributes, broadcastable_shape

SAMPLES = all_samples()

# Ops that must keep their rows on some sample with a row-carrying first axis of two or more (the test below finds
# which do): the ops of the models braze compiles in chunks.
ROW_WISE = {"add", "mul", "relu", "gelu", "where", "cast", "conv2d", "max_pool2d", "avg_pool2d",
            "adaptive_avg_pool2d", "batch_norm", "layer_norm", "linear", "matmul", "softmax", "mean", "sum",
            "concat", "attention", "fused", "index_select"}


def _graph(sample: Sample, carried: tuple[int, ...]) -> ir.Graph | None:
    """The sample's op as a graph: the operands at `carried` are its inputs, the others params (weights)."""
    arrays = [np.asarray(a) for a in sample.args]
    op = get_op(sample.op)
    b = ir.GraphBuilder(sample.op)
    operands, weights = [], {}
    for k, a in enumerate(arrays):
        if k in carried:
            operands.append(b.input(f"x{k}", ir.type_of(a)))
        else:
            weights[f"w{k}"] = a
            operands.append(b.param(f"w{k}", ir.type_of(a), id=k, trainable=False))
    outs = b.add_node(sample.op, operands, op.check_attrs(sample.attrs))
    return b.finish(list(outs), weights=weights)


def _choices(sample: Sample) -> list[tuple[int, ...]]:
    """Every set of operands sharing a first axis of two or more rows, as the inputs carrying them."""
    shapes = [np.shape(a) for a in sample.args]
    found = []
    for n in range(1, len(shapes) + 1):
        for subset in itertools.combinations(range(len(shapes)), n):
            sizes = {shapes[k][0] if shapes[k] else 0 for k in subset}
            if len(sizes) == 1 and sizes.pop() >= 2:
                found.append(subset)
    return found


def _claims(sample: Sample) -> int:
    """Check every cut the sample's op allows against the whole batch; how many it allowed."""
    claims = 0
    for carried in _choices(sample):
        graph = _graph(sample, carried)
        batch = batch_of(graph)
        if batch is None:
            continue
        rows = batch // next(p for p in range(2, batch + 1) if batch % p == 0)
        cut = rows_graph(graph, rows) if rows else None
        if cut is None:
            continue
        claims += 1
        _check_chunks(graph, cut, [np.asarray(sample.args[k]) for k in carried], f"{sample.id}, operands {carried}")
    return claims


def _check_chunks(graph: ir.Graph, cut: ir.Graph, inputs: list[np.ndarray], what: str) -> None:
    """The cut graph run on each chunk of the inputs in turn gives the whole graph's results."""
    rows, batch = cut.inputs[0].shape[0], graph.inputs[0].shape[0]
    whole = interpret(graph, inputs)
    parts = [interpret(cut, [a[i:i + rows] for a in inputs]) for i in range(0, batch, rows)]
    for k, expected in enumerate(whole):
        got = np.concatenate([p[k] for p in parts])
        # numpy may sum a product of fewer rows in another order: a few roundings of the dtype apart
        tol = 16 * np.finfo(expected.dtype).eps if expected.dtype.kind == "f" else 0
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol, err_msg=what)


@pytest.mark.parametrize("sample", SAMPLES, ids=[f"{s.id}#{k}" for k, s in enumerate(SAMPLES)])
def test_chunks_of_a_row_wise_op_give_the_whole_batch(sample: Sample) -> None:
    _claims(sample)


def test_the_models_ops_keep_their_rows() -> None:
    claimed = {s.op for s in SAMPLES if _claims(s)}
    assert ROW_WISE <= claimed, f"never cut: {sorted(ROW_WISE - claimed)}"


KEEPING = {
    "a reshape keeping axis 0": "%y = reshape %x {shape=[4, 3, 2]} : f32[4,3,2]\n"
                                "  %z = reshape %y {shape=[4, 6]} : f32[4,6]",
    "a transpose keeping it": "%y = transpose %x {perm=[0, 2, 1]} : f32[4,2,3]\n"
                              "  %z = reshape %y {shape=[4, 6]} : f32[4,6]",
    "a slice keeping it": "%y = slice %x {starts=[0, 1, 0], steps=[1, 1, 1], stops=[4, 3, 2]} : f32[4,2,2]\n"
                          "  %z = pad %y {pads=[0, 0, 1, 0, 0, 0], value=0.0} : f32[4,3,2]",
    "a softmax and a running sum along another axis": "%y = softmax %x {axis=1} : f32[4,3,2]\n"
                                                      "  %z = cumsum %y {axis=-1} : f32[4,3,2]",
    "a stack and a sum along the new axis": "%y = stack %x, %x {axis=1} : f32[4,2,3,2]\n"
                                            "  %z = sum %y {axes=[1], keepdim=false} : f32[4,3,2]",
    "an unsqueeze and a squeeze": "%y = unsqueeze %x {axes=[1]} : f32[4,1,3,2]\n"
                                  "  %z = squeeze %y {axes=[1]} : f32[4,3,2]",
}


@pytest.mark.parametrize("body", KEEPING.values(), ids=KEEPING.keys())
def test_movement_keeping_axis_0_is_cut(body: str) -> None:
    out = body.rsplit(" : ", 1)[1]
    graph = ir.parse(f"""graph @g(%x: f32[4,3,2]) -> ({out}) {{
  {body}
  return %z
}}""")
    cut = rows_graph(graph, 2)
    assert cut is not None
    _check_chunks(graph, cut, [np.random.default_rng(0).standard_normal((4, 3, 2)).astype(np.float32)], body)


MIXING = {
    "a mean over the batch": "%y = mean %x {axes=[0], keepdim=true} : f32[1,6]\n  %z = sub %x, %y : f32[4,6]",
    "a transpose moving it": "%y = transpose %x {perm=[1, 0]} : f32[6,4]\n  %z = transpose %y {perm=[1, 0]} : f32[4,6]",
    "a reshape merging it": "%y = reshape %x {shape=[24]} : f32[24]\n  %z = reshape %y {shape=[4, 6]} : f32[4,6]",
    "a flip along it": "%z = flip %x {axes=[0]} : f32[4,6]",
    "a softmax over it": "%z = softmax %x {axis=0} : f32[4,6]",
    "a running sum along it": "%z = cumsum %x {axis=0} : f32[4,6]",
    "a slice of its first rows": "%y = slice %x {starts=[0, 0], steps=[1, 1], stops=[2, 6]} : f32[2,6]\n"
                                 "  %z = concat %y, %y {axis=0} : f32[4,6]",
    "a weight of one row per batch row": "%z = add %x, %w : f32[4,6]",
}


@pytest.mark.parametrize("body", MIXING.values(), ids=MIXING.keys())
def test_a_node_mixing_rows_keeps_the_batch_whole(body: str) -> None:
    graph = ir.parse(f"""graph @g(%x: f32[4,6]) -> (f32[4,6]) {{
  %w = param {{buffer=false, id=0, path="w", trainable=false}} : f32[4,6]
  {body}
  return %z
}}""")
    assert rows_graph(graph, 2) is None


ROW_WISE_TEXT = """graph @g(%x: f32[6,3]) -> (f32[6,3], f32[6,3]) {
  %w = param {buffer=false, id=0, path="w", trainable=false} : f32[1,3]
  %y = add %x, %w : f32[6,3]
  return %y, %x
}"""


@pytest.mark.parametrize("rows", [0, 4, 6, 7, -1])
def test_rows_must_cut_the_batch_into_several_chunks(rows: int) -> None:
    assert rows_graph(ir.parse(ROW_WISE_TEXT), rows) is None
    assert rows_graph(ir.parse(ROW_WISE_TEXT), 2) is not None


def test_every_output_must_carry_rows() -> None:
    returns_weight = ROW_WISE_TEXT.replace("(f32[6,3], f32[6,3])", "(f32[6,3], f32[1,3])").replace(
        "return %y, %x", "return %y, %w")
    assert rows_graph(ir.parse(returns_weight), 2) is None


def test_inputs_of_different_batches_are_not_cut() -> None:
    two = """graph @g(%x: f32[6,3], %y: f32[3,3]) -> (f32[6,3]) {
  %z = matmul %x, %y : f32[6,3]
  return %z
}"""
    assert batch_of(ir.parse(two)) is None and rows_graph(ir.parse(two), 2) is None


CNN = """graph @cnn(%x: f32[8,3,6,6]) -> (f32[8,5]) attributes {outputs=["output"]} {
  %c.weight = param {buffer=false, id=0, path="c.weight", trainable=false} : f32[4,3,3,3]
  %c.bias = param {buffer=false, id=1, path="c.bias", trainable=false} : f32[4]
  %0 = fused %x, %c.weight, %c.bias {axes=[], body=graph @conv(%in0: f32[8,3,6,6], %in1: f32[4,3,3,3], %in2: f32[4]) -> (f32[8,4,6,6]) {
    %0 = conv2d %in0, %in1, %in2 {dilation=[1, 1], groups=1, padding=[1, 1], stride=[1, 1]} : f32[8,4,6,6]
    %1 = relu %0 : f32[8,4,6,6]
    return %1
  }, kind="conv", shape=[8, 4, 6, 6]} : f32[8,4,6,6]
  %1 = reshape %0 {shape=[8, 144]} : f32[8,144]
  %fc.weight = param {buffer=false, id=2, path="fc.weight", trainable=false} : f32[5,144]
  %2 = linear %1, %fc.weight : f32[8,5]
  return %2
}"""

CNN_ROWS_2 = """graph @cnn(%x: f32[2,3,6,6]) -> (f32[2,5]) attributes {outputs=["output"]} {
  %c.weight = param {buffer=false, id=0, path="c.weight", trainable=false} : f32[4,3,3,3]
  %c.bias = param {buffer=false, id=1, path="c.bias", trainable=false} : f32[4]
  %0 = fused %x, %c.weight, %c.bias {axes=[], body=graph @conv(%in0: f32[2,3,6,6], %in1: f32[4,3,3,3], %in2: f32[4]) -> (f32[2,4,6,6]) {
    %0 = conv2d %in0, %in1, %in2 {dilation=[1, 1], groups=1, padding=[1, 1], stride=[1, 1]} : f32[2,4,6,6]
    %1 = relu %0 : f32[2,4,6,6]
    return %1
  }, kind="conv", shape=[2, 4, 6, 6]} : f32[2,4,6,6]
  %1 = reshape %0 {shape=[2, 144]} : f32[2,144]
  %fc.weight = param {buffer=false, id=2, path="fc.weight", trainable=false} : f32[5,144]
  %2 = linear %1, %fc.weight : f32[2,5]
  return %2
}
"""


def test_a_cut_graph_states_the_chunks_rows_everywhere() -> None:
    """Types, the reshape's shape and the region's body and domain all name the chunk's rows; the weights stay."""
    cut = rows_graph(ir.parse(CNN), 2)
    assert str(cut) == CNN_ROWS_2
    assert str(ir.parse(str(cut))) == CNN_ROWS_2  # and it verifies


@st.composite
def batched_graphs(draw: st.DrawFn) -> tuple[ir.Graph, list[np.ndarray]]:
    """A random verified DAG (the round-trip tests' ops and attributes) over inputs of four rows and params that
    broadcast along them, or that do not (a param of four rows, which must keep the batch whole)."""
    base = (4, *draw(st.lists(st.integers(1, 3), max_size=2)))
    b = ir.GraphBuilder("batched")
    pool = [b.input(f"in{i}", ir.TensorType(base, ir.float64)) for i in range(draw(st.integers(1, 2)))]
    weights = {}
    for k in range(draw(st.integers(0, 2))):
        shape = draw(broadcastable_shape(base)) if draw(st.integers(0, 4)) else base
        weights[f"w{k}"] = np.random.default_rng(k).standard_normal(shape)
        pool.append(b.param(f"w{k}", ir.TensorType(shape, ir.float64), id=k, trainable=False))
    for step in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(OPS))
        low, high = op.arity_range()
        operands = [draw(st.sampled_from(pool)) for _ in range(draw(st.integers(low, high or low + 2)))]
        try:
            pool.extend(b.add_node(op.name, operands, draw(attributes(op))))
        except BrazeError:
            continue  # operands or attributes the op rejects: draw another node
    outputs = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    return b.finish(outputs, weights=weights), [rng.standard_normal(v.shape) for v in b.inputs]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batched_graphs())
def test_a_random_graph_cut_into_chunks_gives_the_whole_batch(case: tuple[ir.Graph, list[np.ndarray]]) -> None:
    graph, inputs = case
    cut = rows_graph(graph, 2)
    if cut is None:
        return
    with np.errstate(all="ignore"):
        _check_chunks(graph, cut, inputs, str(graph))
