"""Training graphs: a model and its loss traced as one graph, and that graph with its parameter gradients.

    graph = braze.trace_loss(model, loss_fn, x, y)     # loss_fn(model(x), y) as an IR graph, flags kept
    grads = braze.grad_graph(model, loss_fn, x, y)      # + the gradients of every trainable param (ir/autodiff.py)

The batch's last tensor is the target: the model is called on the others, as a torch training loop does. The
model is traced in the mode it is in (its flag nodes record it), so batch norm in training mode adds its running
statistics as buffer-update outputs; nothing in the model changes.
"""
from __future__ import annotations

import types
from typing import Any, Callable

from braze.frontend.nn.module import Module
from braze.frontend.trace import trace
from braze.ir.autodiff import backward_graph
from braze.ir.errors import BrazeError
from braze.ir.graph import Graph


def trace_loss(model: Module, loss_fn: Callable[[Any, Any], Any], *example_batch: Any,
               keep_output: bool = False) -> Graph:
    """`loss_fn(model(*inputs), target)` traced with the model's param and flag leaves; batch = (*inputs, target).
    keep_output=True also makes the model's outputs graph outputs, after the loss (what a step's eval runs)."""
    if not isinstance(model, Module):
        raise BrazeError(f"trace_loss: expected a braze Module, got {type(model).__name__}")
    if len(example_batch) < 2:
        raise BrazeError(f"trace_loss: the example batch holds the model's inputs and then the target; got "
                         f"{len(example_batch)} tensor(s)")

    def loss_of_batch(self: Module, *batch: Any) -> Any:
        output = self(*batch[:-1])
        loss = loss_fn(output, batch[-1])
        return (loss, output) if keep_output else loss

    # a method bound to the model, so the tracer gives its parameters and flags their paths
    return trace(types.MethodType(loss_of_batch, model), *example_batch, name=f"{type(model).__name__}_loss")


def grad_graph(model: Module, loss_fn: Callable[[Any, Any], Any], *example_batch: Any) -> Graph:
    """The traced loss with the gradient of every trainable param it reaches as further outputs."""
    return backward_graph(trace_loss(model, loss_fn, *example_batch))
