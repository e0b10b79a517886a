"""drop_buffer_updates: the graph without its buffer-update outputs; the head of the inference pipeline.

A traced module returns its forward outputs (meta "outputs" role "output") followed by the new values of the
buffers its forward assigned (role "buffer_update:<path>": batch norm's running statistics). Inference reads
buffers and never writes them, so this pass drops those outputs with their roles, and the nodes only they read.
A graph without roles, or with forward outputs only, is returned as it is, and so is a training graph (one with
gradient or update outputs, ir/autodiff.py): a training step writes its buffer updates back. Roles
that do not match the outputs one to one are refused.
"""
from __future__ import annotations

from ..autodiff import is_training_graph
from ..errors import VerifyError
from ..graph import Graph
from .manager import PassContext, register_pass
from .rewrite import finalize


@register_pass("drop_buffer_updates")
def drop_buffer_updates(graph: Graph, ctx: PassContext) -> Graph:
    """Keep only the outputs whose role is "output"; what no output reads any more goes with the others."""
    roles = graph.attributes.get("outputs")
    if roles is None:
        return graph
    if not isinstance(roles, (list, tuple)) or len(roles) != len(graph.outputs) or not all(
            isinstance(role, str) for role in roles):
        raise VerifyError(f"graph @{graph.name}: meta 'outputs' must hold one role string per output "
                          f"({len(graph.outputs)}), got {roles!r}")
    if all(role == "output" for role in roles) or is_training_graph(graph):
        return graph
    keep = [k for k, role in enumerate(roles) if role == "output"]
    dropped = [role.split(":", 1)[-1] for role in roles if role != "output"]
    ctx.note(f"dropped {len(dropped)} buffer update(s): {', '.join(dropped)}")
    meta = {**graph.attributes, "outputs": ["output"] * len(keep)}
    return finalize(graph.replace(outputs=tuple(graph.outputs[k] for k in keep), attributes=meta), graph)
