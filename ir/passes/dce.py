"""dce: dead-code elimination. Pure nodes none of whose results reach a graph output disappear, leaves included:
unused param, flag and constant leaves go (and the weights of dropped params leave the graph's weights mapping).
Graph inputs and outputs are unchanged, so the graph's signature is kept.
"""
from __future__ import annotations

from ..graph import Graph, Node
from ..registry import get_op
from .manager import PassContext, register_pass
from .rewrite import with_weights


@register_pass("dce")
def dce(graph: Graph, ctx: PassContext) -> Graph:
    """Keep exactly the nodes an output depends on (and impure nodes with what they read)."""
    live = {v.name for v in graph.outputs}
    keep: list[Node] = []
    for node in reversed(graph.nodes):
        if any(v.name in live for v in node.outputs) or not get_op(node.op).pure:
            keep.append(node)
            live.update(v.name for v in node.inputs)
    removed = len(graph.nodes) - len(keep)
    if removed:
        dropped = [p.path for p in graph.params() if p.out.name not in live]
        ctx.note(f"removed {removed} node(s)" + (f", params: {', '.join(dropped)}" if dropped else ""))
    return with_weights(graph.replace(nodes=tuple(reversed(keep))), graph.weights)
