"""One training step as one graph: a graph with gradients (ir/autodiff.py) followed by the optimizer's update.

`optimizer_step_graph(graph, groups)` applies each group's update rule (ir/update_rules.py, the rules the eager
optimizers run) to the gradients of the group's params. Per group it adds rank-0 call inputs for the coefficients
the rule's tensor arithmetic reads (named "group<k>.<coefficient>", in the params' dtype): the host computes
them at every call from the group's current lr, betas, momentum and step count, so schedulers need no recompile.
Per trained param it adds one `param` leaf per state array (buffer=true, path "<param path>.<state name>", the
param's id), which starts at zero as torch's state does. The update ops are elementwise and fuse per param.

Options: `max_norm` clips the gradients by their total norm first (torch's clip_grad_norm_: the norm of the
per-gradient norms, scale min(1, max_norm / (norm + 1e-6))). `accumulate=k` adds a bool input "apply" and one
accumulator leaf per param ("<path>.grad_accumulator"): every call adds its gradient, the update reads their mean
(the gradient of torch's loop over k micro-batches with loss / k) and applies only when "apply" is true, which
also empties the accumulators; otherwise weights and state keep their values.

Outputs: the loss (role "output"), each new weight ("param_update:<path>"), each new state array
("state_update:<path>.<state name>", accumulators included), then the graph's buffer updates; the gradients are
no longer outputs. Meta "inputs" gives each input's role: "batch" and "seed" (dropout_seeds_as_inputs) for the
graph's own, "apply" and "coefficient:<k>.<name>" for the added ones; meta "accumulate" holds k. The new values
are written back into the leaves they replace by whoever runs the step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .autodiff import PARAM_UPDATE, STATE_UPDATE, gradient_paths
from .builder import GraphBuilder
from .errors import BrazeError
from .graph import Graph, ParamLeaf, Value
from .types import DType, TensorType, bool_
from .update_rules import RULES

COEFFICIENT_ROLE, SEED_ROLE, APPLY_ROLE = "coefficient:", "seed", "apply"
ACCUMULATOR = "grad_accumulator"  # the state name of a gradient accumulated over micro-batches


@dataclass(frozen=True)
class StepGroup:
    """One parameter group: its rule (a name in update_rules.RULES), hyper-parameters and param paths."""

    rule: str
    hyper: Mapping[str, Any]
    paths: tuple[str, ...]


class _Coefficients(Mapping[str, Value]):
    """A group's coefficients as graph inputs, each created when the rule first reads it."""

    def __init__(self, builder: GraphBuilder, index: int, dtype: DType, names: Sequence[str], taken: set[str]) -> None:
        self._builder, self._index, self._dtype, self._names = builder, index, dtype, tuple(names)
        self._taken = taken  # every value name of the graph, shared by the groups
        self.values: dict[str, Value] = {}

    def __getitem__(self, name: str) -> Value:
        if name not in self._names:
            raise KeyError(name)
        if name not in self.values:
            fresh = _fresh(f"group{self._index}.{name}", self._taken)
            self._taken.add(fresh)
            self.values[name] = self._builder.input(fresh, TensorType((), self._dtype))
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def optimizer_step_graph(graph: Graph, groups: Sequence[StepGroup], *, max_norm: float | None = None,
                         accumulate: int = 1) -> Graph:
    """The graph with gradients followed by each group's update of the params it has gradients for (module doc);
    `max_norm` clips the gradients by their total norm first, `accumulate` > 1 sums gradients over that many
    calls and updates on the last of them."""
    grads = gradient_paths(graph)
    if not grads:
        raise BrazeError(f"optimizer_step_graph: graph @{graph.name} has no gradient outputs (build it with "
                         f"ir.autodiff.backward_graph, and train at least one param)")
    _check_options(max_norm, accumulate)
    b = GraphBuilder(graph.name)
    for value in graph.inputs:
        b.input(value.name, value.type)
    for node in graph.nodes:
        b.append(node)
    leaves = {p.path: p for p in graph.params()}
    weights, roles_in = dict(graph.weights), input_roles(graph)
    taken = {v.name for v in graph.inputs} | {v.name for n in graph.nodes for v in n.outputs}
    apply = None
    if accumulate > 1:
        apply = b.input(_fresh("apply", taken), TensorType((), bool_))
        roles_in.append(APPLY_ROLE)
    used, accumulators = _accumulated(b, graph, grads, leaves, weights, accumulate, apply)
    if max_norm is not None:
        used = _clipped(b, used, max_norm)
    updates, states = [], []
    for k, group in enumerate(groups):
        trained = [path for path in group.paths if path in grads]
        if not trained:
            continue
        rule = RULES[group.rule]
        coefficients = _Coefficients(b, k, _group_dtype(trained, leaves), rule.coefficients(group.hyper, 0.0, 1),
                                     taken)
        for path in trained:
            leaf = leaves[path]
            b.loc = _loc_of(graph, graph.outputs[grads[path]])
            state = {name: _state_leaf(b, leaf, name, weights) for name in rule.state_arrays(group.hyper)}
            new_param, new_state = rule.update(b, group.hyper, coefficients, leaf.out, used[path], state)
            updates.append((PARAM_UPDATE + path, _unless_skipped(b, apply, new_param, leaf.out)))
            states += [(f"{STATE_UPDATE}{path}.{name}", _unless_skipped(b, apply, value, state[name]))
                       for name, value in new_state.items()]
        roles_in += [f"{COEFFICIENT_ROLE}{k}.{name}" for name in coefficients.values]
    buffers = [(role, v) for role, v in zip(graph.attributes["outputs"], graph.outputs)
               if role.startswith("buffer_update:")]
    produced = [("output", graph.outputs[0]), *updates, *states, *accumulators, *buffers]
    meta = {**graph.attributes, "outputs": [role for role, _ in produced], "inputs": roles_in,
            "accumulate": accumulate}
    return b.finish([v for _, v in produced], attributes=meta, weights=weights).renumbered()


