"""The verifier rejects malformed graphs built directly (not through GraphBuilder), naming the bad node."""
from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pytest

from braze.ir import GraphBuilder, Graph, Node, TensorType, Value, VerifyError, bool_, float32, float64, verify
from braze.ir.verify import VerifiedNodes

F3 = TensorType((3,), float32)
X = Value("x", F3)


def node(op: str, inputs: tuple[Value, ...], outputs: tuple[Value, ...], **attrs: Any) -> Node:
    return Node(op, inputs, outputs, tuple(sorted(attrs.items())))


def param(name: str, path: str, type: TensorType = F3, id: int = 1) -> Node:
    return node("param", (), (Value(name, type),), buffer=False, id=id, path=path, trainable=True)


def flag(name: str, path: str, type: TensorType = TensorType((), bool_)) -> Node:
    return node("flag", (), (Value(name, type),), id=9, path=path, value=True)


def graph(*nodes: Node, outputs: tuple[Value, ...] | None = None, inputs: tuple[Value, ...] = (X,),
          weights: dict[str, np.ndarray] | None = None) -> Graph:
    outs = outputs if outputs is not None else nodes[-1].outputs[:1]
    return Graph("g", inputs, tuple(nodes), outs, (), weights or {})


def v(name: str, type: TensorType = F3) -> Value:
    return Value(name, type)


# (id, bad graph, expected node index or None, op, message pattern)
BAD: list[tuple[str, Callable[[], Graph], int | None, str, str]] = [
    ("use-before-definition",
     lambda: graph(node("neg", (v("1"),), (v("0"),)), node("exp", (X,), (v("1"),))),
     0, "neg", r"operand %1 is not defined before this node"),
    ("undefined-operand",
     lambda: graph(node("neg", (v("ghost"),), (v("0"),))), 0, "neg", r"operand %ghost is not defined"),
    ("result-shadows-input",
     lambda: graph(node("neg", (X,), (v("x"),))), 0, "neg", r"value %x is defined twice"),
    ("result-defined-twice",
     lambda: graph(node("neg", (X,), (v("0"),)), node("exp", (X,), (v("0"),))), 1, "exp",
     r"value %0 is defined twice"),
    ("input-declared-twice",
     lambda: graph(node("neg", (X,), (v("0"),)), inputs=(X, X)), None, "", r"input %x is declared twice"),
    ("type-disagrees-with-inference",
     lambda: graph(node("neg", (X,), (v("0", TensorType((4,), float32)),))), 0, "neg",
     r"declared type\(s\) f32\[4\] but neg infers f32\[3\]"),
    ("dtype-disagrees-with-inference",
     lambda: graph(node("neg", (X,), (v("0", TensorType((3,), float64)),))), 0, "neg",
     r"declared type\(s\) f64\[3\] but neg infers f32\[3\]"),
    ("operand-type-differs-from-definition",
     lambda: graph(node("neg", (v("x", TensorType((3,), float64)),), (v("0"),))), 0, "neg",
     r"operand %x is used as f64\[3\] but defined as f32\[3\]"),
    ("too-many-results",
     lambda: graph(node("neg", (X,), (v("0"), v("1")))), 0, "neg", r"declared type\(s\) f32\[3\], f32\[3\] but"),
    ("wrong-operand-count",
     lambda: graph(node("add", (X,), (v("0"),))), 0, "add", r"add: expects 2 operand\(s\)"),
    ("unknown-op",
     lambda: graph(node("frobnicate", (X,), (v("0"),))), 0, "frobnicate", r"unknown op 'frobnicate'"),
    ("unknown-attribute",
     lambda: graph(node("neg", (X,), (v("0"),), alpha=1.0)), 0, "neg", r"neg: unknown attribute\(s\) \['alpha'\]"),
    ("wrong-attribute-kind",
     lambda: graph(node("clamp", (X,), (v("0"),), max=None, min="low")), 0, "clamp",
     r"clamp: attribute 'min' expects float"),
    ("attribute-list-not-tuple",
     lambda: graph(node("transpose", (v("m", TensorType((2, 3), float32)),), (v("0", TensorType((3, 2), float32)),),
                        perm=[1, 0]), inputs=(v("m", TensorType((2, 3), float32)),)),
     0, "transpose", r"not in normalized form"),
    ("attribute-int-for-float",
     lambda: graph(node("clamp", (X,), (v("0"),), max=None, min=0)), 0, "clamp", r"not in normalized form"),
    ("attribute-numpy-int",
     lambda: graph(node("sum", (X,), (v("0", TensorType((), float32)),), axes=(np.int64(0),), keepdim=False)),
     0, "sum", r"not in normalized form"),
    ("attribute-dtype-as-string",
     lambda: graph(node("cast", (X,), (v("0", TensorType((3,), float64)),), dtype="float64")), 0, "cast",
     r"not in normalized form"),
    ("attribute-default-missing",
     lambda: graph(node("sum", (X,), (v("0", TensorType((), float32)),), axes=None)), 0, "sum",
     r"not in normalized form"),
    ("attributes-unsorted",
     lambda: graph(Node("clamp", (X,), (v("0"),), (("min", 0.0), ("max", None)))), 0, "clamp",
     r"not in normalized form"),
    ("flag-not-bool",
     lambda: graph(flag("t", "training", TensorType((), float32))), 0, "flag",
     r"a flag has type bool\[\], not f32\[\]"),
    ("flag-not-scalar",
     lambda: graph(flag("t", "training", TensorType((2,), bool_))), 0, "flag",
     r"a flag has type bool\[\], not bool\[2\]"),
    ("flag-path-twice",
     lambda: graph(flag("t", "training"), flag("u", "training")), 1, "flag", r"flag path 'training' appears twice"),
    ("param-path-twice",
     lambda: graph(param("w", "fc.w"), param("w2", "fc.w", id=2)), 1, "param", r"param path 'fc.w' appears twice"),
    ("param-with-operands",
     lambda: graph(Node("param", (X,), (v("w"),), param("w", "w").attrs)), 0, "param",
     r"a param leaf takes no operands and has one result"),
    ("param-missing-path",
     lambda: graph(node("param", (), (v("w"),), id=1)), 0, "param", r"missing required attribute 'path'"),
    ("output-not-defined",
     lambda: graph(node("neg", (X,), (v("0"),)), outputs=(v("ghost"),)), None, "",
     r"output %ghost: f32\[3\] is not a value of the graph"),
    ("output-type-differs",
     lambda: graph(node("neg", (X,), (v("0"),)), outputs=(v("0", TensorType((3,), float64)),)), None, "",
     r"output %0: f64\[3\] is not a value of the graph"),
    ("weight-wrong-shape",
     lambda: graph(param("w", "w"), weights={"w": np.zeros(4, np.float32)}), 0, "param",
     r"weight 'w' is float32\[4\], the param leaf declares f32\[3\]"),
    ("weight-wrong-dtype",
     lambda: graph(param("w", "w"), weights={"w": np.zeros(3, np.float64)}), 0, "param",
     r"weight 'w' is float64\[3\], the param leaf declares f32\[3\]"),
    ("weight-missing",
     lambda: graph(param("w", "w"), param("b", "b", id=2), weights={"w": np.zeros(3, np.float32)}), 1, "param",
     r"param 'b' has no value in the graph's weights"),
]
IDS = [case[0] for case in BAD]


