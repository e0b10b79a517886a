"""constant_fold: evaluate, with the ops' numpy references, every node whose operands are all known, and keep
only the values the rest of the graph reads.

Known values are constants and, with the option fold_params=True, frozen params: param leaves with
trainable=false (buffers included) whose array is in the graph's weights. A folded value computed from
constants alone becomes a `constant` node (its array is printed in the IR text). A folded value that depends on
at least one param becomes a new param leaf instead, so weights stay out of the text and travel in the graph's
weights mapping: path "<first param path it reads>.folded" (with _2, _3, ... when taken), a new id one above the
graph's largest, trainable=false, buffer=false. Leaves the folding leaves unread disappear.

Size rule: a node is folded only when each of its results has no more elements than its operands together, or
at most FOLD_SMALL_ELEMENTS. Ops that expand their input (broadcast_to of a scalar, one_hot, an outer product)
stay in the graph, so a few bytes of constants never become a large array in the text or the weights.

A node whose reference raises on the known operands (the op would fail at run time too) is left in place.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..builder import GraphBuilder
from ..errors import BrazeError
from ..evaluate import conform
from ..graph import Graph, Node, Value
from ..registry import get_op, is_leaf
from .manager import PassContext, register_pass
from .rewrite import RewriteEmitter, finalize

FOLD_SMALL_ELEMENTS = 16


class _Known:
    """The arrays of the values folding can compute, and the param paths each one was computed from."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.sources: dict[str, tuple[str, ...]] = {}

    def __contains__(self, value: Value) -> bool:
        return value.name in self.arrays

    def set(self, value: Value, array: np.ndarray, sources: tuple[str, ...]) -> None:
        self.arrays[value.name], self.sources[value.name] = array, sources


def _within_size_rule(node: Node) -> bool:
    operands = sum(v.type.size for v in node.inputs)
    return all(v.type.size <= max(operands, FOLD_SMALL_ELEMENTS) for v in node.outputs)


def _evaluate(graph: Graph, fold_params: bool, ctx: PassContext) -> _Known:
    known = _Known()
    for node in graph.nodes:
        if node.op == "constant":
            known.set(node.out, node.attr["value"].array, ())
        elif node.op == "param":
            path = node.attr["path"]
            if fold_params and not node.attr["trainable"] and path in graph.weights:
                known.set(node.out, np.asarray(graph.weights[path]), (path,))
        elif not is_leaf(node) and all(v in known for v in node.inputs) and get_op(node.op).pure \
                and _within_size_rule(node):
            op = get_op(node.op)
            try:
                results = op.run([known.arrays[v.name] for v in node.inputs], node.attr)
                arrays = [conform(op, r, v.type) for r, v in zip(results, node.outputs, strict=True)]
            except (BrazeError, ArithmeticError, ValueError) as exc:
                ctx.note(f"left %{node.outputs[0].name} ({node.op}) unfolded: {exc}")
                continue
            sources = tuple(dict.fromkeys(p for v in node.inputs for p in known.sources[v.name]))
            for v, array in zip(node.outputs, arrays):
                known.set(v, array, sources)
    return known


def _fresh_path(base: str, paths: set[str]) -> str:
    path = next(p for p in itertools.chain([base], (f"{base}_{k}" for k in itertools.count(2))) if p not in paths)
    paths.add(path)
    return path


@register_pass("constant_fold", options=("fold_params",))
def constant_fold(graph: Graph, ctx: PassContext) -> Graph:
    """Replace computable subgraphs by constants (or new frozen params, with fold_params=True)."""
    known = _evaluate(graph, bool(ctx.option("fold_params", False)), ctx)
    folded = {i for i, n in enumerate(graph.nodes)
              if not is_leaf(n) and n.outputs and all(v in known for v in n.outputs)}
    if not folded:
        return graph
    needed = {v.name for i, n in enumerate(graph.nodes) if i not in folded for v in n.inputs if v in known}
    needed |= {v.name for v in graph.outputs if v in known}

    builder = GraphBuilder(graph.name)
    for v in graph.inputs:
        builder.input(v.name, v.type)
    taken = {v.name for v in graph.inputs} | {v.name for n in graph.nodes for v in n.outputs}
    weights: dict[str, Any] = dict(graph.weights)
    emitter = RewriteEmitter(builder, iter(()), taken, weights)  # for param(): folded constants keep their names
    paths = {p.path for p in graph.params()}
    next_id = max((p.id for p in graph.params()), default=-1) + 1
    sub: dict[str, Value] = {}
    counts = {"constant": 0, "param": 0}
    for i, node in enumerate(graph.nodes):
        node = node.replace(inputs=tuple(sub.get(v.name, v) for v in node.inputs))
        if i not in folded:
            builder.append(node)
            continue
        emitter.loc = node.loc
        for v in node.outputs:
            if v.name not in needed:
                continue
            array, sources = known.arrays[v.name], known.sources[v.name]
            if sources:
                path = _fresh_path(f"{sources[0]}.folded", paths)
                # an owned, contiguous array: never a view into the weights it was computed from
                sub[v.name] = emitter.param(path, np.array(array, order="C"), id=next_id)
                next_id += 1
                counts["param"] += 1
            else:
                builder.add_node("constant", (), {"value": array}, names=[v.name], loc=node.loc)
                counts["constant"] += 1
    outputs = [sub.get(v.name, v) for v in graph.outputs]
    result = builder.finish(outputs, attributes=graph.attributes, weights=weights, verify=False)
    ctx.note(f"folded {len(folded)} node(s) into {counts['constant']} constant(s) and {counts['param']} param(s)")
    return finalize(result, graph, weights)
