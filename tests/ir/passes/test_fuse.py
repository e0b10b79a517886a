"""The fuse pass: which nodes form regions, what a region's operands and results are, and that fusing never
changes what a graph computes or creates a cycle (golden texts are in fuse_*.ir)."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from braze.ir import Graph, GraphBuilder, TensorType, float32, float64, interpret, parse, verify
from braze.ir.passes import PassContext, optimize
from braze.ir.passes.fuse import fuse, fuse_regions

from .harness import assert_equivalent, random_weights
from .random_dags import random_dags, random_inputs

F48 = TensorType((4, 8), float32)


def fused(graph: Graph) -> Graph:
    return fuse(graph, PassContext("fuse")).renumbered()


def regions(graph: Graph) -> list[tuple[str, list[str]]]:
    """(kind, body ops without constants) of every fused node, in graph order."""
    return [(n.attr["kind"], [m.op for m in n.attr["body"].nodes if m.op != "constant"])
            for n in graph.nodes if n.op == "fused"]


def plain_ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.ops() if n.op != "fused"]


def mlp_layer() -> Graph:
    b = GraphBuilder("mlp")
    x = b.input("x", F48)
    w = b.param("fc.weight", TensorType((16, 8), float32), id=0, trainable=False)
    bias = b.param("fc.bias", TensorType((16,), float32), id=1, trainable=False)
    out = b.relu(b.add(b.matmul(x, b.transpose(w, perm=(1, 0))), bias))
    g = b.finish([out])
    return g.replace(weights=random_weights(g))


def test_fuse_mlp_layer_is_one_gemm_region() -> None:
    assert regions(fused(mlp_layer())) == [("gemm", ["matmul", "add", "relu"])]


def test_fuse_keeps_leaves_outside_regions() -> None:
    out = fused(mlp_layer())
    body = next(n.attr["body"] for n in out.nodes if n.op == "fused")
    assert {n.op for n in body.nodes} == {"matmul", "add", "relu"}
    assert [p.path for p in out.params()] == ["fc.weight", "fc.bias"]


def test_fuse_keeps_the_weights_mapping() -> None:
    g = mlp_layer()
    assert fused(g).weights is g.weights


def test_fuse_leaves_its_input_unchanged() -> None:
    g = mlp_layer()
    text = str(g)
    fused(g)
    assert str(g) == text


def test_fused_graph_interprets_like_the_input() -> None:
    g = mlp_layer()
    assert_equivalent(g, fused(g), rtol=0)


def test_fused_graph_text_round_trips() -> None:
    out = fused(mlp_layer())
    assert parse(str(out)) == out


def _softmax_then_sum(b: GraphBuilder, x):
    shifted = b.exp(b.sub(x, b.max(x, axes=(1,), keepdim=True)))
    return b.div(shifted, b.sum(shifted, axes=(1,), keepdim=True))


def test_fuse_softmax_longhand_is_one_reduction_region() -> None:
    b = GraphBuilder("softmax")
    g = b.finish([_softmax_then_sum(b, b.input("x", F48))])
    assert regions(fused(g)) == [("reduction", ["max", "sub", "exp", "sum", "div"])]


def test_fuse_mean_after_elementwise_is_one_reduction_region() -> None:
    b = GraphBuilder("mse")
    x, y = b.input("x", F48), b.input("y", F48)
    d = b.sub(x, y)
    g = b.finish([b.mean(b.mul(d, d), axes=None, keepdim=False)])
    assert regions(fused(g)) == [("reduction", ["sub", "mul", "mean"])]


def test_fuse_residual_add_joins_the_layer_norm_op() -> None:
    b = GraphBuilder("ln")
    x, r = b.input("x", F48), b.input("r", F48)
    h = b.add(x, r)
    g = b.finish([b.layer_norm(h, normalized_shape=(8,)), h])
    out = fused(g)
    assert regions(out) == [("reduction", ["add", "layer_norm"])]
    assert len(next(n for n in out.nodes if n.op == "fused").outputs) == 2


def test_fuse_reductions_over_different_axes_stay_apart() -> None:
    b = GraphBuilder("axes")
    x = b.exp(b.input("x", F48))
    rows, cols = b.sum(x, axes=(1,), keepdim=True), b.sum(x, axes=(0,), keepdim=True)
    g = b.finish([b.add(rows, cols)])
    assert regions(fused(g)) == [("reduction", ["exp", "sum"]), ("reduction", ["sum", "add"])]


def test_fuse_elementwise_chain_with_broadcast_is_one_region() -> None:
    b = GraphBuilder("chain")
    x, v = b.input("x", F48), b.input("v", TensorType((8,), float32))
    g = b.finish([b.tanh(b.mul(b.broadcast_to(v, shape=(4, 8)), b.neg(x)))])
    assert regions(fused(g)) == [("elementwise", ["broadcast_to", "neg", "mul", "tanh"])]


def test_fuse_copies_scalar_constants_in_and_drops_them_outside() -> None:
    b = GraphBuilder("scale")
    x = b.input("x", F48)
    g = b.finish([b.exp(b.mul(x, b.scalar(0.5, x)))])
    out = fused(g)
    assert [n.op for n in out.nodes] == ["fused"]
    assert [n.op for n in out.nodes[0].attr["body"].nodes] == ["constant", "mul", "exp"]


def test_fuse_keeps_a_constant_still_read_outside() -> None:
    b = GraphBuilder("scale")
    x = b.input("x", F48)
    c = b.scalar(0.5, x)
    g = b.finish([b.exp(b.mul(x, c)), b.transpose(b.broadcast_to(c, shape=(2, 2)), perm=(1, 0))])
    assert [n.op for n in fused(g).nodes].count("constant") == 1


def test_fuse_non_scalar_constants_are_operands() -> None:
    b = GraphBuilder("consts")
    x = b.input("x", F48)
    g = b.finish([b.exp(b.add(x, b.constant(np.ones(8, np.float32))))])
    out = fused(g)
    assert [n.op for n in out.nodes] == ["constant", "fused"]
    assert [v.name for v in out.nodes[1].inputs] == ["x", "0"]


def test_fuse_gives_a_lone_op_the_scalar_constant_it_reads() -> None:
    """x ** 3 alone becomes a region holding 3.0, so that its kernel multiplies instead of calling powf; an op whose
    operands are all scalar constants, and a lone op reading no constant, stay plain."""
    b = GraphBuilder("cube")
    x = b.input("x", F48)
    three = b.constant(np.float32(3.0))
    g = b.finish([b.pow(x, three), b.add(three, three)])
    out = fused(g)
    assert [n.op for n in out.nodes] == ["constant", "fused", "add"]
    body = out.nodes[1].attr["body"]
    assert [n.op for n in body.nodes] == ["constant", "pow"] and [v.name for v in out.nodes[1].inputs] == ["x"]
    assert_equivalent(g, out, rtol=0)


def test_fuse_single_op_stays_plain() -> None:
    b = GraphBuilder("one")
    x = b.input("x", F48)
    g = b.finish([b.transpose(b.relu(x), perm=(1, 0))])
    assert str(fused(g)) == str(g)


def test_fuse_value_used_outside_becomes_a_region_result() -> None:
    b = GraphBuilder("two")
    x = b.input("x", F48)
    h = b.exp(x)
    g = b.finish([b.transpose(b.neg(h), perm=(1, 0)), b.transpose(h, perm=(1, 0))])
    node = next(n for n in fused(g).nodes if n.op == "fused")
    assert [v.type for v in node.outputs] == [F48, F48]


def test_fuse_epilogue_rejects_an_operand_that_depends_on_the_matmul() -> None:
    b = GraphBuilder("cycle")
    x, w = b.input("x", F48), b.input("w", TensorType((8, 8), float32))
    m = b.matmul(x, w)
    g = b.finish([b.add(m, b.copy(m))])  # joining would make the region both feed and read the copy
    out = fused(g)
    assert regions(out) == [] and plain_ops(out) == ["matmul", "copy", "add"]


def test_fuse_elementwise_producers_do_not_join_a_gemm_region() -> None:
    b = GraphBuilder("prologue")
    x, w = b.input("x", F48), b.input("w", TensorType((8, 8), float32))
    g = b.finish([b.relu(b.matmul(b.exp(x), w))])
    assert regions(fused(g)) == [("gemm", ["matmul", "relu"])]
    assert plain_ops(fused(g)) == ["exp"]


def test_fuse_two_matmuls_never_share_a_region() -> None:
    b = GraphBuilder("two_gemms")
    x, w = b.input("x", F48), b.input("w", TensorType((8, 8), float32))
    g = b.finish([b.add(b.matmul(x, w), b.matmul(b.neg(x), w))])
    assert [kind for kind, _ in regions(fused(g))] == ["gemm"]
    assert sorted(plain_ops(fused(g))) == ["matmul", "neg"]


def test_fuse_conv_epilogue_is_one_conv_region() -> None:
    b = GraphBuilder("conv")
    x = b.input("x", TensorType((1, 2, 5, 5), float32))
    w = b.param("w", TensorType((3, 2, 3, 3), float32), id=0, trainable=False)
    bias = b.param("b", TensorType((3, 1, 1), float32), id=1, trainable=False)
    y = b.conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    g = b.finish([b.relu(b.add(y, bias))])
    g = g.replace(weights=random_weights(g))
    out = fused(g)
    assert regions(out) == [("conv", ["conv2d", "add", "relu"])]
    assert_equivalent(g, out, rtol=0)


def test_fuse_report_counts_regions_by_kind() -> None:
    report: list = []
    optimize(mlp_layer(), ["fuse"], report=report)
    assert report[0]["fuse"].notes == ("1 region(s) (1 gemm) holding 3 node(s)",)


def test_fuse_regions_lists_member_indices() -> None:
    g = mlp_layer()
    _, found = fuse_regions(g)
    named = [(kind, [g.nodes[i].op for i in members]) for kind, members in found]
    assert named == [("gemm", ["matmul", "add", "relu"])]


def test_fuse_is_deterministic() -> None:
    g = mlp_layer()
    assert str(fused(g)) == str(fused(g))


# --- random graphs ------------------------------------------------------------------------------------------------

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_regions(out: Graph) -> None:
    """Every region verifies, holds no param or flag leaf, starts with its anchor when it has one, and holds more
    than one op or one elementwise op and the scalar constant it reads."""
    for node in out.nodes:
        if node.op != "fused":
            continue
        body = verify(node.attr["body"])
        ops = [n.op for n in body.nodes if n.op != "constant"]
        alone = node.attr["kind"] == "elementwise" and len(ops) == 1 and len(body.nodes) > 1
        assert (len(ops) > 1 or alone) and not {"param", "flag"} & set(ops)
        assert (ops[0] in ("matmul", "conv2d")) == (node.attr["kind"] in ("gemm", "conv"))


@PROPERTY
@given(random_dags())
def test_fuse_random_dags_give_verified_acyclic_graphs(g: Graph) -> None:
    out = fused(g)
    verify(out)  # SSA in topological order: a cycle between regions could not be emitted
    assert nx.is_directed_acyclic_graph(out.to_networkx())
    _check_regions(out)


@PROPERTY
@given(random_dags())
def test_fuse_random_dags_interpret_alike(g: Graph) -> None:
    out = fused(g)
    inputs = random_inputs(g)
    for want, got in zip(interpret(g, inputs), interpret(out, inputs), strict=True):
        np.testing.assert_array_equal(got, want)


@PROPERTY
@given(random_dags())
def test_fuse_random_dags_keep_every_computing_node(g: Graph) -> None:
    out = fused(g)
    inner = [n.op for f in out.nodes if f.op == "fused" for n in f.attr["body"].nodes if n.op != "constant"]
    assert sorted(inner + plain_ops(out)) == sorted(n.op for n in g.ops())


@pytest.mark.parametrize("dtype", [float32, float64], ids=["f32", "f64"])
def test_fuse_then_plan_memory_pipeline_runs(dtype) -> None:
    b = GraphBuilder("p")
    x = b.input("x", TensorType((4, 8), dtype))
    g = b.finish([_softmax_then_sum(b, b.tanh(x))])
    out = optimize(g, ["fuse", "plan_memory"])
    assert regions(out) == [("reduction", ["tanh", "max", "sub", "exp", "sum", "div"])]
    assert out.attributes["memory_plan"]["offsets"] == {}
