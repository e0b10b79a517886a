"""Random DAGs for the fuse and plan_memory property tests: elementwise ops, broadcasts, reductions, softmax,
matmuls, opaque movement ops, slices, concats, reshapes (aliases of their operand's storage), scalar constants and
param leaves over a few broadcast-compatible shapes."""
from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from braze.ir import Graph, GraphBuilder, TensorType, Value, float64, get_op

SHAPES = [(4, 8), (8,), (4, 1), (1, 8), (8, 8)]
UNARY = ["neg", "tanh", "relu", "sigmoid", "abs"]
BINARY = ["add", "mul", "sub", "maximum"]
STEPS = ["unary", "binary", "broadcast", "reduce", "softmax", "matmul", "transpose", "scale", "param", "reshape",
         "slice", "concat"]
# shapes a reshape may give, by element count: mostly SHAPES again, so the result combines with the rest
# slices a shape may take, as (starts, stops, steps): rows, a column, every other row, every other column
SLICES = {(8, 8): [((0, 0), (4, 8), (1, 1)), ((1, 0), (8, 8), (2, 1)), ((0, 3), (8, 7), (1, 1)),
                   ((0, 0), (8, 8), (1, 2))],
          (4, 8): [((0, 0), (4, 1), (1, 1)), ((2, 0), (3, 8), (1, 1)), ((0, 4), (4, 8), (1, 1))],
          (8,): [((0,), (8,), (2,)), ((3,), (4,), (1,))]}
RESHAPES = {32: [(4, 8), (32,), (2, 16)], 8: [(8,), (1, 8), (2, 4)], 4: [(4, 1), (4,), (1, 4)],
            64: [(8, 8), (64,), (4, 16)], 1: [(1,), (1, 1)]}


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


def _step(draw: Any, b: GraphBuilder, pool: list[Value], k: int, steps: list[str]) -> Value | None:
    """One random node reading values of `pool`, or None when the drawn step does not apply."""
    kind = draw(st.sampled_from(steps))
    x = pool[draw(st.integers(0, len(pool) - 1))]
    if kind == "unary":
        return b.bind(draw(st.sampled_from(UNARY)), [x], {})
    if kind == "binary":
        y = pool[draw(st.integers(0, len(pool) - 1))]
        return b.bind(draw(st.sampled_from(BINARY)), [x, y], {}) if _broadcast(x.shape, y.shape) else None
    if kind == "broadcast":
        return b.broadcast_to(x, shape=(4, 8)) if _broadcast(x.shape, (4, 8)) == (4, 8) else None
    if kind == "reduce" and len(x.shape) == 2:
        op = draw(st.sampled_from(["sum", "mean", "max"]))
        return b.bind(op, [x], {"axes": (draw(st.integers(0, 1)),), "keepdim": True})
    if kind == "softmax" and len(x.shape) == 2:
        return b.softmax(x, axis=-1)
    if kind == "matmul" and len(x.shape) == 2 and x.shape[1] == 8:
        y = next((v for v in reversed(pool) if v.shape == (8, 8)), None)
        return None if y is None else b.matmul(x, y)
    if kind == "transpose" and len(x.shape) == 2:
        return b.transpose(x, perm=(1, 0))
    if kind == "scale":
        return b.mul(x, b.scalar(draw(st.sampled_from([0.5, 2.0, -1.0])), x))
    if kind == "concat" and x.shape == (4, 8):
        y = pool[draw(st.integers(0, len(pool) - 1))]
        return b.concat(x, y, axis=0) if y.shape == (4, 8) else None
    if kind == "slice" and x.shape in SLICES:
        starts, stops, steps = draw(st.sampled_from(SLICES[x.shape]))
        return b.slice(x, starts=starts, stops=stops, steps=steps)
    if kind == "reshape" and x.type.size in RESHAPES:
        return b.reshape(x, shape=draw(st.sampled_from(RESHAPES[x.type.size])))
    if kind == "param":
        return b.param(f"p{k}", TensorType(draw(st.sampled_from(SHAPES)), float64), id=k, trainable=False)
    return None


@st.composite
def random_dags(draw: st.DrawFn, max_steps: int = 24, steps: list[str] = STEPS) -> Graph:
    """A verified float64 graph with 2-3 inputs, up to `max_steps` nodes and 1-3 outputs, with weights."""
    b = GraphBuilder("random")
    pool = [b.input(f"x{i}", TensorType(SHAPES[draw(st.integers(0, len(SHAPES) - 1))], float64))
            for i in range(draw(st.integers(2, 3)))]
    pool.append(b.input("w", TensorType((8, 8), float64)))
    for k in range(draw(st.integers(1, max_steps))):
        value = _step(draw, b, pool, k, steps)
        if value is not None:
            pool.append(value)
    computed = [n.out for n in b.nodes if not get_op(n.op).is_leaf] or pool
    outputs = list(dict.fromkeys([pool[-1], *draw(st.lists(st.sampled_from(computed), max_size=2))]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    weights = {n.attr["path"]: rng.standard_normal(n.out.shape) for n in b.nodes if n.op == "param"}
    return b.finish(outputs, weights=weights)


def random_inputs(graph: Graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape) for v in graph.inputs]
