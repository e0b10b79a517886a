"""check_memory_plan: plans from outside the planner are refused with a VerifyError naming the problem and the
values; plan_memory's own plans pass (test_plan_memory.py checks every planned graph with it)."""
from __future__ import annotations

from typing import Any

import pytest

from braze.ir import Graph, GraphBuilder, TensorType, VerifyError, float32, parse
from braze.ir.passes import PassContext, optimize
from braze.ir.passes.plan_check import check_memory_plan
from braze.ir.passes.plan_memory import plan_memory
from braze.ir.types import MAX_TENSOR_BYTES_ENV


def _graph() -> Graph:
    """%0 = exp x; %1 = neg %0; %2 = add %0, %1 (so %0 and %1 are live together); output transpose %2."""
    b = GraphBuilder("g")
    x = b.input("x", TensorType((4, 8), float32))
    a = b.exp(x)
    c = b.neg(a)
    return b.finish([b.transpose(b.add(a, c), perm=(1, 0))])


def _planned() -> Graph:
    return plan_memory(_graph(), PassContext("plan_memory"))


def _with_plan(**changes: Any) -> Graph:
    """The planned graph with some plan entries replaced (None deletes one)."""
    g = _planned()
    plan = {**g.attributes["memory_plan"], **changes}
    plan = {k: v for k, v in plan.items() if v is not None}
    return g.replace(attributes={**g.attributes, "memory_plan": plan})


def _with_offsets(**offsets: int) -> Graph:
    return _with_plan(offsets={**_planned().attributes["memory_plan"]["offsets"], **offsets})


def test_check_memory_plan_returns_the_planners_plan() -> None:
    g = _planned()
    assert check_memory_plan(g) == g.attributes["memory_plan"] and g.attributes["memory_plan"]["offsets"] == {
        "0": 0, "1": 128, "2": 0}


def test_check_memory_plan_refuses_two_live_buffers_at_one_offset() -> None:
    with pytest.raises(VerifyError, match=r"puts %1 and %0 in overlapping bytes while both are live: %0 at bytes "
                                          r"\[0, 128\) live over nodes 0-2 and %1 at bytes \[0, 128\) live over "
                                          r"nodes 1-2"):
        check_memory_plan(_with_offsets(**{"1": 0}))


def test_check_memory_plan_refuses_a_partial_overlap() -> None:
    with pytest.raises(VerifyError, match=r"puts %1 and %0 in overlapping bytes.*%1 at bytes \[64, 192\)"):
        check_memory_plan(_with_offsets(**{"1": 64}))


def test_check_memory_plan_refuses_an_elementwise_result_shifted_over_its_dying_operands() -> None:
    """In place means the operand's very bytes: %2 = add %0, %1 half over each of them is refused."""
    with pytest.raises(VerifyError, match=r"puts %2 and %0 in overlapping bytes"):
        check_memory_plan(_with_offsets(**{"2": 64}))


def test_check_memory_plan_allows_an_elementwise_result_over_its_dying_operand() -> None:
    assert check_memory_plan(_with_offsets(**{"2": 128}))["offsets"]["2"] == 128


def test_check_memory_plan_refuses_in_place_over_an_operand_read_later() -> None:
    b = GraphBuilder("keep")
    x = b.input("x", TensorType((4, 8), float32))
    a = b.exp(x)
    c = b.neg(a)  # elementwise, but %0 is read again by the add
    g = plan_memory(b.finish([b.transpose(b.add(a, c), perm=(1, 0))]), PassContext("plan_memory"))
    plan = g.attributes["memory_plan"]
    bad = g.replace(attributes={"memory_plan": {**plan, "offsets": {**plan["offsets"], "1": plan["offsets"]["0"]}}})
    with pytest.raises(VerifyError, match="puts %1 and %0 in overlapping bytes"):
        check_memory_plan(bad)


