"""Compiled training steps: forward, loss, backward and the optimizer's update as one native call.

    step = braze.compile_train_step(model, F.cross_entropy, optimizer, x, y)
    for x, y in batches:
        loss = step(x, y)            # at the optimizer's current lr, betas, momentum (schedulers work)
    step.sync(model)                 # weights, buffers and optimizer state back into the model and optimizer
    outputs = step.eval(x)           # the model in evaluation mode on the weights being trained

The step graph (ir/train_step.py) takes the batch, one seed per dropout and each parameter group's coefficients as
inputs; the executable owns the weights, buffers and optimizer state and writes each call's new values over them.

Quantized bases (QLoRA, quantize_weights) are read packed by default (quantized_weights="packed"): before autodiff,
each float32 linear layer on a frozen quantized weight becomes quantized_linear, with a LoRA adapter's low-rank path
computed beside it (fold_reparameterizations, policy "keep"), so the forward and the input gradient
(quantized_matmul) dequantize inside their kernels and no dense copy of the weight exists between or during steps.
That sums in another order than eager braze, which merges the adapter into the dense weight: equal to float32
rounding. quantized_weights="dense" dequantizes each base into a dense weight every step, as the eager model does.
A float64 model stays dense (the packed kernels compute in float32).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from braze.frontend.creation import default_generator
from braze.frontend.nn.module import Module
from braze.frontend.tensor import Tensor
from braze.ir.autodiff import PARAM_UPDATE, STATE_UPDATE, backward_graph
from braze.ir.errors import BrazeError
from braze.ir.graph import Graph
from braze.ir.passes import optimize
from braze.ir.train_step import (APPLY_ROLE, SEED_ROLE, StepGroup, coefficient_inputs, dropout_seeds_as_inputs,
                                 input_roles, optimizer_step_graph, updated_leaves)
from braze.ir.update_rules import RULES
from braze.step_eval import StepEvaluator
from braze.training import trace_loss

if TYPE_CHECKING:  # codegen loads LLVM: imported on first compile, not with braze
    from braze.runtime.executable import Executable

# the torch-style optimizers a compiled step runs -> their rule in ir/update_rules.py
COMPILED_RULES = {"sgd": "sgd", "adam": "adam", "adamw": "adam"}
QUANTIZED_WEIGHTS = ("packed", "dense")


def train_step_graph(model: Module, loss_fn: Callable[[Any, Any], Any], optimizer: Any, *example_batch: Any,
                     max_norm: float | None = None, accumulate: int = 1, quantized_weights: str = "packed") -> Graph:
    """The traced loss, its gradients and the optimizer's update as one graph (ir/train_step.py: clipping by
    `max_norm`, accumulating over `accumulate` calls; quantized bases read as `quantized_weights` says, module
    doc), with the state the optimizer already holds as the initial values of its state leaves."""
    return _step_and_forward(model, loss_fn, optimizer, example_batch, max_norm, accumulate, quantized_weights)[0]


def differentiated_forward(forward: Graph, quantized_weights: str = "packed") -> Graph:
    """The traced loss graph a step differentiates: `forward` with its frozen quantized linear weights read packed
    ("packed", module doc), or as it is ("dense")."""
    if quantized_weights not in QUANTIZED_WEIGHTS:
        raise BrazeError(f"compile_train_step: quantized_weights must be one of {', '.join(QUANTIZED_WEIGHTS)}, "
                         f"got {quantized_weights!r}")
    if quantized_weights == "dense":
        return forward
    return optimize(forward, ["fold_reparameterizations"], policy="keep", quantized_weights="packed")


def _step_and_forward(model: Module, loss_fn: Callable[[Any, Any], Any], optimizer: Any, example_batch: tuple,
                      max_norm: float | None, accumulate: int, quantized_weights: str) -> tuple[Graph, Graph]:
    """The step graph and the traced forward graph it was built from (loss first, then the model's outputs)."""
    groups = step_groups(optimizer, model)
    forward = dropout_seeds_as_inputs(trace_loss(model, loss_fn, *example_batch, keep_output=True))
    graph = optimizer_step_graph(backward_graph(differentiated_forward(forward, quantized_weights)), groups,
                                 max_norm=max_norm, accumulate=accumulate)
    state = _optimizer_state(optimizer, model)
    return graph.replace(weights={**graph.weights, **{p: state[p] for p in graph.weights if p in state}}), forward


def step_groups(optimizer: Any, model: Module) -> list[StepGroup]:
    """The optimizer's parameter groups as step groups (rule, hyper-parameters, param paths), after refusing
    what a compiled step does not run."""
    name = getattr(getattr(optimizer, "rule", None), "name", None)
    if name not in COMPILED_RULES:
        raise BrazeError(f"compile_train_step: optimizer {type(optimizer).__name__} is not supported (supported: "
                         f"braze.optim.SGD, braze.optim.Adam, braze.optim.AdamW)")
    paths = {id(p): path for path, p in model.named_parameters()}
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    missing = [path for path, p in model.named_parameters() if p.requires_grad and id(p) not in held]
    if missing:  # frozen parameters the optimizer holds get no gradient and stay, as in an eager step
        raise BrazeError(f"compile_train_step: the optimizer does not hold the trainable parameters "
                         f"{', '.join(missing)}; a compiled step updates every parameter it computes a gradient for")
    return [StepGroup(COMPILED_RULES[name], _hyper(optimizer, group),
                      tuple(paths[id(p)] for p in group["params"] if id(p) in paths))
            for group in optimizer.param_groups]


def _hyper(optimizer: Any, group: dict[str, Any]) -> dict[str, Any]:
    """A group's hyper-parameters, checked by the optimizer's own rule config (as an eager step checks them)."""
    return optimizer.rule(**{k: group[k] for k in optimizer.rule.option_names()}).hyperparameters()


def _optimizer_state(optimizer: Any, model: Module) -> dict[str, np.ndarray]:
    """The state arrays the optimizer already holds, keyed by their step-graph leaf paths."""
    state = optimizer.state
    return {f"{path}.{key}": np.asarray(value) for path, p in model.named_parameters() if p in state
            for key, value in state[p].items() if isinstance(value, np.ndarray)}


def _steps_taken(optimizer: Any, model: Module, groups: list[StepGroup]) -> list[int]:
    """Per group, the steps its parameters have taken (SGD: 1 once it has a momentum buffer, which is all its
    arithmetic tells apart); a group whose parameters disagree cannot share one step count."""
    state, by_path = optimizer.state, dict(model.named_parameters())
    counts = []
    for k, group in enumerate(groups):
        seen = set()
        for path in group.paths:
            entry = state.get(by_path[path]) or {}
            seen.add(int(entry.get("step", 1 if entry.get("momentum_buffer") is not None else 0)))
        if len(seen) > 1:
            raise BrazeError(f"compile_train_step: the parameters of group {k} have taken different numbers of "
                             f"steps ({sorted(seen)}); a compiled step keeps one step count per group")
        counts.append(seen.pop() if seen else 0)
    return counts


class TrainStep:
    """A compiled training step: `loss = step(*batch)` runs forward, loss, backward and the update in one native
    call on weights, buffers and optimizer state the executable owns; `step.sync(model)` writes them back.

    The native call writes new values into output buffers, which then become the executable's weights, the buffers
    they replace the next call's outputs (Executable.swap_weights, no copy): a failing call changes nothing. Call a
    step from one thread at a time."""

    def __init__(self, graph: Graph, executable: Executable, optimizer: Any, groups: list[StepGroup],
                 steps: list[int], evaluator: StepEvaluator | None = None) -> None:
        self.graph, self.executable, self.optimizer, self._evaluator = graph, executable, optimizer, evaluator
        self.groups, self.steps = groups, steps
        self.accumulate, self.calls = int(graph.attributes.get("accumulate", 1)), 0
        self._updates = updated_leaves(graph)
        self._roles = input_roles(graph)
        self._coefficients = coefficient_inputs(graph)
        self._structures = [RULES[g.rule].structure(g.hyper) for g in groups]
        self._out: tuple[np.ndarray, ...] | None = None  # the next call's output buffers (None: fresh ones)

    def __call__(self, *batch: Any) -> np.ndarray:
        """One step (with accumulate=k: one micro-batch, the k-th of which updates) on `batch` at the optimizer's
        current hyper-parameters; returns the loss (a rank-0 array)."""
        applies = (self.calls + 1) % self.accumulate == 0
        inputs = self._inputs(batch, applies)
        outputs = self.executable.run(inputs) if self._out is None else self.executable.run(inputs, out=self._out)
        self._take(outputs)
        self.calls += 1
        if applies:
            self.steps = [n + 1 for n in self.steps]
            self.optimizer._opt_called = True  # a scheduler stepped now does not warn, as after opt.step()
        return outputs[0].copy()  # its buffer is the next call's

    def _take(self, outputs: tuple[np.ndarray, ...]) -> None:
        """Make a call's new weights, state and buffers the executable's (swapped in where it can, else copied)."""
        new = {path: outputs[k] for path, k in self._updates.items()}
        swap = getattr(self.executable, "swap_weights", None)
        if swap is None:  # an executable without buffers of its own (the reference interpreter in tests)
            self.executable.write_weights(new)
            return
        freed = swap(new)
        reuse = {k: freed[path] for path, k in self._updates.items()}
        self._out = tuple(reuse.get(k, array) for k, array in enumerate(outputs))

    def eval(self, *inputs: Any) -> Any:
        """The model's output(s) on `inputs` (the batch without its target) in evaluation mode (every flag off)
        with the weights and buffers this step holds now; compiled on first use from the step's traced graph."""
        if self._evaluator is None:
            raise BrazeError("TrainStep.eval: this step was built without its forward graph (use "
                             "braze.compile_train_step)")
        trained = {path for path in self._updates if path in self._evaluator.graph.weights}
        return self._evaluator(self.executable, trained, self.calls, inputs)

    def memory(self) -> dict[str, int | None]:
        """Bytes a step holds, by kind: the trained weights, buffers, optimizer state (with any gradient
        accumulators) and frozen params the executable owns, the arena its memory plan places every forward and
        backward intermediate in ("arena"; "unplanned": one allocation per buffer instead), and one call's inputs
        and outputs; "peak" sums all but "unplanned" (kernels' prepared weight copies and scratch not counted)."""
        plan = self.executable.graph.attributes.get("memory_plan") or {}
        kinds = {PARAM_UPDATE: "weights", "buffer_update:": "buffers", STATE_UPDATE: "optimizer_state"}
        report: dict[str, int | None] = dict.fromkeys(kinds.values(), 0)
        types = {p.path: p.type for p in self.graph.params()}
        for role in self.graph.attributes["outputs"]:
            kind = next((k for k in kinds if role.startswith(k)), None)
            if kind is not None:
                report[kinds[kind]] += types[role[len(kind):]].nbytes
        report["frozen"] = sum(t.nbytes for path, t in types.items() if path not in self._updates)
        report["arena"], report["unplanned"] = plan.get("arena_bytes"), plan.get("naive_bytes")
        report["inputs_and_outputs"] = sum(v.type.nbytes for v in (*self.graph.inputs, *self.graph.outputs))
        report["peak"] = sum(v or 0 for k, v in report.items() if k != "unplanned")
        return report

    def _inputs(self, batch: tuple[Any, ...], applies: bool) -> list[Any]:
        """The call's inputs by role: the batch, a fresh seed per dropout, whether to apply, the coefficients."""
        arrays = [x.detach().numpy() if isinstance(x, Tensor) else x for x in batch]
        if len(arrays) != self._roles.count("batch"):
            raise BrazeError(f"TrainStep: expected a batch of {self._roles.count('batch')} tensor(s) (the model's "
                             f"inputs, then the target), got {len(arrays)}")
        batch_values, coefficients = iter(arrays), self._coefficient_values()
        by_role = {SEED_ROLE: lambda k: np.int64(default_generator.draw_seed()),
                   APPLY_ROLE: lambda k: np.bool_(applies), "batch": lambda k: next(batch_values)}
        return [by_role[role](k) if role in by_role else coefficients[k] for k, role in enumerate(self._roles)]

    def _coefficient_values(self) -> dict[int, np.ndarray]:
        """Each coefficient input's value (by input index) for the coming update, from its group's current
        hyper-parameters."""
        if len(self.optimizer.param_groups) != len(self.groups):
            raise BrazeError(f"TrainStep: the optimizer now has {len(self.optimizer.param_groups)} parameter "
                             f"groups, the compiled step {len(self.groups)}: compile a new step")
        values = []
        for k, (group, current) in enumerate(zip(self.groups, self.optimizer.param_groups)):
            hyper, rule = _hyper(self.optimizer, current), RULES[group.rule]
            if rule.structure(hyper) != self._structures[k]:
                raise BrazeError(f"TrainStep: the hyper-parameters of group {k} changed in a way the compiled step "
                                 f"cannot follow (from {dict(group.hyper)} to {hyper}): compile a new step")
            values.append(rule.coefficients(hyper, float(current["lr"]), self.steps[k] + 1))
        return {k: np.asarray(values[group][name], self.graph.inputs[k].type.dtype.numpy)
                for k, group, name in self._coefficients}

    def sync(self, model: Module) -> None:
        """Write the trained weights and buffers into `model` and the optimizer state into the optimizer, matched
        by ParamId, so the model and a later eager step see what the compiled steps computed."""
        by_id = {int(p.id): p for _, p in model.named_param_slots()}
        leaves = {p.path: p for p in self.graph.params()}
        states = {f"{path}.{name}": (path, name) for g in self.groups for path in g.paths
                  for name in RULES[g.rule].state_arrays(g.hyper)}
        collected: dict[str, dict[str, Any]] = {}
        for role in self.graph.attributes["outputs"]:
            path = role.split(":", 1)[1] if ":" in role else None
            if path is None or (role.startswith(STATE_UPDATE) and path not in states):
                continue  # the loss, and gradient accumulators (mid-accumulation gradients stay in the step)
            param = by_id.get(int(leaves[path].id))
            if param is None:
                raise BrazeError(f"TrainStep.sync: the model has no parameter with id {int(leaves[path].id)} "
                                 f"('{path}')")
            if role.startswith(STATE_UPDATE):
                owner, name = states[path]
                collected.setdefault(owner, {})[name] = self.executable.weight(path)
            else:
                param.assign(self.executable.weight(path))
        self._sync_state(model, collected)

    def _sync_state(self, model: Module, arrays: dict[str, dict[str, Any]]) -> None:
        """The optimizer's state of each trained parameter becomes what its own steps would have left."""
        from braze.frontend.optim.state import ParamState, value_of  # braze.optim: imported when first used
        by_path = dict(model.named_parameters())
        for k, group in enumerate(self.groups):
            for path in group.paths:
                if self.steps[k] == 0 or path not in self._updates:
                    continue
                state = dict(arrays.get(path, {}))
                if group.rule == "adam":
                    state["step"] = self.steps[k]
                param = by_path[path]
                self.optimizer._states[id(param)] = ParamState(self.optimizer.rule.name, value_of(param).device,
                                                               state)


def compile_train_step(model: Module, loss_fn: Callable[[Any, Any], Any], optimizer: Any, *example_batch: Any,
                       max_norm: float | None = None, accumulate: int = 1, threads: int | None = None,
                       quantized_weights: str = "packed") -> TrainStep:
    """Compile `loss_fn(model(*inputs), target)`, its backward pass and `optimizer`'s update as one native call.

    The model is traced in its current mode (train() for batch norm on batch statistics and dropout, whose masks
    come from braze's generator at every call, as eager dropout's do); the step owns copies of the weights,
    buffers and optimizer state and updates them in place; call `step.sync(model)` to write them back.
    Supported: braze.optim.SGD, Adam and AdamW with any parameter groups, reading each group's hyper-parameters
    at every call (schedulers work); a change to a choice the arithmetic branches on (nesterov, maximize, a
    weight decay or momentum becoming zero) needs a new step.

    `max_norm` clips the gradients by their total 2-norm before the update, as torch.nn.utils.clip_grad_norm_.
    `accumulate=k` accumulates over micro-batches: call the step once per micro-batch; every call adds its
    gradient and the k-th applies the update to their mean (torch's loop with `(loss / k).backward()` and one
    `optimizer.step()` per k micro-batches); each call returns its micro-batch's loss.
    `quantized_weights="packed"` (the default) reads frozen quantized bases packed in the forward and backward
    kernels, "dense" dequantizes them into dense weights every step (module doc).
    """
    from braze.runtime.compile_path import compile_graph
    graph, forward = _step_and_forward(model, loss_fn, optimizer, example_batch, max_norm, accumulate,
                                       quantized_weights)
    executable = compile_graph(graph, pipeline="training", threads=threads)
    return step_running(graph, executable, optimizer, model, StepEvaluator(forward, threads))


def step_running(graph: Graph, executable: Any, optimizer: Any, model: Module,
                 evaluator: StepEvaluator | None = None) -> TrainStep:
    """The TrainStep of a step graph run by `executable` (anything with Executable's run, weight and
    write_weights: the reference interpreter in tests), counting on from the optimizer's steps."""
    groups = step_groups(optimizer, model)
    return TrainStep(graph, executable, optimizer, groups, _steps_taken(optimizer, model, groups), evaluator)