def _check_options(max_norm: float | None, accumulate: int) -> None:
    if max_norm is not None and not (isinstance(max_norm, (int, float)) and max_norm > 0):
        raise BrazeError(f"optimizer_step_graph: max_norm must be a number > 0 or None, got {max_norm!r}")
    if isinstance(accumulate, bool) or not isinstance(accumulate, int) or accumulate < 1:
        raise BrazeError(f"optimizer_step_graph: accumulate must be an int >= 1, got {accumulate!r}")


def _loc_of(graph: Graph, value: Value) -> Any:
    producer = graph.producer(value)
    return producer.loc if producer is not None else None


def _state_leaf(b: GraphBuilder, leaf: ParamLeaf, name: str, weights: dict[str, np.ndarray]) -> Value:
    """The leaf of state array `name` of a param (zeros unless `weights` already holds it)."""
    path = f"{leaf.path}.{name}"
    weights.setdefault(path, np.zeros(leaf.type.shape, leaf.type.dtype.numpy))
    return b.param(path, leaf.type, id=int(leaf.id), trainable=False, buffer=True)


def _accumulated(b: GraphBuilder, graph: Graph, grads: Mapping[str, int], leaves: Mapping[str, ParamLeaf],
                 weights: dict[str, np.ndarray], accumulate: int,
                 apply: Value | None) -> tuple[dict[str, Value], list[tuple[str, Value]]]:
    """The gradient each update reads: this call's, or the mean of the last `accumulate` calls' (each call adds
    its gradient to an accumulator leaf, emptied when the update applies), and the accumulators' new values."""
    used = {path: graph.outputs[k] for path, k in grads.items()}
    if apply is None:
        return used, []
    accumulators = []
    for path, grad in used.items():
        b.loc = _loc_of(graph, grad)
        total = b.add(_state_leaf(b, leaves[path], ACCUMULATOR, weights), grad)
        used[path] = b.mul(total, 1.0 / accumulate)
        accumulators.append((f"{STATE_UPDATE}{path}.{ACCUMULATOR}", b.where(apply, b.scalar(0.0, total), total)))
    return used, accumulators


