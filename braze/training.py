"""Training graphs: a model and its loss traced as one graph, and that graph with its parameter gradients.

    graph = braze.trace_loss(model, loss_fn, x, y)     # loss_fn(model(x), y) as an IR graph, flags kept
    grads = braze.grad_graph(model, loss_fn, x, y)      # + the gradients of every trainable param (ir/autodiff.py)

The batch's last tensor is the target: the model is called on the others, as a torch training loop does. The
model is traced in the mode it is in (its flag nodes record it), so batch norm in training mode adds its running
statistics as buffer-update outputs; nothing in the model changes.
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from braze.frontend.nn.module import Module
from braze.frontend.optim.state import ParamState, value_of
from braze.frontend.tensor import Tensor
from braze.frontend.trace import trace
from braze.ir.autodiff import backward_graph
from braze.ir.errors import BrazeError
from braze.ir.graph import Graph
from braze.ir.train_step import MOMENTUM, sgd_step_graph, updated_leaves

if TYPE_CHECKING:  # codegen loads LLVM: imported on first compile, not with braze
    from braze.runtime.executable import Executable


def trace_loss(model: Module, loss_fn: Callable[[Any, Any], Any], *example_batch: Any) -> Graph:
    """`loss_fn(model(*inputs), target)` traced with the model's param and flag leaves; batch = (*inputs, target)."""
    if not isinstance(model, Module):
        raise BrazeError(f"trace_loss: expected a braze Module, got {type(model).__name__}")
    if len(example_batch) < 2:
        raise BrazeError(f"trace_loss: the example batch holds the model's inputs and then the target; got "
                         f"{len(example_batch)} tensor(s)")

    def loss_of_batch(self: Module, *batch: Any) -> Any:
        return loss_fn(self(*batch[:-1]), batch[-1])

    # a method bound to the model, so the tracer gives its parameters and flags their paths
    return trace(types.MethodType(loss_of_batch, model), *example_batch, name=f"{type(model).__name__}_loss")


def grad_graph(model: Module, loss_fn: Callable[[Any, Any], Any], *example_batch: Any) -> Graph:
    """The traced loss with the gradient of every trainable param it reaches as further outputs."""
    return backward_graph(trace_loss(model, loss_fn, *example_batch))


def train_step_graph(model: Module, loss_fn: Callable[[Any, Any], Any], optimizer: Any, *example_batch: Any) -> Graph:
    """The traced loss, its gradients and the optimizer's update as one graph (ir/train_step.py), with the
    optimizer's momentum buffers as its state leaves; the learning rate is its last input."""
    options = _sgd_options(optimizer, model)
    graph = sgd_step_graph(grad_graph(model, loss_fn, *example_batch), **options)
    state = _optimizer_state(optimizer, model)
    weights = {**graph.weights, **{path: state[path] for path in graph.weights if path in state}}
    return graph.replace(weights=weights)


def _sgd_options(optimizer: Any, model: Module) -> dict[str, Any]:
    """SGD's hyper-parameters, after refusing what a compiled step does not run (other rules, several groups)."""
    from braze.frontend.optim.rules import SgdConfig
    if getattr(optimizer, "rule", None) is not SgdConfig:
        raise BrazeError(f"compile_train_step: optimizer {type(optimizer).__name__} is not supported yet "
                         f"(supported: braze.optim.SGD)")
    if len(optimizer.param_groups) != 1:
        raise BrazeError(f"compile_train_step: the optimizer has {len(optimizer.param_groups)} parameter groups; "
                         f"a compiled step supports one")
    group = optimizer.param_groups[0]
    held = {id(p) for p in group["params"]}
    missing = [path for path, p in model.named_parameters() if p.requires_grad and id(p) not in held]
    if missing:  # frozen parameters the optimizer holds get no gradient and stay, as in an eager step
        raise BrazeError(f"compile_train_step: the optimizer does not hold the trainable parameters "
                         f"{', '.join(missing)}; a compiled step updates every parameter it computes a gradient for")
    return {k: group[k] for k in ("momentum", "dampening", "weight_decay", "nesterov", "maximize")}


