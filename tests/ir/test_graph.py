"""Graph, Node, Value and Loc; GraphBuilder and renumber; networkx and dot views; summary()."""
from __future__ import annotations

import re

import networkx as nx
import numpy as np
import pytest

from braze.ir import (BrazeError, FlagLeaf, Graph, GraphBuilder, Loc, Node, ParamLeaf, TensorType, Value, bool_,
                      float32, interpret, parse)

F3 = TensorType((3,), float32)


def _mlp() -> Graph:
    """x -> matmul(x, w^T) + b -> relu, twice, with a buffer, a flag and a constant."""
    b = GraphBuilder("mlp")
    x = b.input("x", TensorType((4, 8), float32))
    w = b.param("fc.weight", TensorType((16, 8), float32), id=3)
    mean = b.param("bn.mean", TensorType((16,), float32), id=4, trainable=False, buffer=True)
    training = b.flag("bn.training", id=5, value=True)
    h = b.add(b.matmul(x, b.transpose(w, perm=(1, 0))), mean)
    h = b.relu(h)
    out = b.where(training, b.relu(h), b.mul(h, b.scalar(0.5, h)))
    return b.finish([out, h])


# --- Value, Node, Loc ---------------------------------------------------------------------------------------------

def test_value_exposes_shape_and_dtype_and_prints_as_a_reference() -> None:
    v = Value("h", TensorType((2, 3), float32))
    assert (v.shape, v.dtype, str(v)) == ((2, 3), float32, "%h")


def test_node_out_of_a_multi_result_node_is_an_error() -> None:
    node = Node("split", (), (Value("a", F3), Value("b", F3)))
    with pytest.raises(ValueError, match="split has 2 results; use .outputs"):
        node.out


def test_node_equality_ignores_provenance() -> None:
    a = Node("neg", (Value("x", F3),), (Value("0", F3),), loc=Loc("m", "f.py", 1))
    assert a == a.replace(loc=Loc("other", "g.py", 2)) and hash(a) == hash(a.replace(loc=None))


def test_node_attr_is_a_dict_of_the_sorted_attributes() -> None:
    node = _mlp().nodes[3]
    assert node.op == "transpose" and node.attr == {"perm": (1, 0)} and node.attrs == (("perm", (1, 0)),)


@pytest.mark.parametrize("loc, text", [(Loc("enc.0", "m.py", 3), "enc.0 @ m.py:3"), (Loc("enc.0"), "enc.0"),
                                       (Loc(file="m.py", line=7), "m.py:7"), (Loc(), "")])
def test_loc_prints_module_and_source_line(loc: Loc, text: str) -> None:
    assert str(loc) == text


# --- Graph --------------------------------------------------------------------------------------------------------

def test_graph_equality_ignores_weights() -> None:
    g = _mlp()
    assert g == g.replace(weights={"fc.weight": np.zeros((16, 8), np.float32)})


def test_graph_attributes_are_sorted_frozen_and_hashable() -> None:
    g = _mlp().replace(attributes={"b": [1, [2, 3]], "a": {"z": 1, "y": [4]}})
    assert list(g.attributes.items()) == [("a", {"y": (4,), "z": 1}), ("b", (1, (2, 3)))]
    assert g.attributes == {"a": {"y": (4,), "z": 1}, "b": (1, (2, 3))}
    plain = _mlp().replace(attributes={"b": [1, [2, 3]]})
    assert hash(plain.attributes) == hash(_mlp().replace(attributes={"b": (1, (2, 3))}).attributes)


def test_graph_producers_and_users() -> None:
    g = _mlp()
    h = g.outputs[1]
    assert g.producer(h).op == "relu" and g.producer(g.inputs[0]) is None
    assert [n.op for n in g.users[h.name]] == ["relu", "mul"]


def test_graph_users_lists_a_node_once_when_it_reads_a_value_twice() -> None:
    b = GraphBuilder()
    x = b.input("x", F3)
    g = b.finish([b.mul(x, x)])
    assert len(g.users["x"]) == 1


def test_graph_params_lists_param_leaves_in_order() -> None:
    params = _mlp().params()
    assert all(isinstance(p, ParamLeaf) for p in params)
    assert [(p.path, p.id, p.type.shape, p.trainable, p.buffer) for p in params] == \
        [("fc.weight", 3, (16, 8), True, False), ("bn.mean", 4, (16,), False, True)]


def test_graph_flags_lists_flag_leaves() -> None:
    assert _mlp().flags() == [FlagLeaf("bn.training", 5, True, Value("bn.training", TensorType((), bool_)))]


