"""specialize_flags' checks of its option and the graph's guards; drop_buffer_updates on training graphs and bad
roles; constant_fold's evaluation and param folding."""
from __future__ import annotations

import numpy as np
import pytest

from braze import ir
from braze.ir import BrazeError
from braze.ir.passes import optimize
from braze.ir.passes.constant_fold import FOLD_SMALL_ELEMENTS

from .harness import assert_equivalent, random_weights

GUARDED = """graph @g(%x: f32[4]) -> (f32[4]) attributes {guards={"block.training"=true}} {
  %block.training = flag {id=0, path="block.training", value=true} : bool[]
  %0 = constant {value=array<i64[]>[3]} : i64[]
  %1 = dropout %x, %block.training, %0 {p=0.5} : f32[4]
  return %1
}
"""


def test_specialize_flags_unknown_path_lists_the_graph_flags() -> None:
    with pytest.raises(BrazeError, match=r"has no flag 'block.trainin'; its flags: block.training"):
        optimize(ir.parse(GUARDED), ["specialize_flags"], flags={"block.trainin": False})


def test_specialize_flags_value_must_be_a_bool() -> None:
    with pytest.raises(BrazeError, match=r"flag 'block.training' must be given a bool, got 0"):
        optimize(ir.parse(GUARDED), ["specialize_flags"], flags={"block.training": 0})


def test_specialize_flags_refuses_to_contradict_a_guard() -> None:
    with pytest.raises(BrazeError, match=r"read in Python while tracing with value True .* cannot be specialized"):
        optimize(ir.parse(GUARDED), ["specialize_flags"], flags=False)


def test_specialize_flags_keeps_guards_and_recorded_values() -> None:
    out = optimize(ir.parse(GUARDED), ["specialize_flags"])
    assert out.attributes["guards"] == {"block.training": True}
    assert not out.flags() and [n.op for n in out.ops()] == ["dropout"]


def test_specialize_flags_report_lists_the_values() -> None:
    reports: list = []
    optimize(ir.parse(GUARDED), ["specialize_flags"], report=reports)
    assert reports[0]["specialize_flags"].notes == ("block.training=True",)


UPDATING = """graph @g(%x: f32[4]) -> (f32[4], f32[4]) attributes {outputs=["output", "buffer_update:acc"]} {
  %acc = param {buffer=true, id=0, path="acc", trainable=false} : f32[4]
  %0 = exp %x : f32[4]
  %1 = add %acc, %x : f32[4]
  return %0, %1
}
"""


def test_drop_buffer_updates_drops_updates_that_change_the_buffer() -> None:
    reports: list = []
    out = optimize(ir.parse(UPDATING), ["drop_buffer_updates"], report=reports)
    assert list(out.attributes["outputs"]) == ["output"] and [n.op for n in out.nodes] == ["exp"]
    assert reports[0]["drop_buffer_updates"].notes == ("dropped 1 buffer update(s): acc",)


def test_drop_buffer_updates_refuses_roles_that_do_not_match_the_outputs() -> None:
    graph = ir.parse(UPDATING)
    bad = graph.replace(attributes={**graph.attributes, "outputs": ["output"]})
    with pytest.raises(ir.VerifyError, match=r"meta 'outputs' must hold one role string per output \(2\)"):
        optimize(bad, ["drop_buffer_updates"])


def test_constant_fold_leaves_a_node_whose_reference_raises() -> None:
    g = ir.parse("""graph @g() -> (f32[1,2]) {
  %0 = constant {value=array<f32[1,2]>[1.0, 2.0]} : f32[1,2]
  %1 = constant {value=array<f32[2]>[0.0, 0.0]} : f32[2]
  %2 = constant {value=array<f32[2]>[1.0, 1.0]} : f32[2]
  %3 = constant {value=array<bool[]>[true]} : bool[]
  %4, %5, %6 = batch_norm_flag %0, %1, %2, %2, %1, %3 {eps=1e-05} : f32[1,2], f32[2], f32[2]
  return %4
}
""")
    reports: list = []
    out = optimize(g, ["constant_fold"], report=reports)
    assert str(out) == str(g)
    (note,) = reports[0]["constant_fold"].notes
    assert note.startswith("left %4 (batch_norm_flag) unfolded: batch_norm_flag: expected more than 1 value")


def test_constant_fold_size_rule_allows_small_expansions() -> None:
    side = int(np.sqrt(FOLD_SMALL_ELEMENTS))
    g = ir.parse(f"""graph @g() -> (f32[{side},{side}], f32[{side},{side + 1}]) {{
  %0 = constant {{value=array<f32[]>[0.5]}} : f32[]
  %1 = broadcast_to %0 {{shape=[{side}, {side}]}} : f32[{side},{side}]
  %2 = broadcast_to %0 {{shape=[{side}, {side + 1}]}} : f32[{side},{side + 1}]
  return %1, %2
}}
""")
    out = optimize(g, ["constant_fold"])
    assert [n.op for n in out.nodes] == ["constant", "constant", "broadcast_to"]


def test_constant_fold_params_become_new_frozen_leaves_with_fresh_ids_and_paths() -> None:
    g = ir.parse("""graph @g(%x: f32[3]) -> (f32[3], f32[3]) {
  %a = param {buffer=false, id=4, path="a", trainable=false} : f32[3]
  %a.folded = param {buffer=true, id=9, path="a.folded", trainable=false} : f32[3]
  %0 = exp %a : f32[3]
  %1 = add %0, %a.folded : f32[3]
  %2 = mul %x, %1 : f32[3]
  %3 = neg %a : f32[3]
  %4 = mul %x, %3 : f32[3]
  return %2, %4
}
""")
    g = g.replace(weights=random_weights(g))
    out = optimize(g, ["constant_fold"], fold_params=True)
    leaves = [(p.path, p.id, p.trainable, p.buffer) for p in out.params()]
    assert leaves == [("a.folded_2", 10, False, False), ("a.folded_3", 11, False, False)]
    np.testing.assert_allclose(out.weights["a.folded_2"], np.exp(g.weights["a"]) + g.weights["a.folded"])
    assert_equivalent(g, out)


def test_constant_fold_does_not_fold_trainable_params_or_flags() -> None:
    g = ir.parse("""graph @g(%x: f32[3]) -> (f32[3], bool[]) {
  %p = param {buffer=false, id=0, path="p", trainable=true} : f32[3]
  %f = flag {id=1, path="f", value=true} : bool[]
  %0 = exp %p : f32[3]
  %1 = mul %x, %0 : f32[3]
  %2 = constant {value=array<bool[]>[true]} : bool[]
  %3 = eq %f, %2 : bool[]
  return %1, %3
}
""")
    g = g.replace(weights=random_weights(g))
    assert str(optimize(g, ["constant_fold"], fold_params=True)) == str(g)
