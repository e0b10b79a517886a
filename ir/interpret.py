"""The reference interpreter: runs a graph with the ops' numpy references. It is the oracle for every test."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .errors import BrazeError, DTypeError, ShapeError
from .evaluate import conform
from .graph import Graph, Value
from .registry import get_op


def bind_inputs(graph: Graph, inputs: Sequence[Any]) -> dict[str, np.ndarray]:
    """Check call inputs against the graph's signature (count, shape, dtype) and name them."""
    if len(inputs) != len(graph.inputs):
        raise BrazeError(f"graph @{graph.name} takes {len(graph.inputs)} input(s) "
                         f"({', '.join(f'%{v.name}: {v.type}' for v in graph.inputs)}), got {len(inputs)}")
    env: dict[str, np.ndarray] = {}
    for value, given in zip(graph.inputs, inputs):
        array = np.asarray(given)
        if array.shape != value.shape:
            raise ShapeError(f"input %{value.name}: expected shape {list(value.shape)} ({value.type}), "
                             f"got {list(array.shape)}")
        if array.dtype != value.dtype.numpy:
            raise DTypeError(f"input %{value.name}: expected dtype {value.dtype} ({value.type}), got {array.dtype}")
        env[value.name] = array
    return env


def interpret(graph: Graph, inputs: Sequence[Any], params: Mapping[str, Any] | None = None,
              flags: Mapping[str, bool] | None = None) -> tuple[np.ndarray, ...]:
    """Execute `graph` on `inputs`; params default to the graph's weights, flags to their recorded values."""
    env = bind_inputs(graph, inputs)
    weights = {**graph.weights, **(params or {})}
    for node in graph.nodes:
        attrs = node.attr
        if node.op == "param":
            env[node.out.name] = _param_value(node.out, attrs["path"], weights)
            continue
        if node.op == "flag":
            value = attrs["value"] if flags is None else flags.get(attrs["path"], attrs["value"])
            env[node.out.name] = np.asarray(bool(value))
            continue
        op = get_op(node.op)
        results = op.run([env[v.name] for v in node.inputs], attrs)
        for out, result in zip(node.outputs, results, strict=True):
            env[out.name] = conform(op, result, out.type)
    return tuple(env[v.name] for v in graph.outputs)


def _param_value(value: Value, path: str, weights: Mapping[str, Any]) -> np.ndarray:
    if path not in weights:
        raise BrazeError(f"no value for param '{path}': pass it in params= or trace with weights")
    array = np.asarray(weights[path])
    if array.shape != value.shape:
        raise ShapeError(f"param '{path}': expected shape {list(value.shape)}, got {list(array.shape)}")
    if array.dtype != value.dtype.numpy:
        raise DTypeError(f"param '{path}': expected dtype {value.dtype}, got {array.dtype}")
    return array