def _clipped(b: GraphBuilder, grads: dict[str, Value], max_norm: float) -> dict[str, Value]:
    """The gradients scaled by min(1, max_norm / (total norm + 1e-6)), the total norm being the norm of the
    per-gradient 2-norms (torch.nn.utils.clip_grad_norm_)."""
    norms = [b.sqrt(b.sum(b.mul(g, g), axes=None, keepdim=False)) for g in grads.values()]
    dtype = norms[0].dtype
    norms = [n if n.dtype == dtype else b.cast(n, dtype=dtype) for n in norms]
    squares = b.mul(norms[0], norms[0])
    for n in norms[1:]:
        squares = b.add(squares, b.mul(n, n))
    coef = b.minimum(b.div(max_norm, b.add(b.sqrt(squares), 1e-6)), 1.0)
    return {path: b.mul(g, coef if g.dtype == dtype else b.cast(coef, dtype=g.dtype)) for path, g in grads.items()}


def _unless_skipped(b: GraphBuilder, apply: Value | None, new: Value, old: Value) -> Value:
    """The new value, or (accumulating) the old one on calls that only add to the accumulators."""
    return new if apply is None else b.where(apply, new, old)


def _group_dtype(paths: Sequence[str], leaves: Mapping[str, ParamLeaf]) -> DType:
    dtypes = {leaves[path].type.dtype for path in paths}
    if len(dtypes) != 1:
        raise BrazeError(f"optimizer_step_graph: a parameter group mixes dtypes {sorted(d.name for d in dtypes)}; "
                         f"a compiled step needs one dtype per group (give each dtype its own group)")
    return dtypes.pop()


def _fresh(name: str, taken: set[str]) -> str:
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    return candidate


def coefficient_inputs(graph: Graph) -> list[tuple[int, int, str]]:
    """(input index, group index, coefficient name) of each coefficient input of a step graph."""
    roles: Sequence[str] = graph.attributes.get("inputs", ())
    found = []
    for k, role in enumerate(roles):
        if role.startswith(COEFFICIENT_ROLE):
            group, name = role[len(COEFFICIENT_ROLE):].split(".", 1)
            found.append((k, int(group), name))
    return found


def updated_leaves(graph: Graph) -> dict[str, int]:
    """Leaf path -> the output index of its new value in a step graph: params, optimizer state, buffers."""
    roles: Sequence[str] = graph.attributes.get("outputs", ())
    prefixes = (PARAM_UPDATE, STATE_UPDATE, "buffer_update:")
    return {role.split(":", 1)[1]: k for k, role in enumerate(roles) if role.startswith(prefixes)}


def dropout_seeds_as_inputs(graph: Graph) -> Graph:
    """The graph with each constant seed of a dropout (p > 0) turned into an i64[] input (role "seed", after the
    graph's own inputs, in graph order, named "<module path>.seed"), so each call of a step can draw new masks."""
    producers = graph.producers
    taken = {v.name for v in graph.inputs} | {v.name for n in graph.nodes for v in n.outputs}
    seeds: dict[str, Value] = {}
    for node in graph.ops():
        source = producers.get(node.inputs[2].name) if node.op == "dropout" and node.attr["p"] > 0.0 else None
        if source is not None and source.op == "constant" and source.out.name not in seeds:
            module = node.loc.module if node.loc is not None and node.loc.module else ""
            name = _fresh(f"{module}.seed" if module else "seed", taken)
            taken.add(name)
            seeds[source.out.name] = Value(name, source.out.type)
    if not seeds:
        return graph
    nodes = tuple(n.replace(inputs=tuple(seeds.get(v.name, v) for v in n.inputs)) for n in graph.nodes
                  if not (n.op == "constant" and n.out.name in seeds))
    meta = {**graph.attributes, "inputs": input_roles(graph) + [SEED_ROLE] * len(seeds)}
    return graph.replace(inputs=(*graph.inputs, *seeds.values()), nodes=nodes, attributes=meta).renumbered()


def input_roles(graph: Graph) -> list[str]:
    """The role of each input of a training graph: "batch", "seed" or "coefficient:<group>.<name>"."""
    return list(graph.attributes.get("inputs", ["batch"] * len(graph.inputs)))