def test_check_memory_plan_refuses_in_place_by_a_non_elementwise_node() -> None:
    b = GraphBuilder("move")
    x = b.input("x", TensorType((8, 8), float32))
    h = b.transpose(b.exp(x), perm=(1, 0))
    g = plan_memory(b.finish([b.exp(b.transpose(h, perm=(1, 0)))]), PassContext("plan_memory"))
    plan = g.attributes["memory_plan"]
    bad = g.replace(attributes={"memory_plan": {**plan, "offsets": {"0": 0, "1": 0, "2": 0}}})
    with pytest.raises(VerifyError, match="puts %1 and %0 in overlapping bytes"):
        check_memory_plan(bad)


def test_check_memory_plan_refuses_an_arena_of_four_exbibytes() -> None:
    with pytest.raises(VerifyError, match=r"arena_bytes 4611686018427387904 is more than the limit of \d+ bytes "
                                          r"\(BRAZE_MAX_TENSOR_BYTES\)"):
        check_memory_plan(_with_plan(arena_bytes=4 * 2 ** 60))


def test_check_memory_plan_arena_limit_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_TENSOR_BYTES_ENV, str(2 ** 20))
    with pytest.raises(VerifyError, match="arena_bytes 1048640 is more than the limit of 1048576"):
        check_memory_plan(_with_plan(arena_bytes=2 ** 20 + 64))


@pytest.mark.parametrize("key,value,pattern", [
    ("arena_bytes", "256", r"arena_bytes must be a non-negative int, got str '256'"),
    ("arena_bytes", 256.0, r"arena_bytes must be a non-negative int, got float 256.0"),
    ("arena_bytes", True, r"arena_bytes must be a non-negative int, got bool True"),
    ("arena_bytes", -64, r"arena_bytes must be a non-negative int, got int -64"),
    ("naive_bytes", (1, 2), r"naive_bytes must be a non-negative int, got tuple"),
    ("alignment", 32, r"alignment must be 64, got 32"),
    ("offsets", (0, 128, 0), r"offsets must be a dict of value name -> byte offset, got tuple"),
    ("offsets", {"0": 0, "1": "128", "2": 0}, r"the offset of %1 must be a non-negative int, got str '128'"),
    ("offsets", {"0": 0, "1": -128, "2": 0}, r"the offset of %1 must be a non-negative int, got int -128"),
    ("offsets", {"0": 0, "1": None, "2": 0}, r"the offset of %1 must be a non-negative int, got NoneType"),
    ("offsets", {"0": 0, "1": 128}, r"has no offset for the intermediate value\(s\) %2"),
    ("offsets", {"0": 0, "1": 128, "2": 0, "x": 256}, r"places %x, which are not intermediate values"),
    ("offsets", {"0": 0, "1": 128, "2": 0, "9": 256}, r"places %9, which are not intermediate values"),
    ("offsets", {"0": 0, "1": 96, "2": 0}, r"%1 \(128 bytes\) at offset 96 is not a 64-byte aligned place"),
    ("offsets", {"0": 0, "1": 192, "2": 0}, r"%1 \(128 bytes\) at offset 192 is not .* inside the 256-byte arena"),
    ("naive_bytes", 100, r"naive_bytes is 100, but the intermediate buffers take 384 bytes"),
    ("extra", 1, r"must have exactly the keys alignment, arena_bytes, naive_bytes, offsets, got alignment, "
                 r"arena_bytes, extra, naive_bytes, offsets"),
    ("alignment", None, r"must have exactly the keys"),
])
def test_check_memory_plan_refuses_a_malformed_plan(key: str, value: Any, pattern: str) -> None:
    with pytest.raises(VerifyError, match=r"graph @g: memory_plan " + pattern):
        check_memory_plan(_with_plan(**{key: value}))


@pytest.mark.parametrize("plan,pattern", [(None, "is missing"), ((1, 2), "must be a dict, got tuple")])
def test_check_memory_plan_refuses_a_missing_or_non_dict_plan(plan: Any, pattern: str) -> None:
    g = _graph() if plan is None else _graph().replace(attributes={"memory_plan": plan})
    with pytest.raises(VerifyError, match=pattern):
        check_memory_plan(g)


