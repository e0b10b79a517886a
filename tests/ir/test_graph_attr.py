"""Nested graphs as attribute values (kind "graph") and the `fused` op that holds one: text round trip, equality
and hashing by structure, verification of the body, and the errors a malformed region gives."""
from __future__ import annotations

import numpy as np
import pytest

from braze.ir import (AttributeSchemaError, DTypeError, Graph, GraphBuilder, Loc, Node, ParseError, ShapeError,
                      TensorType, Value, VerifyError, float32, float64, get_op, interpret, parse, verify)
from braze.ir.graph import sorted_attrs

F34 = TensorType((3, 4), float32)
F4 = TensorType((4,), float32)


def add_relu_body(name: str = "elementwise") -> Graph:
    b = GraphBuilder(name)
    x, y = b.input("in0", F34), b.input("in1", F4)
    return b.finish([b.relu(b.add(x, y))])


def two_output_body() -> Graph:
    b = GraphBuilder("elementwise")
    x = b.input("in0", F34)
    h = b.mul(x, b.scalar(0.5, x))
    return b.finish([h, b.tanh(h)])


def outer(body: Graph, kind: str = "elementwise", *, loc: Loc | None = None) -> Graph:
    b = GraphBuilder("main")
    x, y = b.input("x", F34), b.input("y", F4)
    operands = [x, y][:len(body.inputs)]
    outs = b.add_node("fused", operands, {"kind": kind, "body": body, "shape": (3, 4)}, loc=loc)
    return b.finish([b.exp(outs[0]), *outs[1:]])


NESTED_TEXT = """\
graph @main(%x: f32[3,4], %y: f32[4]) -> (f32[3,4]) {
  %0 = fused %x, %y {axes=[], body=graph @elementwise(%in0: f32[3,4], %in1: f32[4]) -> (f32[3,4]) {
    %0 = add %in0, %in1 : f32[3,4]
    %1 = relu %0 : f32[3,4]
    return %1
  }, kind="elementwise", shape=[3, 4]} : f32[3,4]
  %1 = exp %0 : f32[3,4]
  return %1
}
"""


def test_nested_graph_prints_indented_inside_the_attribute_dict() -> None:
    assert str(outer(add_relu_body())) == NESTED_TEXT


def test_nested_graph_text_round_trips() -> None:
    assert str(parse(NESTED_TEXT)) == NESTED_TEXT


def test_nested_graph_parses_to_an_equal_graph() -> None:
    g = outer(add_relu_body())
    assert parse(str(g)) == g


def test_multi_output_region_round_trips() -> None:
    g = outer(two_output_body())
    assert [len(n.outputs) for n in g.nodes if n.op == "fused"] == [2]
    assert parse(str(g)) == g and str(parse(str(g))) == str(g)


def test_region_inside_a_region_round_trips() -> None:
    inner = add_relu_body()
    b = GraphBuilder("elementwise")
    x, y = b.input("in0", F34), b.input("in1", F4)
    (r,) = b.add_node("fused", [x, y], {"kind": "elementwise", "body": inner, "shape": (3, 4)})
    g = outer(b.finish([b.neg(r)]))
    assert "\n      %0 = add %in0, %in1 : f32[3,4]\n" in str(g)
    assert parse(str(g)) == g and str(parse(str(g))) == str(g)


def test_body_provenance_round_trips_in_dumps() -> None:
    b = GraphBuilder("elementwise")
    b.loc = Loc("block.0.act", "model.py", 12)
    x, y = b.input("in0", F34), b.input("in1", F4)
    g = outer(b.finish([b.relu(b.add(x, y))]), loc=Loc("block.0", "model.py", 10))
    text = g.dump(provenance=True)
    assert 'loc("block.0.act" "model.py":12)' in text and 'loc("block.0" "model.py":10)' in text
    assert parse(text).dump(provenance=True) == text


def test_nested_graph_values_have_their_own_namespace() -> None:
    text = NESTED_TEXT.replace("%in0", "%x").replace("%in1", "%y")
    assert parse(text).nodes[0].attr["body"].inputs[0].name == "x"


