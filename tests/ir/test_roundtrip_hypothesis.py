"""Random small DAGs of the registered elementwise and reduction ops: text round trip, verify, renumber."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from braze import ir
from braze.ir import BrazeError, Graph, GraphBuilder, TensorType, float32, float64, interpret, parse, verify
from braze.ir.attrs import REQUIRED, AttrSpec

# Every registered elementwise and reduction op takes part, so ops registered later are covered too.
OPS = [op for op in map(ir.get_op, ir.op_names())
       if op.category in ("elementwise", "reduction") and all(s.kind != "array" for s in op.attrs)]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_floats = st.floats(-4, 4) | st.sampled_from([0.0, -0.0, 0.5, math.inf, -math.inf, math.nan])
_KIND = {
    "int": st.integers(-3, 3),
    "float": _floats,
    "bool": st.booleans(),
    "str": st.text(max_size=3),
    "ints": st.lists(st.integers(-3, 3), max_size=3).map(tuple),
    "floats": st.lists(_floats, max_size=3).map(tuple),
    "dtype": st.sampled_from(ir.DTYPES),
    "shape": st.lists(st.integers(1, 4), max_size=3).map(tuple),
}


def attribute(spec: AttrSpec) -> st.SearchStrategy[Any]:
    """A value for one attribute: any of its choices, or a value of its kind (None when optional)."""
    values = st.sampled_from(spec.choices) if spec.choices else _KIND[spec.kind]
    return values | st.none() if spec.optional else values


@st.composite
def attributes(draw: st.DrawFn, op: ir.OpDef) -> dict[str, Any]:
    """Values for the op's attributes; those with defaults are sometimes left out."""
    return {s.name: draw(attribute(s)) for s in op.attrs if s.default is REQUIRED or draw(st.booleans())}


@st.composite
def broadcastable_shape(draw: st.DrawFn, base: tuple[int, ...]) -> tuple[int, ...]:
    """`base` with some leading dimensions dropped and some others set to 1: it broadcasts against `base`."""
    shape = base[draw(st.integers(0, len(base))):]
    return tuple(1 if draw(st.booleans()) else d for d in shape)


@dataclass
class Case:
    graph: Graph
    arrays: list[np.ndarray]


@st.composite
def random_graphs(draw: st.DrawFn) -> Case:
    """A verified DAG over 1-3 float inputs whose shapes broadcast; temporaries get scrambled digit names."""
    dtype = draw(st.sampled_from([float32, float64]))
    base = tuple(draw(st.lists(st.integers(1, 4), max_size=3)))
    b = GraphBuilder("random")
    count = draw(st.integers(1, 3))
    pool = [b.input(f"in{i}", TensorType(draw(broadcastable_shape(base)), dtype)) for i in range(count)]
    names = iter(draw(st.permutations([str(k) for k in range(100, 140)])))
    for step in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(OPS))
        low, high = op.arity_range()
        count = draw(st.integers(low, high if high is not None else low + 2))
        operands = [draw(st.sampled_from(pool)) for _ in range(count)]
        attrs = draw(attributes(op))
        result_names = [next(names) if draw(st.booleans()) else f"t{step}.{k}" for k in range(op.num_results)]
        try:
            pool.extend(b.add_node(op.name, operands, attrs, names=result_names))
        except BrazeError:
            continue  # operands or attributes the op rejects: draw another node
    outputs = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    arrays = [rng.standard_normal(v.shape).astype(dtype.numpy) for v in b.inputs]
    return Case(b.finish(outputs), arrays)


def assert_same_results(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


@FAST
@given(random_graphs())
def test_random_graph_text_round_trips(case: Case) -> None:
    text = str(case.graph)
    assert str(parse(text)) == text


@FAST
@given(random_graphs())
def test_random_graph_parses_to_an_equal_graph(case: Case) -> None:
    assert parse(str(case.graph)) == case.graph


@FAST
@given(random_graphs())
def test_random_graph_verifies(case: Case) -> None:
    assert verify(case.graph) is case.graph and verify(parse(str(case.graph))) is not None


@FAST
@given(random_graphs())
def test_random_parsed_graph_interprets_like_the_original(case: Case) -> None:
    assert_same_results(interpret(parse(str(case.graph)), case.arrays), interpret(case.graph, case.arrays))


@FAST
@given(random_graphs())
def test_renumbered_is_idempotent(case: Case) -> None:
    once = case.graph.renumbered()
    assert once.renumbered() == once and str(once.renumbered()) == str(once)


@FAST
@given(random_graphs())
def test_renumbered_names_temporaries_in_order(case: Case) -> None:
    g = case.graph.renumbered()
    temporaries = [v.name for n in g.nodes for v in n.outputs if v.name.isdigit()]
    assert temporaries == [str(i) for i in range(len(temporaries))]


@FAST
@given(random_graphs())
def test_renumbered_keeps_interpret_results(case: Case) -> None:
    g = case.graph.renumbered()
    assert verify(g) is g
    assert_same_results(interpret(g, case.arrays), interpret(case.graph, case.arrays))


@FAST
@given(random_graphs())
def test_renumbered_graph_round_trips(case: Case) -> None:
    g = case.graph.renumbered()
    assert parse(str(g)) == g