CRAFTED = """\
graph @g(%x: f32[4,8]) -> (f32[8,4]) attributes {memory_plan={alignment=64, arena_bytes=256, naive_bytes=384, \
offsets={"0"=0, "1"=0, "2"=128}}} {
  %0 = exp %x : f32[4,8]
  %1 = neg %0 : f32[4,8]
  %2 = add %0, %1 : f32[4,8]
  %3 = transpose %2 {perm=[1, 0]} : f32[8,4]
  return %3
}
"""


def test_check_memory_plan_refuses_an_overlapping_plan_read_from_text() -> None:
    g = parse(CRAFTED)
    with pytest.raises(VerifyError, match="puts %1 and %0 in overlapping bytes"):
        check_memory_plan(g)


def test_check_memory_plan_accepts_the_same_text_once_the_plan_is_sound() -> None:
    g = parse(CRAFTED.replace('"1"=0, "2"=128', '"1"=128, "2"=0'))
    assert check_memory_plan(g)["offsets"] == {"0": 0, "1": 128, "2": 0}


def test_check_memory_plan_of_a_long_chain() -> None:
    b = GraphBuilder("long")
    h = b.input("x", TensorType((16,), float32))
    for _ in range(500):
        h = b.transpose(b.exp(h), perm=(0,))
    g = plan_memory(b.finish([h]), PassContext("plan_memory"))
    assert len(check_memory_plan(g)["offsets"]) == 999


def test_check_memory_plan_refuses_a_place_for_an_alias() -> None:
    """A reshape's result is its operand's storage, which the graph decides: a plan may not place it apart."""
    b = GraphBuilder("alias")
    x = b.input("x", TensorType((4, 8), float32))
    g = plan_memory(b.finish([b.neg(b.reshape(b.exp(x), shape=(32,)))]), PassContext("plan_memory"))
    assert g.attributes["memory_plan"]["offsets"] == {"0": 0}
    with pytest.raises(VerifyError, match=r"places %1, which are not intermediate values of the graph \(inputs, "
                                          r"outputs, leaves and aliases of another value's storage"):
        check_memory_plan(_with_offsets_of(g, **{"1": 128}))


def test_check_memory_plan_refuses_in_place_over_storage_still_read_through_an_alias() -> None:
    b = GraphBuilder("alias_later")
    x = b.input("x", TensorType((4, 8), float32))
    e = b.exp(x)
    first = b.neg(e)  # elementwise, but %0 is read later through its reshape
    g = plan_memory(b.finish([b.transpose(b.add(first, b.reshape(e, shape=(4, 8))), perm=(1, 0))]),
                    PassContext("plan_memory"))
    with pytest.raises(VerifyError, match="puts %1 and %0 in overlapping bytes"):
        check_memory_plan(_with_offsets_of(g, **{"1": g.attributes["memory_plan"]["offsets"]["0"]}))


def _with_offsets_of(g: Graph, **offsets: int) -> Graph:
    plan = g.attributes["memory_plan"]
    return g.replace(attributes={**g.attributes, "memory_plan": {**plan, "offsets": {**plan["offsets"], **offsets}}})


def test_check_memory_plan_refuses_in_place_over_an_operand_read_through_a_view() -> None:
    b = GraphBuilder("viewed")
    x = b.input("x", TensorType((4, 6, 8), float32))
    e = b.exp(x)
    g = optimize(b.finish([b.transpose(b.neg(b.transpose(e, perm=(1, 0, 2))), perm=(2, 1, 0))]),
                 ["fuse", "plan_memory"])
    region = next(n for n in g.nodes if n.op == "fused")
    assert [n.op for n in region.attr["body"].nodes] == ["transpose", "neg"]
    with pytest.raises(VerifyError, match=f"puts %{region.out.name} and %{region.inputs[0].name} in overlapping"):
        check_memory_plan(_with_offsets_of(g, **{region.out.name: g.attributes["memory_plan"]["offsets"][
            region.inputs[0].name]}))
