"""specialize_flags: fix every flag leaf to a bool constant and simplify the ops that read flags.

Option `flags`: a mapping flag path -> bool, or one bool for every flag; flags it does not name keep the value
recorded in the graph (the module's mode when it was traced). Naming a path that is not a flag leaf of the graph
is an error, and so is asking for a value that contradicts one of the graph's guards (attribute "guards": a flag read
in Python during tracing, so the graph only holds that branch). The guards stay in the graph's attributes.

After the flags are constants:
- dropout(x, false, seed) and dropout with p = 0 are x;
- where(c, a, b) with a constant condition is the chosen branch;
- batch_norm_flag(x, mean, var, w, b, false) is batch_norm(x, mean, var, w, b), the inference affine form
  (x - mean) * w / sqrt(var + eps) + b, and its statistics results are the running mean and variance themselves,
  so a buffer update where(false, blend, running) reads the buffer unchanged; with a true flag it is
  batch_norm_train(x, w, b).
The flag leaves disappear (replaced by their constants); folding what else reads them is constant_fold's job.

Buffer updates that no longer change anything leave the graph's outputs: an output whose role in attribute "outputs"
is "buffer_update:<path>" and whose value is then that buffer's own leaf (or the leaf plus or minus zeros, as
num_batches_tracked + cast(false)) is dropped, with its role, so a graph specialized to evaluation returns no
buffer updates; what only those outputs read disappears with them.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import BrazeError
from ..graph import Graph, Node, Value
from .manager import PassContext, register_pass
from .rewrite import Match, Rule, apply_rules, finalize, rule
from .simplify import select_constant_condition


def flag_values(graph: Graph, requested: bool | Mapping[str, bool] | None) -> dict[str, bool]:
    """Each flag path's value: the request where given, the recorded value otherwise; checks guards."""
    values = {f.path: bool(f.value) for f in graph.flags()}
    if isinstance(requested, (bool, np.bool_)):
        requested = dict.fromkeys(values, bool(requested))
    for path, value in (requested or {}).items():
        if path not in values:
            raise BrazeError(f"specialize_flags: graph @{graph.name} has no flag '{path}'; its flags: "
                             f"{', '.join(sorted(values)) or 'none'}")
        if not isinstance(value, (bool, np.bool_)):
            raise BrazeError(f"specialize_flags: flag '{path}' must be given a bool, got {value!r}")
        values[path] = bool(value)
    guards: Mapping[str, Any] = graph.attributes.get("guards", {})
    for path, value in values.items():
        if path in guards and bool(guards[path]) != value:
            raise BrazeError(f"specialize_flags: flag '{path}' was read in Python while tracing with value "
                             f"{bool(guards[path])} (its 'guards' attribute), so the graph only holds that branch and "
                             f"cannot be specialized to {value}; trace the module in that mode instead")
    return values


@rule("dropout")
def dropout_off(m: Match) -> Value | None:
    x, training, _ = m.node.inputs
    return x if m.node.attr["p"] == 0.0 or m.splat(training) is False else None


@rule("batch_norm_flag")
def batch_norm_by_flag(m: Match) -> tuple[Value, ...] | None:
    x, mean, var, weight, bias, training = m.node.inputs
    mode, eps = m.splat(training), m.node.attr["eps"]
    if mode is False:
        return m.e.batch_norm(x, mean, var, weight, bias, eps=eps), mean, var
    if mode is True and x.type.size // max(x.shape[1], 1) > 1:  # else the op raises at run time; leave it so
        return m.e.batch_norm_train(x, weight, bias, eps=eps)
    return None


def drop_unchanged_updates(graph: Graph) -> Graph:
    """`graph` without its buffer-update outputs (attribute "outputs" roles) that return their buffer unchanged."""
    roles = graph.attributes.get("outputs")
    if roles is None or len(roles) != len(graph.outputs):
        return graph
    producers = graph.producers
    keep = [i for i, (role, v) in enumerate(zip(roles, graph.outputs))
            if not (role.startswith("buffer_update:") and _unchanged(v, role.split(":", 1)[1], producers))]
    if len(keep) == len(roles):
        return graph
    meta = {**graph.attributes, "outputs": [roles[i] for i in keep]}
    return graph.replace(outputs=tuple(graph.outputs[i] for i in keep), attributes=meta)


def _unchanged(value: Value, path: str, producers: Mapping[str, Node]) -> bool:
    """Whether `value` is the param leaf `path`, possibly with zeros added or subtracted (same type)."""
    node = producers.get(value.name)
    if node is None:
        return False
    if node.op == "param":
        return node.attr["path"] == path
    if node.op not in ("add", "sub") or node.out.type != node.inputs[0].type:
        return False
    x, y = node.inputs
    if _zero(y, producers) and _unchanged(x, path, producers):
        return True
    return node.op == "add" and y.type == node.out.type and _zero(x, producers) and _unchanged(y, path, producers)


def _zero(value: Value, producers: Mapping[str, Node]) -> bool:
    """Whether `value` is a constant of zeros (false counts as zero), possibly cast."""
    node = producers.get(value.name)
    while node is not None and node.op == "cast":
        node = producers.get(node.inputs[0].name)
    if node is None or node.op != "constant":
        return False
    array = node.attr["value"].array
    return array.size > 0 and not np.any(array)


@register_pass("specialize_flags")
def specialize_flags(graph: Graph, ctx: PassContext) -> Graph:
    """Replace flag leaves by constants (option `flags`) and simplify dropout, where and batch_norm_flag."""
    values = flag_values(graph, ctx.option("flags"))

    def flag_to_constant(m: Match) -> Value:
        return m.e.constant(np.asarray(values[m.node.attr["path"]]))

    rules = [Rule("flag", flag_to_constant, "flag_to_constant"), dropout_off, batch_norm_by_flag,
             select_constant_condition]
    if values:
        ctx.note(", ".join(f"{path}={value}" for path, value in values.items()))
    specialized = apply_rules(graph, rules)
    result = drop_unchanged_updates(specialized)
    dropped = [r for r in specialized.attributes.get("outputs", ()) if r not in result.attributes.get("outputs", ())]
    if dropped:
        ctx.note(f"dropped {len(dropped)} unchanged buffer update(s): "
                 + ", ".join(r.split(":", 1)[1] for r in dropped))
    return finalize(result, specialized)