def test_graph_ops_skips_leaves() -> None:
    assert [n.op for n in _mlp().ops()] == ["transpose", "matmul", "add", "relu", "relu", "mul", "where"]


# --- GraphBuilder -------------------------------------------------------------------------------------------------

def test_builder_returns_the_same_leaf_for_a_path_read_twice() -> None:
    b = GraphBuilder()
    assert b.param("w", F3, id=1) is b.param("w", F3, id=1)
    assert b.flag("t", id=2, value=True) is b.flag("t", id=2, value=True)


def test_builder_rejects_a_param_read_with_another_type() -> None:
    b = GraphBuilder()
    b.param("w", F3, id=1)
    with pytest.raises(BrazeError, match=r"param 'w' is read as f32\[4\] but its leaf is f32\[3\]"):
        b.param("w", TensorType((4,), float32), id=1)


def test_builder_rejects_a_name_defined_twice() -> None:
    b = GraphBuilder("g")
    b.input("x", F3)
    with pytest.raises(BrazeError, match=r"value name %x is already defined in graph @g"):
        b.input("x", F3)


def test_builder_fresh_names_skip_taken_names() -> None:
    b = GraphBuilder()
    x = b.input("0", F3)
    y = b.neg(x)
    assert y.name == "1" and b.exp(y).name == "2"


@pytest.mark.parametrize("path, name", [("0", "_0"), ("", "_"), ("x", "x_1")])
def test_builder_leaf_names_avoid_temporaries_and_taken_names(path: str, name: str) -> None:
    b = GraphBuilder()
    b.input("x", F3)
    b.neg(b.input("y", F3))
    leaf = b.param(path, F3, id=1)
    g = b.finish([leaf])
    assert leaf.name == name and g.params()[0].path == path and parse(str(g)) == g


def test_builder_add_node_with_names() -> None:
    b = GraphBuilder()
    (y,) = b.add_node("neg", [b.input("x", F3)], names=["neg_x"])
    assert y == Value("neg_x", F3)


def test_builder_add_node_rejects_the_wrong_number_of_names() -> None:
    b = GraphBuilder()
    with pytest.raises(BrazeError, match=r"neg: 2 result names given for 1 results"):
        b.add_node("neg", [b.input("x", F3)], names=["a", "b"])


def test_builder_rejects_operands_that_are_not_values() -> None:
    b = GraphBuilder()
    with pytest.raises(BrazeError, match=r"neg: operand .* is not a graph value"):
        b.add_node("neg", [np.ones(3)])


def test_builder_lifts_python_numbers_to_constants_of_the_operand_dtype() -> None:
    b = GraphBuilder()
    y = b.mul(b.input("x", F3), 2.0)
    g = b.finish([y])
    assert g.nodes[0].op == "constant" and g.nodes[0].out.type == TensorType((), float32)


def test_builder_gives_nodes_its_current_loc() -> None:
    b = GraphBuilder()
    x = b.input("x", F3)
    b.loc = Loc("enc", "m.py", 4)
    y = b.neg(x)
    (z,) = b.add_node("exp", [y], loc=Loc("head", "m.py", 9))
    g = b.finish([z])
    assert [n.loc for n in g.nodes] == [Loc("enc", "m.py", 4), Loc("head", "m.py", 9)]


def test_builder_append_copies_a_graph() -> None:
    g = _mlp()
    b = GraphBuilder(g.name)
    for v in g.inputs:
        b.input(v.name, v.type)
    for n in g.nodes:
        b.append(n)
    assert b.finish(list(g.outputs)) == g and b.param("fc.weight", g.params()[0].type, id=3) == g.params()[0].out


# --- renumber -----------------------------------------------------------------------------------------------------

def _scrambled() -> Graph:
    b = GraphBuilder("scrambled")
    x = b.input("x", F3)
    (a,) = b.add_node("neg", [x], names=["17"])
    (c,) = b.add_node("exp", [a], names=["named"])
    (d,) = b.add_node("add", [a, c], names=["3"])
    return b.finish([d, a])


def test_renumber_renames_temporaries_in_definition_order() -> None:
    g = _scrambled().renumbered()
    assert [v.name for n in g.nodes for v in n.outputs] == ["0", "named", "1"]
    assert [v.name for v in g.outputs] == ["1", "0"]


def test_renumber_is_idempotent() -> None:
    once = _scrambled().renumbered()
    assert once.renumbered() is once


def test_renumber_keeps_the_nodes_whose_names_do_not_change() -> None:
    b = GraphBuilder("partly")
    x = b.input("x", F3)
    (a,) = b.add_node("neg", [x], names=["0"])
    (c,) = b.add_node("exp", [x], names=["named"])
    (d,) = b.add_node("add", [a, c], names=["5"])
    g = b.finish([d])
    r = g.renumbered()
    assert [n is m for n, m in zip(r.nodes, g.nodes)] == [True, True, False]
    assert r.nodes[2].out.name == "1"


