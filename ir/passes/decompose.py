"""decompose: replace every node whose op states a decomposition (the registry's `decompose` trait) by the
registered ops it is written with, so codegen compiles ops such as the losses from kernels that exist.

Runs before constant folding and fusion, which then see the parts; the replacement has the node's types and loc.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from ..graph import Graph, Value
from ..registry import get_op
from .manager import PassContext, register_pass
from .rewrite import Match, apply_rules, rule


@rule(None)
def decomposed(m: Match) -> Value | Sequence[Value] | None:
    """The node written with the registered ops of its op's decomposition, if it has one."""
    decompose = get_op(m.node.op).decompose
    return None if decompose is None else decompose(m.e, *m.node.inputs, **m.node.attr)


@register_pass("decompose")
def decompose(graph: Graph, ctx: PassContext) -> Graph:
    """Replace each node of an op with a decomposition by its parts; a graph without such nodes is unchanged."""
    ops: Counter[str] = Counter(n.op for n in graph.nodes if get_op(n.op).decompose is not None)
    if not ops:
        return graph
    ctx.note("decomposed: " + ", ".join(f"{op} x{count}" for op, count in sorted(ops.items())))
    return apply_rules(graph, [decomposed])
