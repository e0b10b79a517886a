"""One training step as one graph: a graph with gradients (ir/autodiff.py) followed by torch.optim.SGD's update.

`sgd_step_graph(graph, ...)` adds a rank-0 input `lr` (the learning rate, a call input so a scheduler needs no
recompile) and, with momentum, one `param` leaf per trained param holding its momentum buffer (buffer=true, path
"<param path>.momentum_buffer", the param's id). For each gradient it emits torch's single-tensor SGD rule as
elementwise ops, which fuse into one kernel per param:

    g = -grad if maximize else grad;  g = g + weight_decay * w
    buf = momentum * buf + g                  (dampening 0: a zero buffer makes torch's first step buf = g)
    g = g + momentum * buf if nesterov else buf
    w = w - lr * g

Outputs: the loss (role "output"), each new weight ("param_update:<path>"), each new momentum buffer
("state_update:<path>.momentum_buffer"), then the graph's buffer updates; the gradients themselves are no longer
outputs. The new values are written back into the leaves they replace by whoever runs the step.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .autodiff import PARAM_UPDATE, STATE_UPDATE, gradient_paths
from .builder import GraphBuilder
from .errors import BrazeError
from .graph import Graph, Value
from .types import TensorType

MOMENTUM = ".momentum_buffer"


def _check_sgd(momentum: float, dampening: float, weight_decay: float, nesterov: bool) -> None:
    if dampening != 0.0:
        raise BrazeError(f"sgd_step_graph: dampening={dampening} is not supported in a compiled step (supported: "
                         f"0.0); torch's first step skips the dampening, which a zero momentum buffer cannot express")
    if momentum < 0.0 or weight_decay < 0.0:
        raise BrazeError(f"sgd_step_graph: momentum and weight_decay must be >= 0, got {momentum}, {weight_decay}")
    if nesterov and momentum <= 0.0:
        raise BrazeError("sgd_step_graph: nesterov=True needs a momentum > 0")


def sgd_step_graph(graph: Graph, *, momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
                   nesterov: bool = False, maximize: bool = False) -> Graph:
    """The graph with gradients followed by the SGD update of every param it has a gradient for (module doc)."""
    _check_sgd(momentum, dampening, weight_decay, nesterov)
    grads = gradient_paths(graph)
    if not grads:
        raise BrazeError(f"sgd_step_graph: graph @{graph.name} has no gradient outputs (build it with "
                         f"ir.autodiff.backward_graph, and train at least one param)")
    b = GraphBuilder(graph.name)
    for value in graph.inputs:
        b.input(value.name, value.type)
    loss = graph.outputs[0]
    lr = b.input(_fresh_input(graph, "lr"), TensorType((), loss.dtype))
    for node in graph.nodes:
        b.append(node)
    leaves = {p.path: p for p in graph.params()}
    weights = dict(graph.weights)
    roles, outputs = ["output"], [loss]
    states: list[tuple[str, Value]] = []
    for path, k in grads.items():
        leaf, grad = leaves[path], graph.outputs[k]
        b.loc = graph.producer(grad).loc if graph.producer(grad) is not None else None
        g = b.neg(grad) if maximize else grad
        if weight_decay:
            g = b.add(g, b.mul(leaf.out, weight_decay))
        if momentum:
            state = path + MOMENTUM
            buf = b.add(b.mul(b.param(state, leaf.type, id=leaf.id, trainable=False, buffer=True), momentum), g)
            weights.setdefault(state, np.zeros(leaf.type.shape, leaf.type.dtype.numpy))
            states.append((STATE_UPDATE + state, buf))
            g = b.add(g, b.mul(buf, momentum)) if nesterov else buf
        roles.append(PARAM_UPDATE + path)
        outputs.append(b.sub(leaf.out, b.mul(g, lr)))
    updates = [(role, v) for role, v in zip(graph.attributes["outputs"], graph.outputs)
               if role.startswith("buffer_update:")]
    roles += [role for role, _ in states] + [role for role, _ in updates]
    outputs += [v for _, v in states] + [v for _, v in updates]
    meta = {**graph.attributes, "outputs": roles}
    return b.finish(outputs, attributes=meta, weights=weights).renumbered()


def _fresh_input(graph: Graph, name: str) -> str:
    taken = {v.name for v in graph.inputs} | {v.name for n in graph.nodes for v in n.outputs}
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    return candidate


def updated_leaves(graph: Graph) -> dict[str, int]:
    """Leaf path -> the output index of its new value in a step graph: params, optimizer state, buffers."""
    roles: Sequence[str] = graph.attributes.get("outputs", ())
    prefixes = (PARAM_UPDATE, STATE_UPDATE, "buffer_update:")
    return {role.split(":", 1)[1]: k for k, role in enumerate(roles) if role.startswith(prefixes)}