def test_separately_built_bodies_are_equal_and_hash_alike() -> None:
    a, b = add_relu_body(), add_relu_body()
    assert a is not b and a == b and hash(a) == hash(b)
    assert outer(a).nodes[0] == outer(b).nodes[0] and hash(outer(a).nodes[0]) == hash(outer(b).nodes[0])


def test_bodies_that_differ_are_unequal() -> None:
    assert add_relu_body() != add_relu_body("other")
    assert outer(add_relu_body()).nodes[0] != outer(add_relu_body("other")).nodes[0]


def test_fused_interprets_its_body() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    (got,) = interpret(outer(add_relu_body()), [x, y])
    np.testing.assert_array_equal(got, np.exp(np.maximum(x + y, np.float32(0))))


def test_fused_has_one_result_per_body_output() -> None:
    g = outer(two_output_body())
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    got_exp, got_tanh = interpret(g, [x, np.zeros(4, np.float32)])
    np.testing.assert_array_equal(got_tanh, np.tanh(x * np.float32(0.5)))
    np.testing.assert_array_equal(got_exp, np.exp(x * np.float32(0.5)))


# --- errors -------------------------------------------------------------------------------------------------------

def _fused_types(body: Graph, *types: TensorType, kind: str = "elementwise") -> tuple[TensorType, ...]:
    op = get_op("fused")
    return op.infer_types(list(types), op.check_attrs({"kind": kind, "body": body, "shape": (3, 4)}))


def test_fused_rejects_an_operand_count_unlike_the_body() -> None:
    with pytest.raises(ShapeError, match=r"fused: 1 operand\(s\) for a body taking 2 input\(s\)"):
        _fused_types(add_relu_body(), F34)


def test_fused_rejects_an_operand_shape_unlike_the_body() -> None:
    with pytest.raises(ShapeError, match=r"fused: operand 1 is f32\[3\], the body's input %in1 is f32\[4\]"):
        _fused_types(add_relu_body(), F34, TensorType((3,), float32))


def test_fused_rejects_an_operand_dtype_unlike_the_body() -> None:
    with pytest.raises(DTypeError, match=r"fused: operand 1 is f64\[4\], the body's input %in1 is f32\[4\]"):
        _fused_types(add_relu_body(), F34, TensorType((4,), float64))


def test_fused_rejects_param_leaves_in_the_body() -> None:
    b = GraphBuilder("elementwise")
    x = b.input("in0", F34)
    body = b.finish([b.add(x, b.param("w", F4, id=1))])
    with pytest.raises(ShapeError, match="holds param leaves; params and flags stay outside"):
        _fused_types(body, F34)


def test_fused_gemm_body_must_start_with_a_gemm_anchor() -> None:
    with pytest.raises(ShapeError, match="a gemm region's body starts with an op anchoring gemm kernels, but "
                                         "@elementwise starts with add"):
        _fused_types(add_relu_body(), F34, F4, kind="gemm")


def test_fused_attention_body_holds_one_attention_and_view_ops() -> None:
    with pytest.raises(ShapeError, match="an attention region's body holds one attention op and view ops .*, but "
                                         "@elementwise holds add, relu"):
        _fused_types(add_relu_body(), F34, F4, kind="attention")
    b = GraphBuilder("attention")
    q = b.input("in0", TensorType((2, 3, 4), float32))
    heads = b.add_node("attention", [q, q, q], {"scale": 0.5})[0]
    body = b.finish([b.add_node("transpose", [heads], {"perm": (1, 0, 2)})[0]])
    op = get_op("fused")
    types = op.infer_types([TensorType((2, 3, 4), float32)],
                           op.check_attrs({"kind": "attention", "body": body, "shape": (2, 3, 4)}))
    assert types == (TensorType((3, 2, 4), float32),)
    with pytest.raises(ShapeError, match=r"states domain \[3, 2, 4\] over axes \[\], but %0 has shape \[2, 3, 4\]"):
        op.infer_types([TensorType((2, 3, 4), float32)],
                       op.check_attrs({"kind": "attention", "body": body, "shape": (3, 2, 4)}))


def test_fused_elementwise_domain_is_the_results_shape() -> None:
    op = get_op("fused")
    with pytest.raises(ShapeError, match=r"states domain \[4\] over axes \[\], but %1 has shape \[3, 4\]"):
        op.infer_types([F34, F4], op.check_attrs({"kind": "elementwise", "body": add_relu_body(), "shape": (4,)}))