@pytest.mark.parametrize("case", BAD, ids=IDS)
def test_verify_rejects_with_a_message_naming_the_problem(case: tuple) -> None:
    _, make, _, _, pattern = case
    with pytest.raises(VerifyError, match=pattern):
        verify(make())


@pytest.mark.parametrize("case", BAD, ids=IDS)
def test_verify_error_names_the_node_index_and_op(case: tuple) -> None:
    _, make, index, op, _ = case
    with pytest.raises(VerifyError) as info:
        verify(make())
    head = str(info.value).split("\n")[0]
    if index is None:
        assert head.startswith("graph @g: ") and info.value.node_index is None
    else:
        assert head.startswith(f"graph @g, node {index} ({op}): ") and info.value.node_index == index


@pytest.mark.parametrize("case", [c for c in BAD if c[2] is not None], ids=[c[0] for c in BAD if c[2] is not None])
def test_verify_error_marks_the_bad_line_in_context(case: tuple) -> None:
    _, make, index, op, _ = case
    with pytest.raises(VerifyError) as info:
        verify(make())
    marked = [line for line in str(info.value).split("\n")[1:] if line.startswith("> ")]
    assert len(marked) == 1 and re.search(rf"\b{op}\b", marked[0])


def test_verify_returns_a_good_graph_unchanged() -> None:
    b = GraphBuilder("ok")
    x = b.input("x", F3)
    w = b.param("w", F3, id=1)
    g = b.finish([b.add(x, w)], weights={"w": np.ones(3, np.float32)}, verify=False)
    assert verify(g) is g


def test_verify_skips_weights_when_the_graph_carries_none() -> None:
    assert verify(graph(param("w", "w"))).weights == {}


def test_verify_accepts_nan_attributes_from_the_builder() -> None:
    b = GraphBuilder("nan")
    x = b.input("x", F3)
    g = b.finish([b.clamp(x, min=float("nan"))], verify=False)
    assert verify(g) is g


def test_builder_finish_verifies() -> None:
    b = GraphBuilder("bad")
    b.input("x", F3)
    with pytest.raises(VerifyError, match="output %ghost"):
        b.finish([v("ghost")])


@pytest.mark.parametrize("case", BAD, ids=IDS)
def test_verify_with_passed_nodes_rejects_what_verify_rejects(case: tuple) -> None:
    _, make, _, _, pattern = case
    with pytest.raises(VerifyError, match=pattern):
        verify(make(), VerifiedNodes())


def test_verify_with_passed_nodes_still_checks_where_a_passed_node_sits() -> None:
    neg = node("neg", (X,), (v("0"),))
    passed = VerifiedNodes()
    verify(graph(neg), passed)
    assert neg in passed
    moved = Node("neg", (v("ghost"),), neg.outputs, neg.attrs)
    with pytest.raises(VerifyError, match=r"operand %ghost is not defined before this node"):
        verify(graph(moved), passed)


def test_verify_with_passed_nodes_checks_a_node_of_other_types_again() -> None:
    neg = node("neg", (X,), (v("0"),))
    passed = VerifiedNodes()
    verify(graph(neg), passed)
    retyped = Node("neg", neg.inputs, (v("0", TensorType((3,), float64)),), neg.attrs)
    assert retyped not in passed
    with pytest.raises(VerifyError, match=r"declared type\(s\) f64\[3\] but neg infers f32\[3\]"):
        verify(graph(retyped, outputs=retyped.outputs), passed)
