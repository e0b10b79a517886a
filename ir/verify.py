"""The verifier: SSA, topological order, op schemas, types that agree with inference and fit the size limit,
well-formed leaves.

Nested graphs (attributes of kind "graph", such as a fusion region's body) are verified by the same rules; the op
that holds one checks its operands against the body's inputs in its type inference.
"""
from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from .attrs import AttrSpec
from .errors import BrazeError, TensorSizeError, VerifyError
from .graph import Graph, Node, Value, sorted_attrs
from .printer import format_node
from .registry import get_op
from .types import TensorType, bool_


def _fail(graph: Graph, index: int | None, message: str) -> NoReturn:
    """Raise VerifyError naming the node and showing the lines around it.

    The error also carries `node_index` and `reason` so the parser can point at the offending line.
    """
    if index is None:
        error = VerifyError(f"graph @{graph.name}: {message}")
    else:
        lo, hi = max(index - 2, 0), min(index + 3, len(graph.nodes))
        context = "\n".join(("> " if i == index else "  ") + _show(graph.nodes[i]) for i in range(lo, hi))
        error = VerifyError(f"graph @{graph.name}, node {index} ({graph.nodes[index].op}): {message}\n{context}")
    error.node_index, error.reason = index, message
    raise error


def _show(node: Node) -> str:
    """The node's text line, or its raw attributes when they hold values the printer cannot show."""
    try:
        return format_node(node)
    except TypeError:
        return f"{node.op} {node.attrs!r}"


