"""cse: common-subexpression elimination. Pure nodes applying the same op to the same operands with equal
attributes compute the same results; later ones are dropped and their uses read the first one. Constants with
equal dtype, shape and contents merge too. Param and flag leaves are unique per path (the verifier enforces it),
and the path is an attribute, so they never merge.
"""
from __future__ import annotations

from typing import Any

from ..graph import Graph, Node, Value
from ..registry import get_op
from .manager import PassContext, register_pass


@register_pass("cse")
def cse(graph: Graph, ctx: PassContext) -> Graph:
    """Merge structurally equal pure nodes, keeping the first occurrence (and its provenance)."""
    first: dict[tuple[Any, ...], Node] = {}
    sub: dict[str, Value] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        if any(v.name in sub for v in node.inputs):
            node = node.replace(inputs=tuple(sub.get(v.name, v) for v in node.inputs))
        if not get_op(node.op).pure:
            nodes.append(node)
            continue
        key = (node.op, tuple(v.name for v in node.inputs), node.attrs, tuple(v.type for v in node.outputs))
        kept = first.setdefault(key, node)
        if kept is node:
            nodes.append(node)
        else:
            sub.update((old.name, new) for old, new in zip(node.outputs, kept.outputs))
    if sub:
        ctx.note(f"merged {len(graph.nodes) - len(nodes)} node(s)")
    outputs = tuple(sub.get(v.name, v) for v in graph.outputs)
    return graph.replace(nodes=tuple(nodes), outputs=outputs)
