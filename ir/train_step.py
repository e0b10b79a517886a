"""One training step as one graph: a graph with gradients (ir/autodiff.py) followed by the optimizer's update.

`optimizer_step_graph(graph, groups)` applies each group's update rule (ir/update_rules.py, the rules the eager
optimizers run) to the gradients of the group's params. Per group it adds rank-0 call inputs for the coefficients
the rule's tensor arithmetic reads (named "group<k>.<coefficient>", in the params' dtype): the host computes
them at every call from the group's current lr, betas, momentum and step count, so schedulers need no recompile.
Per trained param it adds one `param` leaf per state array (buffer=true, path "<param path>.<state name>", the
param's id), which starts at zero as torch's state does. The update ops are elementwise and fuse per param.

Outputs: the loss (role "output"), each new weight ("param_update:<path>"), each new state array
("state_update:<path>.<state name>"), then the graph's buffer updates; the gradients are no longer outputs. Meta
"inputs" gives each input's role: "batch" and "seed" (dropout_seeds_as_inputs) for the graph's own, "coefficient:<k>.<name>" for the added ones. The
new values are written back into the leaves they replace by whoever runs the step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .autodiff import PARAM_UPDATE, STATE_UPDATE, gradient_paths
from .builder import GraphBuilder
from .errors import BrazeError
from .graph import Graph, ParamLeaf, Value
from .types import DType, TensorType
from .update_rules import RULES

COEFFICIENT_ROLE, SEED_ROLE = "coefficient:", "seed"


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

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def optimizer_step_graph(graph: Graph, groups: Sequence[StepGroup]) -> Graph:
    """The graph with gradients followed by each group's update of the params it has gradients for (module doc)."""
    grads = gradient_paths(graph)
    if not grads:
        raise BrazeError(f"optimizer_step_graph: graph @{graph.name} has no gradient outputs (build it with "
                         f"ir.autodiff.backward_graph, and train at least one param)")
    b = GraphBuilder(graph.name)
    for value in graph.inputs:
        b.input(value.name, value.type)
    for node in graph.nodes:
        b.append(node)
    leaves = {p.path: p for p in graph.params()}
    weights, roles, outputs = dict(graph.weights), ["output"], [graph.outputs[0]]
    states: list[tuple[str, Value]] = []
    roles_in = input_roles(graph)
    taken = {v.name for v in graph.inputs} | {v.name for n in graph.nodes for v in n.outputs}
    for k, group in enumerate(groups):
        trained = [path for path in group.paths if path in grads]
        if not trained:
            continue
        rule = RULES[group.rule]
        coefficients = _Coefficients(b, k, _group_dtype(trained, leaves), rule.coefficients(group.hyper, 0.0, 1),
                                     taken)
        for path in trained:
            leaf, grad = leaves[path], graph.outputs[grads[path]]
            b.loc = graph.producer(grad).loc if graph.producer(grad) is not None else None
            state = {}
            for name in rule.state_arrays(group.hyper):
                state[name] = b.param(path + "." + name, leaf.type, id=int(leaf.id), trainable=False, buffer=True)
                weights.setdefault(path + "." + name, np.zeros(leaf.type.shape, leaf.type.dtype.numpy))
            new_param, new_state = rule.update(b, group.hyper, coefficients, leaf.out, grad, state)
            roles.append(PARAM_UPDATE + path)
            outputs.append(new_param)
            states += [(STATE_UPDATE + path + "." + name, value) for name, value in new_state.items()]
        roles_in += [f"{COEFFICIENT_ROLE}{k}.{name}" for name in coefficients.values]
    updates = [(role, v) for role, v in zip(graph.attributes["outputs"], graph.outputs)
               if role.startswith("buffer_update:")]
    roles += [role for role, _ in states] + [role for role, _ in updates]
    outputs += [v for _, v in states] + [v for _, v in updates]
    meta = {**graph.attributes, "outputs": roles, "inputs": roles_in}
    return b.finish(outputs, attributes=meta, weights=weights).renumbered()


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
    """The graph with each constant seed of a dropout (p > 0) turned into an i64[] input of the same name (role
    "seed", after the graph's own inputs, in graph order), so each call of a step can draw new masks."""
    producers = graph.producers
    seeds: dict[str, Value] = {}
    for node in graph.ops():
        source = producers.get(node.inputs[2].name) if node.op == "dropout" and node.attr["p"] > 0.0 else None
        if source is not None and source.op == "constant":
            seeds.setdefault(source.out.name, source.out)
    if not seeds:
        return graph
    roles = list(graph.attributes.get("inputs", ["batch"] * len(graph.inputs)))
    inputs = (*graph.inputs, *seeds.values())
    nodes = tuple(n for n in graph.nodes if not (n.op == "constant" and n.out.name in seeds))
    meta = {**graph.attributes, "inputs": roles + [SEED_ROLE] * len(seeds)}
    return graph.replace(inputs=inputs, nodes=nodes, attributes=meta)


def input_roles(graph: Graph) -> list[str]:
    """The role of each input of a training graph: "batch", "seed" or "coefficient:<group>.<name>"."""
    return list(graph.attributes.get("inputs", ["batch"] * len(graph.inputs)))