def _same_value(a: Any, b: Any) -> bool:
    """Equal and of the same type, element by element (1 and 1.0, or a list and a tuple, are not the same)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    return a is b or a == b


def _is_normalized(attrs: Any, checked: dict[str, Any]) -> bool:
    """Attributes exactly as GraphBuilder stores them: name-sorted pairs of checked values."""
    expected = sorted_attrs(checked)
    return (isinstance(attrs, tuple) and len(attrs) == len(expected)
            and all(isinstance(p, tuple) and len(p) == 2 and p[0] == k and _same_value(p[1], v)
                    for p, (k, v) in zip(attrs, expected)))


def _check_leaf(graph: Graph, i: int, node: Node, seen_paths: dict[str, set[str]]) -> None:
    if node.inputs or len(node.outputs) != 1:
        _fail(graph, i, f"a {node.op} leaf takes no operands and has one result")
    if node.op == "flag" and node.out.type != TensorType((), bool_):
        _fail(graph, i, f"a flag has type bool[], not {node.out.type}")
    if "path" not in node.attr:
        return
    path = node.attr["path"]
    if path in seen_paths.setdefault(node.op, set()):
        _fail(graph, i, f"{node.op} path '{path}' appears twice")
    seen_paths[node.op].add(path)


def verify_node(graph: Graph, i: int, node: Node) -> None:
    """Schema and type checks of one node against the registry."""
    try:
        op = get_op(node.op)
        checked = op.check_attrs(node.attr)
        if not _is_normalized(node.attrs, checked):
            _fail(graph, i, "attributes are not in normalized form (build nodes through GraphBuilder)")
        _verify_nested(graph, i, op.attrs, checked)
        if op.declares_type:
            return
        inferred = op.infer_types([v.type for v in node.inputs], checked)
    except VerifyError:
        raise
    except BrazeError as exc:
        _fail(graph, i, str(exc))
    declared = tuple(v.type for v in node.outputs)
    if inferred != declared:
        _fail(graph, i, f"declared type(s) {', '.join(map(str, declared))} but {node.op} infers "
                        f"{', '.join(map(str, inferred))}")


def _verify_nested(graph: Graph, i: int, specs: tuple[AttrSpec, ...], checked: dict[str, Any]) -> None:
    """Each nested graph attribute must itself be a valid graph."""
    for spec in specs:
        if spec.kind == "graph" and checked[spec.name] is not None:
            try:
                verify(checked[spec.name])
            except VerifyError as exc:
                _fail(graph, i, f"attribute '{spec.name}' holds an invalid graph: {exc}")


class VerifiedNodes:
    """The nodes one run of verifications has passed (the node's own checks and its results' sizes), by identity
    and by what those checks read: the op, the attribute tuple (the same object when a pass renames or re-links a
    node), the operand types and the result types, never the value names. A pipeline verifying after every pass
    thus checks a node its passes carried over (renamed or not) once. The nodes and attribute tuples are held, so
    their ids stay unique."""

    def __init__(self) -> None:
        self._nodes: dict[int, Node] = {}
        self._forms: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    @staticmethod
    def _form(node: Node) -> tuple[Any, ...]:
        return node.op, id(node.attrs), tuple(v.type for v in node.inputs), tuple(v.type for v in node.outputs)

    def __contains__(self, node: Node) -> bool:
        if self._nodes.get(id(node)) is node:
            return True
        if self._forms.get(self._form(node)) is node.attrs:
            self._nodes[id(node)] = node
            return True
        return False

    def add(self, node: Node) -> None:
        """Add a node that passed its checks."""
        self._nodes[id(node)] = node
        self._forms[self._form(node)] = node.attrs

    def adding(self, node: Node) -> Node:
        """Add a node checked as it was made (GraphBuilder's), by identity only; returns it."""
        self._nodes[id(node)] = node
        return node


def verify(graph: Graph, passed: VerifiedNodes | None = None) -> Graph:
    """Check every IR rule; returns the graph unchanged or raises VerifyError naming the bad node. A node
    `passed` holds is only checked for where it sits (SSA order, operand types, leaf paths); one that passes is
    added."""
    defined: dict[str, TensorType] = {}
    for v in graph.inputs:
        if v.name in defined:
            _fail(graph, None, f"input %{v.name} is declared twice")
        _check_size(graph, None, v)
        defined[v.name] = v.type
    seen_paths: dict[str, set[str]] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v.name not in defined:
                _fail(graph, i, f"operand %{v.name} is not defined before this node (SSA and topological order)")
            if defined[v.name] != v.type:
                _fail(graph, i, f"operand %{v.name} is used as {v.type} but defined as {defined[v.name]}")
        known = passed is not None and node in passed
        if not known:
            verify_node(graph, i, node)
        if get_op(node.op).is_leaf:
            _check_leaf(graph, i, node, seen_paths)
        for v in node.outputs:
            if v.name in defined:
                _fail(graph, i, f"value %{v.name} is defined twice")
            if not known:
                _check_size(graph, i, v)
            defined[v.name] = v.type
        if passed is not None and not known:
            passed.add(node)
    for v in graph.outputs:
        if v.name not in defined or defined[v.name] != v.type:
            _fail(graph, None, f"output %{v.name}: {v.type} is not a value of the graph")
    verify_weights(graph)
    return graph


def _check_size(graph: Graph, index: int | None, value: Value) -> None:
    """A type is checked against the size limit when it is made; check again in case the limit was lowered since."""
    try:
        value.type.check_size()
    except TensorSizeError as exc:
        _fail(graph, index, f"%{value.name}: {exc}")


def verify_weights(graph: Graph) -> Graph:
    """When a graph carries weights, each param leaf has one of its declared type (the part of verify() that a
    graph parsed before, and so verified, needs once its weights are attached)."""
    if not graph.weights:
        return graph
    for i, node in enumerate(graph.nodes):
        if node.op != "param":
            continue
        path, type = node.attr["path"], node.out.type
        if path not in graph.weights:
            _fail(graph, i, f"param '{path}' has no value in the graph's weights")
        array = np.asarray(graph.weights[path])
        if array.shape != type.shape or array.dtype != type.dtype.numpy:
            _fail(graph, i, f"weight '{path}' is {array.dtype}{list(array.shape)}, the param leaf declares {type}")
    return graph
