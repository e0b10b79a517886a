"""runtime/node_profile.py: every computing node of a planned graph timed alone, its single-node graph computing
what the node computes."""
from __future__ import annotations

import numpy as np

from braze.ir.builder import GraphBuilder
from braze.ir.interpret import interpret
from braze.ir.types import TensorType, float32
from braze.runtime.compile_path import planned_graph
from braze.runtime.node_profile import node_graph, profile_nodes


def _graph():
    """exp(x) * 2 then a matmul with y: a constant operand and a node reading another node's result."""
    b = GraphBuilder("f")
    x, y = b.input("x", TensorType((3, 4), float32)), b.input("y", TensorType((4, 2), float32))
    scaled = b.mul(b.exp(x), b.constant(np.float32(2.0)))
    return b.finish([b.matmul(scaled, y)])


def test_profile_nodes_times_every_computing_node_once() -> None:
    graph = planned_graph(_graph(), pipeline=["plan_memory"])
    rows = profile_nodes(graph, threads=1, runs=2)
    assert sorted(r.index for r in rows) == [k for k, n in enumerate(graph.nodes) if n.op != "constant"]
    assert sorted(r.op for r in rows) == ["exp", "matmul", "mul"]
    assert all(r.seconds > 0 for r in rows)
    assert [r.seconds for r in rows] == sorted((r.seconds for r in rows), reverse=True)


def test_node_graph_computes_what_the_node_computes() -> None:
    graph = _graph()
    mul = next(n for n in graph.nodes if n.op == "mul")
    alone = node_graph(graph, mul)
    assert [v.name for v in alone.inputs] == [mul.inputs[0].name]  # the constant stays a constant
    e = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(interpret(alone, [e])[0], e * np.float32(2.0))


def test_node_graph_keeps_a_param_with_its_weight() -> None:
    """A GEMM node's weight stays a bound param in its own graph, so the profile times the kernel the model runs
    (weight prepared once), not one that packs a weight given as an input on every call."""
    b = GraphBuilder("f")
    x = b.input("x", TensorType((3, 4), float32))
    w = b.param("w", TensorType((4, 2), float32), id=0)
    weight = np.arange(8, dtype=np.float32).reshape(4, 2)
    graph = b.finish([b.matmul(x, w)], weights={"w": weight})
    alone = node_graph(graph, next(n for n in graph.nodes if n.op == "matmul"))
    assert [v.name for v in alone.inputs] == ["x"]
    assert [n.op for n in alone.nodes] == ["param", "matmul"]
    e = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(interpret(alone, [e])[0], e @ weight, rtol=1e-6)
    rows = profile_nodes(planned_graph(graph, pipeline=["plan_memory"]), threads=1, runs=1)
    assert [r.op for r in rows] == ["matmul"]
