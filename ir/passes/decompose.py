"""decompose: every node whose op states a decomposition (OpDef.decomposition) becomes the registered ops that
compose it, with the node's provenance; ops compiled this way (losses, batch norm on batch statistics) need no
kernel of their own. The results have exactly the replaced node's types.
"""
from __future__ import annotations

from ..graph import Graph, Value
from ..registry import get_op
from .manager import PassContext, register_pass
from .rewrite import Match, Rule, apply_rules


def _decomposed(m: Match) -> Value | tuple[Value, ...] | None:
    decomposition = get_op(m.node.op).decomposition
    if decomposition is None:
        return None
    return decomposition(m.e, *m.node.inputs, **m.node.attr)


@register_pass("decompose")
def decompose(graph: Graph, ctx: PassContext) -> Graph:
    """Replace the nodes of ops with a decomposition by it (see the module doc)."""
    decomposed = sorted({n.op for n in graph.ops() if get_op(n.op).decomposition is not None})
    if decomposed:
        ctx.note(f"decomposed {', '.join(decomposed)}")
    return apply_rules(graph, [Rule(None, _decomposed, "decomposition")])