def test_renumber_keeps_weights_attributes_and_results() -> None:
    g = _scrambled().replace(attributes={"k": 1}, weights={"w": np.ones(1)})
    r = g.renumbered()
    assert r.attributes == g.attributes and r.weights is g.weights
    x = np.array([0.5, -1.0, 2.0], np.float32)
    for got, want in zip(interpret(r, [x]), interpret(g, [x])):
        np.testing.assert_array_equal(got, want)


# --- networkx and dot ---------------------------------------------------------------------------------------------

def test_to_networkx_has_a_vertex_per_node_and_input() -> None:
    g = _mlp()
    dg = g.to_networkx()
    assert dg.number_of_nodes() == len(g.nodes) + len(g.inputs)
    assert dg.nodes[3]["op"] == "transpose" and dg.nodes[("input", "x")]["op"] == "input"


def test_to_networkx_has_an_edge_per_distinct_producer_user_pair() -> None:
    g = _mlp()
    where = {v.name: ("input", v.name) for v in g.inputs}
    where |= {v.name: i for i, n in enumerate(g.nodes) for v in n.outputs}
    pairs = {(where[v.name], i) for i, n in enumerate(g.nodes) for v in n.inputs}
    dg = g.to_networkx()
    assert set(dg.edges) == pairs and dg.number_of_edges() == len(pairs)


def test_to_networkx_is_acyclic_and_graph_order_is_topological() -> None:
    dg = _mlp().to_networkx()
    assert nx.is_directed_acyclic_graph(dg)
    assert all(not isinstance(u, int) or u < w for u, w in dg.edges)
    order = [n for n in nx.topological_sort(dg) if isinstance(n, int)]
    assert sorted(order) == list(range(len(_mlp().nodes)))


_DOT_STRING = r'"(?:[^"\\]|\\.)*"'
_DOT_VERTEX = re.compile(rf"  (in|n|out)\d+ \[label={_DOT_STRING}(, [a-z]+=\w+)*\];")
_DOT_EDGE = re.compile(r"  (in|n)\d+ -> (n|out)\d+;")


def test_to_dot_is_well_formed() -> None:
    lines = _mlp().to_dot().rstrip("\n").split("\n")
    assert re.fullmatch(rf"digraph {_DOT_STRING} {{", lines[0]) and lines[-1] == "}"
    body = [line for line in lines[1:-1] if not line.startswith(("  rankdir", "  node ["))]
    assert all(_DOT_VERTEX.fullmatch(line) or _DOT_EDGE.fullmatch(line) for line in body)


def test_to_dot_has_one_line_per_node_and_edge() -> None:
    g = _mlp()
    lines = g.to_dot().split("\n")
    vertices = [line for line in lines if _DOT_VERTEX.fullmatch(line)]
    edges = [line for line in lines if _DOT_EDGE.fullmatch(line)]
    assert len(vertices) == len(g.inputs) + len(g.nodes) + len(g.outputs)
    assert len(edges) == sum(len(n.inputs) for n in g.nodes) + len(g.outputs)


def test_to_dot_escapes_odd_names() -> None:
    b = GraphBuilder('say "hi"\\')
    x = b.input('x"', F3)
    w = b.param('w\\"', F3, id=1)
    text = b.finish([b.add(x, w)]).to_dot()
    assert text.startswith('digraph "say \\"hi\\"\\\\" {') and all(
        _DOT_VERTEX.fullmatch(line) for line in text.split("\n") if "label=" in line)


# --- summary ------------------------------------------------------------------------------------------------------

def test_summary_counts_ops_and_parameters() -> None:
    lines = _mlp().summary().split("\n")
    assert lines[0] == "graph @mlp: 1 input(s), 2 output(s), 7 op node(s)"
    assert lines[1] == "parameters: 1 tensors, 128 values; buffers: 1; weight bytes: 576"
    assert lines[2] == "flags: bn.training=True"
    assert [line.split() for line in lines[3:]] == [["relu", "2"], ["add", "1"], ["matmul", "1"], ["mul", "1"],
                                                    ["transpose", "1"], ["where", "1"]]


def test_summary_of_a_graph_without_leaves() -> None:
    b = GraphBuilder("tiny")
    g = b.finish([b.neg(b.input("x", F3))])
    assert g.summary().split("\n")[1:3] == ["parameters: 0 tensors, 0 values; buffers: 0; weight bytes: 0",
                                            "flags: none"]
