"""The registry's op traits: every op's traits agree with its schema and with its reference on the op's samples
(reduced axes exist, index operands hold integers below their bound, elementwise-like results have the broadcast
shape, value-preserving results hold operand values), and the consumers' queries answer from them."""
from __future__ import annotations

import numpy as np
import pytest

from braze import ir
from braze.ir.builder import GraphBuilder
from braze.ir.evaluate import evaluate
from braze.ir.graph import Node
from braze.ir.registry import get_op, is_leaf, leaf_ops, op_names, reduction_domain
from braze.ir.types import TensorType, float32, type_of

from .samples import Sample, all_samples

SAMPLES = all_samples()


def node_of(sample: Sample) -> Node:
    """The sample as a graph node over inputs of its operands' types."""
    b = GraphBuilder("sample")
    inputs = [b.input(f"in{k}", type_of(np.asarray(a))) for k, a in enumerate(sample.args)]
    b.add_node(sample.op, inputs, sample.attrs)
    return b.nodes[-1]


def samples_where(test) -> list[Sample]:
    return [s for s in SAMPLES if test(get_op(s.op))]


@pytest.mark.parametrize("name", op_names())
def test_op_traits_agree_with_the_schema(name: str) -> None:
    op = get_op(name)
    assert op.is_leaf == (op.category == "leaf") and (not op.is_leaf or not op.operands)
    assert op.anchor in (None, "gemm", "conv") and (op.anchor is None or op.category in ("matmul", "conv"))
    assert all(0 <= position < len(op.operands) for position, _ in op.index_operands)
    assert not (op.is_reduction and op.elementwise_like)
    if op.category == "elementwise":
        assert op.elementwise_like


def test_leaf_ops_are_the_non_input_leaves() -> None:
    assert leaf_ops() == {"param", "flag", "constant"}


@pytest.mark.parametrize("sample", samples_where(lambda op: op.is_reduction), ids=lambda s: s.id)
def test_reduced_axes_are_axes_of_the_first_operand(sample: Sample) -> None:
    node = node_of(sample)
    shape, axes = reduction_domain(node)
    assert shape == node.inputs[0].shape
    assert list(axes) == sorted(set(axes)) and all(0 <= a < len(shape) for a in axes)


def test_reduced_axes_follow_the_attributes() -> None:
    b = GraphBuilder("g")
    x = b.input("x", TensorType((2, 3, 4), float32))
    b.sum(x, axes=(-1, 0)), b.argmax(x, axis=None), b.softmax(x, axis=1)
    b.layer_norm(x, normalized_shape=(3, 4)), b.relu(x)
    domains = [reduction_domain(n) for n in b.nodes]
    assert domains == [((2, 3, 4), (0, 2)), ((2, 3, 4), (0, 1, 2)), ((2, 3, 4), (1,)), ((2, 3, 4), (1, 2)), None]


@pytest.mark.parametrize("sample", samples_where(lambda op: bool(op.index_operands)), ids=lambda s: s.id)
def test_index_operands_are_integers_below_their_bound(sample: Sample) -> None:
    node = node_of(sample)
    for position, bound in get_op(sample.op).index_operands:
        indices = np.asarray(sample.args[position])
        assert indices.dtype.kind in "iu"
        assert indices.size == 0 or (indices.min() >= 0 and indices.max() < bound(node))


@pytest.mark.parametrize("sample", samples_where(lambda op: op.elementwise_like), ids=lambda s: s.id)
def test_elementwise_like_results_have_the_broadcast_shape(sample: Sample) -> None:
    node = node_of(sample)
    if sample.op == "broadcast_to":
        want = sample.attrs["shape"]
    else:
        want = np.broadcast_shapes(*(v.shape for v in node.inputs))
    assert all(v.shape == tuple(want) for v in node.outputs)


@pytest.mark.parametrize("sample", samples_where(lambda op: op.preserves_values), ids=lambda s: s.id)
def test_value_preserving_results_hold_operand_values(sample: Sample) -> None:
    (result,) = evaluate(sample.op, sample.args, sample.attrs)
    source = np.asarray(sample.args[0]).astype(result.dtype)
    assert np.isin(result, source).all()


def test_work_estimates_count_multiply_adds_and_written_elements() -> None:
    b = GraphBuilder("g")
    x, w = b.input("x", TensorType((4, 8), float32)), b.param("w", TensorType((16, 8), float32), id=1)
    y = b.linear(x, w)
    b.relu(y)
    linear, relu = get_op("linear"), get_op("relu")
    nodes = {n.op: n for n in b.nodes}
    assert linear.work_estimate(nodes["linear"]) == 4 * 16 * 8
    assert relu.work_estimate(nodes["relu"]) == 4 * 16
    assert get_op("param").work_estimate(nodes["param"]) == 0


def test_consumers_ask_the_registry_for_leaves() -> None:
    b = GraphBuilder("g")
    x = b.input("x", TensorType((3,), float32))
    w = b.param("w", TensorType((3,), float32), id=1)
    g = b.finish([b.add(x, b.mul(w, b.scalar(2.0, w)))])
    assert [n.op for n in g.ops()] == ["mul", "add"]
    assert [is_leaf(n) for n in g.nodes] == [True, True, False, False]
    assert ir.registry.is_leaf(g.nodes[0])
