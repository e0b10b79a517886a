"""Graph-level autodiff: a forward-plus-loss graph to one graph computing the loss and its parameter gradients.

`backward_graph(graph)` copies the forward nodes unchanged and appends the backward pass: the registry's VJP rules
applied in reverse order through a GraphBuilder (the same rules eager autodiff runs through a TensorEmitter), so
the backward nodes are ordinary registered ops. Cotangents flow only into values that depend on a trainable
`param` leaf (trainable=true, not a buffer): frozen LoRA bases, frozen groups, buffers, flags and constants get
none, and nothing is emitted for them. A trainable param the loss does not reach gets no gradient (as torch's
`.grad` stays None). Backward nodes carry the provenance of the forward node they differentiate.

The result's outputs are the loss, then one gradient per reached trainable param in graph order, then the forward
graph's buffer updates; meta "outputs" gives their roles: "output", "gradient:<path>", "buffer_update:<path>".
Flags stay flag leaves, so the graph serves either mode until specialize_flags fixes them.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .builder import GraphBuilder
from .errors import BrazeError
from .graph import Graph, Node, Value
from .passes.manager import optimize
from .registry import get_op

GRADIENT_ROLE = "gradient:"
# the output roles of a training graph: gradients, and a training step's new weights and optimizer state
PARAM_UPDATE, STATE_UPDATE = "param_update:", "state_update:"
TRAINING_ROLES = (GRADIENT_ROLE, PARAM_UPDATE, STATE_UPDATE)


def is_training_graph(graph: Graph) -> bool:
    """Whether some output of the graph is a gradient or a training step's update (meta "outputs" roles)."""
    roles = graph.attributes.get("outputs", ())
    return any(isinstance(role, str) and role.startswith(TRAINING_ROLES) for role in roles)


def trainable_params(graph: Graph) -> list[tuple[str, Value]]:
    """(path, value) of the graph's trainable parameters (not buffers), in graph order."""
    return [(p.path, p.out) for p in graph.params() if p.trainable and not p.buffer]


def gradient_paths(graph: Graph) -> dict[str, int]:
    """Param path -> output index of its gradient in a graph backward_graph built."""
    roles = graph.attributes.get("outputs", ())
    return {role[len(GRADIENT_ROLE):]: k for k, role in enumerate(roles) if role.startswith(GRADIENT_ROLE)}


def backward_graph(graph: Graph, loss: int = 0) -> Graph:
    """The forward graph followed by the gradients of output `loss` (a float scalar) for every trainable param
    it reaches (see the module doc); raises a BrazeError naming the op and module of a node without a VJP rule."""
    seed_value = _loss_value(graph, loss)
    active = _active_values(graph)
    builder = GraphBuilder(graph.name)
    for value in graph.inputs:
        builder.input(value.name, value.type)
    for node in graph.nodes:
        builder.append(node)
    cotangents: dict[str, Value] = {}
    if seed_value.name in active:
        builder.loc = getattr(graph.producer(seed_value), "loc", None)
        cotangents[seed_value.name] = builder.constant(np.ones((), dtype=seed_value.dtype.numpy))
    for node in reversed(graph.nodes):
        _propagate(builder, node, cotangents, active)
    grads = [(path, cotangents[value.name]) for path, value in trainable_params(graph) if value.name in cotangents]
    updates = _buffer_updates(graph)
    roles = ["output"] + [GRADIENT_ROLE + path for path, _ in grads] + [role for role, _ in updates]
    outputs = [seed_value] + [g for _, g in grads] + [v for _, v in updates]
    meta = {**graph.attributes, "outputs": roles}
    # the rules also emit gradients no output reads (of frozen operands, of the mode a flag does not select)
    return optimize(builder.finish(outputs, attributes=meta, weights=graph.weights), ("dce",))


def _loss_value(graph: Graph, loss: int) -> Value:
    if not 0 <= loss < len(graph.outputs):
        raise BrazeError(f"backward_graph: graph @{graph.name} has {len(graph.outputs)} output(s); no output {loss}")
    value = graph.outputs[loss]
    if value.shape != () or not value.dtype.is_float:
        raise BrazeError(f"backward_graph: the loss (output {loss} of graph @{graph.name}) must be a float scalar, "
                         f"got {value.type}; reduce it (mean, sum) first")
    return value


def _active_values(graph: Graph) -> set[str]:
    """Names of the values that depend on a trainable param: the only ones that need a cotangent."""
    active = {value.name for _, value in trainable_params(graph)}
    for node in graph.nodes:
        if any(v.name in active for v in node.inputs):
            active.update(v.name for v in node.outputs if v.dtype.is_float)
    return active


def _buffer_updates(graph: Graph) -> list[tuple[str, Value]]:
    roles = graph.attributes.get("outputs", ["output"] * len(graph.outputs))
    return [(role, value) for role, value in zip(roles, graph.outputs) if role.startswith("buffer_update:")]


def _propagate(builder: GraphBuilder, node: Node, cotangents: dict[str, Value], active: set[str]) -> None:
    """Apply the node's VJP to its results' cotangents and add the gradients of its active operands."""
    cots = [cotangents.get(v.name) for v in node.outputs]
    if all(c is None for c in cots) or not any(v.name in active for v in node.inputs):
        return
    op = get_op(node.op)
    if op.vjp is None:
        where = f" (module '{node.loc.module}')" if node.loc is not None and node.loc.module else ""
        detail = f" at {node.loc}" if node.loc is not None and node.loc.file else ""
        raise BrazeError(f"backward_graph: op {node.op!r}{where}{detail} has no vjp rule, so the gradient of "
                         f"{', '.join(f'%{v.name}' for v in node.outputs)} cannot be computed")
    builder.loc = node.loc
    grads = _call_vjp(builder, node, cots)
    for operand, grad in zip(node.inputs, grads):
        if grad is None or operand.name not in active:
            continue
        if grad.type != operand.type:
            raise BrazeError(f"{node.op}: the vjp rule returned a gradient of type {grad.type} for operand "
                             f"%{operand.name}: {operand.type} (an op-definition bug)")
        prev = cotangents.get(operand.name)
        cotangents[operand.name] = grad if prev is None else builder.add(prev, grad)


def _call_vjp(builder: GraphBuilder, node: Node, cots: Sequence[Value | None]) -> tuple[Any, ...]:
    """The op's VJP on graph values: single values for one-result ops, tuples (None for unused) otherwise."""
    op = get_op(node.op)
    if op.num_results == 1:
        g, out = cots[0], node.outputs[0]
    else:
        g, out = tuple(cots), node.outputs
    grads = op.vjp(builder, g, out, *node.inputs, **node.attr)
    if len(grads) != len(node.inputs):
        raise BrazeError(f"{node.op}: the vjp rule returned {len(grads)} gradients for {len(node.inputs)} operands "
                         f"(an op-definition bug)")
    return tuple(grads)