def _optimizer_state(optimizer: Any, model: Module) -> dict[str, np.ndarray]:
    """The momentum buffers the optimizer already holds, keyed by their step-graph leaf paths."""
    state = optimizer.state
    return {path + MOMENTUM: np.asarray(state[p]["momentum_buffer"]) for path, p in model.named_parameters()
            if p in state and state[p].get("momentum_buffer") is not None}


class TrainStep:
    """A compiled training step: `loss = step(*batch)` runs forward, loss, backward and the update in one native
    call on weights, buffers and optimizer state the executable owns; `step.sync(model)` writes them back.

    The native call returns new values as outputs, which are then copied over the executable's weights
    (Executable.write_weights): a failing call changes nothing. Call a step from one thread at a time."""

    def __init__(self, graph: Graph, executable: Executable, optimizer: Any) -> None:
        self.graph, self.executable, self.optimizer = graph, executable, optimizer
        self._updates = updated_leaves(graph)
        self._lr_type = graph.inputs[-1].type

    def __call__(self, *batch: Any) -> np.ndarray:
        """One step on `batch`, at the optimizer's current learning rate; returns the loss (a rank-0 array)."""
        arrays = [x.detach().numpy() if isinstance(x, Tensor) else x for x in batch]
        lr = np.asarray(self.optimizer.param_groups[0]["lr"], dtype=self._lr_type.dtype.numpy)
        outputs = self.executable.run([*arrays, lr])
        self.executable.write_weights({path: outputs[k] for path, k in self._updates.items()})
        return outputs[0]

    def sync(self, model: Module) -> None:
        """Write the trained weights and buffers into `model` and the momentum buffers into the optimizer, matched
        by ParamId, so the model and a later eager step see what the compiled steps computed."""
        by_id = {int(p.id): p for _, p in model.named_param_slots()}
        leaves = {p.path: p for p in self.graph.params()}
        for path in self._updates:
            leaf = leaves[path]
            param = by_id.get(int(leaf.id))
            if param is None:
                raise BrazeError(f"TrainStep.sync: the model has no parameter with id {int(leaf.id)} ('{path}')")
            value = self.executable.weight(path)
            if path.endswith(MOMENTUM):
                _set_momentum(self.optimizer, param, value)
            else:
                param.assign(value)


def _set_momentum(optimizer: Any, param: Any, value: np.ndarray) -> None:
    """The optimizer's state of `param` becomes this momentum buffer, as its own step would have left it."""
    optimizer._states[id(param)] = ParamState("sgd", value_of(param).device, {"momentum_buffer": value})


def compile_train_step(model: Module, loss_fn: Callable[[Any, Any], Any], optimizer: Any, *example_batch: Any,
                       threads: int | None = None) -> TrainStep:
    """Compile `loss_fn(model(*inputs), target)`, its backward pass and `optimizer`'s update as one native call.

    The model is traced in its current mode (train() for batch norm on batch statistics; dropout must be off or
    p=0 for now, as its seed would be fixed); the step owns copies of the weights, buffers and momentum buffers
    and updates them in place; call `step.sync(model)` to write them back. Supported: braze.optim.SGD with one
    parameter group and dampening 0, reading its learning rate at every call (schedulers work).
    """
    from braze.runtime.compile_path import compile_graph
    graph = train_step_graph(model, loss_fn, optimizer, *example_batch)
    _refuse_fixed_dropout(graph)
    return TrainStep(graph, compile_graph(graph, pipeline="training", threads=threads), optimizer)


def _refuse_fixed_dropout(graph: Graph) -> None:
    flags = {f.out.name: f.value for f in graph.flags()}
    for node in graph.ops():
        if node.op == "dropout" and node.attr["p"] > 0.0 and flags.get(node.inputs[1].name, True):
            where = node.loc.module if node.loc is not None else ""
            raise BrazeError(f"compile_train_step: dropout (p={node.attr['p']}) at module '{where}' is in training "
                             f"mode; a compiled step would reuse one mask every step (per-step seeds are not "
                             f"available yet): set p=0 or call eval() on that module")
