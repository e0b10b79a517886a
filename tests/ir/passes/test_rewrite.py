"""The pattern-rewrite helper: fixed point, provenance, replacement checks, declined rules, what it prunes."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from braze import ir
from braze.ir import BrazeError, GraphBuilder, Loc, TensorType, float32
from braze.ir.passes import Match, apply_rules, rule
from braze.ir.passes.simplify import ALGEBRA_RULES

F4 = TensorType((4,), float32)


def chain(depth: int) -> ir.Graph:
    b = GraphBuilder("f")
    v = b.input("x", F4)
    for _ in range(depth):
        v = b.neg(v)
    return b.finish([b.exp(v)])


def test_rewrite_reaches_a_fixed_point() -> None:
    fired: Counter[str] = Counter()
    out = apply_rules(chain(5), ALGEBRA_RULES, fired=fired)
    assert [n.op for n in out.nodes] == ["neg", "exp"]
    assert fired == {"double_negation": 2}


def test_rewrite_new_nodes_carry_the_replaced_node_loc() -> None:
    b = GraphBuilder("f")
    x = b.input("x", TensorType((2, 3, 4), float32))
    b.loc = Loc("block.attn", "model.py", 12)
    inner = b.transpose(x, perm=(1, 0, 2))
    b.loc = Loc("block.proj", "model.py", 20)
    out = b.transpose(inner, perm=(0, 2, 1))
    g = apply_rules(b.finish([out]), ALGEBRA_RULES)
    (node,) = g.nodes
    assert node.attr["perm"] == (1, 2, 0) and node.loc == Loc("block.proj", "model.py", 20)


def test_rewrite_leaves_the_input_graph_alone() -> None:
    g = chain(2)
    text = str(g)
    apply_rules(g, ALGEBRA_RULES)
    assert str(g) == text


def test_rewrite_replacement_of_another_type_is_an_error() -> None:
    @rule("exp")
    def wrong(m: Match) -> ir.Value:
        return m.e.sum(m.node.inputs[0], axes=(0,), keepdim=False)

    with pytest.raises(BrazeError, match=r"rewrite rule wrong replaced %\d+ : f32\[4\] \(exp\) by %\d+ : f32\[\]"):
        apply_rules(chain(0), [wrong])


def test_rewrite_wrong_number_of_replacements_is_an_error() -> None:
    @rule("exp")
    def two(m: Match) -> tuple[ir.Value, ...]:
        return m.node.inputs[0], m.node.inputs[0]

    with pytest.raises(BrazeError, match=r"rewrite rule two gave 2 value\(s\) for the 1 result\(s\) of exp"):
        apply_rules(chain(0), [two])


def test_rewrite_that_never_settles_is_an_error() -> None:
    @rule("exp")
    def grow(m: Match) -> ir.Value:
        return m.e.exp(m.e.neg(m.e.neg(m.node.inputs[0])))

    with pytest.raises(BrazeError, match=r"did not reach a fixed point after 4 sweeps; rules still firing: grow"):
        apply_rules(chain(0), [grow], max_sweeps=4)


def test_rewrite_declining_rule_leaves_nothing_behind() -> None:
    @rule("exp")
    def undecided(m: Match) -> None:
        m.e.neg(m.node.inputs[0])
        return None

    g = chain(1)
    assert str(apply_rules(g, [undecided])) == str(g)


def test_rewrite_keeps_nodes_already_unused_but_drops_what_it_orphans() -> None:
    g = ir.parse("""graph @f(%x: f32[4]) -> (f32[4]) {
  %0 = tanh %x : f32[4]
  %1 = neg %x : f32[4]
  %2 = neg %1 : f32[4]
  return %2
}
""")
    out = apply_rules(g, ALGEBRA_RULES)
    assert [n.op for n in out.nodes] == ["tanh"] and out.outputs == g.inputs


def test_rewrite_rules_may_add_param_leaves_with_weights() -> None:
    @rule("tanh")
    def shift(m: Match) -> ir.Value:
        return m.e.add(m.node.inputs[0], m.e.param("bias", np.full(4, 2.0, np.float32), id=7))

    b = GraphBuilder("f")
    out = apply_rules(b.finish([b.tanh(b.input("x", F4))]), [shift])
    assert [p.path for p in out.params()] == ["bias"] and out.params()[0].id == 7
    np.testing.assert_array_equal(ir.interpret(out, [np.ones(4, np.float32)])[0], np.full(4, 3.0, np.float32))