def test_fused_reduction_domain_is_its_reductions_domain() -> None:
    b = GraphBuilder("reduction")
    x = b.input("in0", F34)
    body = b.finish([b.sub(x, b.max(x, axes=(1,), keepdim=True))])
    op = get_op("fused")
    assert op.infer_types([F34], op.check_attrs({"kind": "reduction", "body": body, "shape": (3, 4), "axes": (1,)}))
    with pytest.raises(ShapeError, match=r"over axes \[0\], but its reductions have domain\(s\) \[3, 4\] over \[1\]"):
        op.infer_types([F34], op.check_attrs({"kind": "reduction", "body": body, "shape": (3, 4), "axes": (0,)}))


def test_fused_kind_is_checked() -> None:
    with pytest.raises(AttributeSchemaError, match="attribute 'kind' must be one of"):
        get_op("fused").check_attrs({"kind": "loop", "body": add_relu_body()})


def test_graph_attribute_rejects_other_values() -> None:
    with pytest.raises(AttributeSchemaError, match="attribute 'body' expects graph, got 'x'"):
        get_op("fused").check_attrs({"kind": "elementwise", "body": "x"})


def test_graph_attribute_rejects_unhashable_graph_attributes() -> None:
    body = add_relu_body().replace(attributes={"plan": {"a": 1}})
    with pytest.raises(AttributeSchemaError, match="expects graph.*unhashable"):
        get_op("fused").check_attrs({"kind": "elementwise", "body": body})


def test_verifier_checks_the_body() -> None:
    body = add_relu_body()
    bad = Value("0", TensorType((3, 4), float64))  # the add node declares the wrong type
    broken = body.replace(nodes=(body.nodes[0].replace(outputs=(bad,)),) + body.nodes[1:])
    x, y = Value("x", F34), Value("y", F4)
    attrs = sorted_attrs({"kind": "elementwise", "body": broken, "shape": (3, 4), "axes": ()})
    node = Node("fused", (x, y), (Value("0", F34),), attrs)
    with pytest.raises(VerifyError, match=r"attribute 'body' holds an invalid graph: graph @elementwise, node 0 "
                                          r"\(add\): declared type\(s\) f64\[3,4\]"):
        verify(Graph("main", (x, y), (node,), node.outputs))


def test_parse_error_inside_a_body_points_at_its_line() -> None:
    text = NESTED_TEXT.replace("%1 = relu %0", "%1 = relu %9")
    with pytest.raises(ParseError) as info:
        parse(text)
    assert "use of undefined value %9" in str(info.value) and info.value.line == 4


def test_body_values_are_not_visible_outside() -> None:
    text = NESTED_TEXT.replace("%1 = exp %0 :", "%1 = exp %in0 :")
    with pytest.raises(ParseError, match="use of undefined value %in0"):
        parse(text)


def test_outer_values_are_not_visible_in_a_body() -> None:
    with pytest.raises(ParseError, match="use of undefined value %x"):
        parse(NESTED_TEXT.replace("%0 = add %in0, %in1", "%0 = add %x, %in1"))


def test_body_whose_types_disagree_with_the_operands_is_a_parse_error() -> None:
    text = NESTED_TEXT.replace("%y: f32[4]) -> (f32[3,4]) {\n  %0", "%y: f32[1]) -> (f32[3,4]) {\n  %0")
    with pytest.raises(ParseError, match=r"operand 1 is f32\[1\], the body's input %in1 is f32\[4\]"):
        parse(text)


def test_verifier_checks_operands_against_the_body_inputs() -> None:
    x, y = Value("x", F34), Value("y", TensorType((3,), float32))
    attrs = sorted_attrs({"kind": "elementwise", "body": add_relu_body(), "shape": (3, 4), "axes": ()})
    node = Node("fused", (x, y), (Value("0", F34),), attrs)
    with pytest.raises(VerifyError, match=r"node 0 \(fused\): fused: operand 1 is f32\[3\], the body's input %in1"):
        verify(Graph("main", (x, y), (node,), node.outputs))
