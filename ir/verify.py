"""The verifier: SSA, topological order, op schemas, types that agree with inference, well-formed leaves."""
from __future__ import annotations

from .errors import BrazeError, VerifyError
from .graph import Graph, Node
from .printer import format_node
from .registry import get_op
from .types import TensorType, bool_


def _fail(graph: Graph, index: int | None, message: str) -> None:
    """Raise VerifyError naming the node and showing the lines around it."""
    if index is None:
        raise VerifyError(f"graph @{graph.name}: {message}")
    lo, hi = max(index - 2, 0), min(index + 3, len(graph.nodes))
    context = "\n".join(("> " if i == index else "  ") + format_node(graph.nodes[i]) for i in range(lo, hi))
    raise VerifyError(f"graph @{graph.name}, node {index} ({graph.nodes[index].op}): {message}\n{context}")


def _check_leaf(graph: Graph, i: int, node: Node, seen_paths: dict[str, set[str]]) -> None:
    if node.inputs or len(node.outputs) != 1:
        _fail(graph, i, f"a {node.op} leaf takes no operands and has one result")
    if node.op == "flag" and node.out.type != TensorType((), bool_):
        _fail(graph, i, f"a flag has type bool[], not {node.out.type}")
    path = node.attr["path"]
    if path in seen_paths.setdefault(node.op, set()):
        _fail(graph, i, f"{node.op} path '{path}' appears twice")
    seen_paths[node.op].add(path)


def verify_node(graph: Graph, i: int, node: Node) -> None:
    """Schema and type checks of one node against the registry."""
    try:
        op = get_op(node.op)
        checked = op.check_attrs(node.attr)
        if checked != node.attr:
            _fail(graph, i, "attributes are not in normalized form (build nodes through GraphBuilder)")
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


def verify(graph: Graph) -> Graph:
    """Check every IR rule; returns the graph unchanged or raises VerifyError naming the bad node."""
    defined: dict[str, TensorType] = {}
    for v in graph.inputs:
        if v.name in defined:
            _fail(graph, None, f"input %{v.name} is declared twice")
        defined[v.name] = v.type
    seen_paths: dict[str, set[str]] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v.name not in defined:
                _fail(graph, i, f"operand %{v.name} is not defined before this node (SSA and topological order)")
            if defined[v.name] != v.type:
                _fail(graph, i, f"operand %{v.name} is used as {v.type} but defined as {defined[v.name]}")
        verify_node(graph, i, node)
        if node.op in ("param", "flag"):
            _check_leaf(graph, i, node, seen_paths)
        for v in node.outputs:
            if v.name in defined:
                _fail(graph, i, f"value %{v.name} is defined twice")
            defined[v.name] = v.type
    for v in graph.outputs:
        if v.name not in defined or defined[v.name] != v.type:
            _fail(graph, None, f"output %{v.name}: {v.type} is not a value of the graph")
    _verify_weights(graph)
    return graph


def _verify_weights(graph: Graph) -> None:
    """When a graph carries weights, each param leaf has one of its declared type."""
    if not graph.weights:
        return
    for leaf in graph.params():
        array = graph.weights.get(leaf.path)
        if array is None:
            _fail(graph, None, f"param '{leaf.path}' has no value in the graph's weights")
        if tuple(array.shape) != leaf.type.shape or array.dtype != leaf.type.dtype.numpy:
            _fail(graph, None, f"weight '{leaf.path}' is {array.dtype}{list(array.shape)}, the param leaf "
                               f"declares {leaf.type}")
