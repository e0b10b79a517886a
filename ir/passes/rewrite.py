"""Pattern rewriting: rules keyed by op name replace a node's results with values built by an emitter.

A rule is a function of a `Match` (the node, with its operands already rewritten, and a view of the graph built
so far) that returns the replacement value(s) or None. `apply_rules(graph, rules)` rebuilds the graph in
topological order, offering each node to the rules registered for its op (then to the catch-all rules, op None);
the first rule that answers replaces the node. Nodes a rule emits carry the replaced node's `loc`, so provenance
survives. Sweeps repeat until no rule fires (a fixed point). Finally nodes that the rewriting left unused are
dropped, while nodes that were already unused in the input stay: removing those is dce's job, so a pass's output
shows only its own effect.

    @rule("neg")
    def double_negation(m: Match) -> Value | None:
        inner = m.producer(m.node.inputs[0], "neg")
        return inner.inputs[0] if inner else None
"""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..builder import GraphBuilder, renamed_values
from ..errors import BrazeError
from ..graph import Graph, Loc, Node, Value, sorted_attrs
from ..registry import Emitter, get_op
from ..types import TensorType

RuleFn = Callable[["Match"], "Value | Sequence[Value] | None"]
MAX_SWEEPS = 32


@dataclass(frozen=True)
class Rule:
    """A rewrite rule: `fn` is offered every node applying `op` (every node when op is None)."""

    op: str | None
    fn: RuleFn
    name: str


def rule(op: str | None) -> Callable[[RuleFn], Rule]:
    """Decorator: turn `fn(match) -> replacement | None` into a Rule for nodes applying `op`."""
    def wrap(fn: RuleFn) -> Rule:
        return Rule(op, fn, fn.__name__)
    return wrap


class RewriteEmitter(Emitter):
    """Appends the nodes a rule builds to the new graph, under fresh temporary names and the replaced node's loc."""

    def __init__(self, builder: GraphBuilder, names: Iterator[str], taken: set[str], weights: dict[str, np.ndarray]):
        self.builder, self.names, self.taken, self.weights = builder, names, taken, weights
        self.loc: Loc | None = None

    def bind(self, name: str, operands: Sequence[Any], attrs: dict[str, Any]) -> Any:
        count = get_op(name).num_results
        outs = self.builder.add_node(name, operands, attrs, names=[next(self.names) for _ in range(count)],
                                     loc=self.loc)
        return outs[0] if count == 1 else outs

    def param(self, path: str, array: np.ndarray, *, id: int, trainable: bool = False, buffer: bool = False) -> Value:
        """A new param leaf holding `array`, which travels in the result graph's weights under `path`."""
        array = np.asarray(array)
        attrs = get_op("param").check_attrs({"path": path, "id": id, "trainable": trainable, "buffer": buffer})
        value = Value(self._leaf_name(path), TensorType(array.shape, array.dtype))
        self.builder.append(Node("param", (), (value,), sorted_attrs(attrs), self.loc))
        self.weights[path] = array
        return value

    def _leaf_name(self, path: str) -> str:
        base = path if path and not path.isdigit() else f"_{path}"
        name = next(n for n in itertools.chain([base], (f"{base}_{k}" for k in itertools.count(1)))
                    if n not in self.taken)
        self.taken.add(name)
        return name


class Match:
    """What a rule sees: the node (operands already rewritten), the producers of values, and an emitter."""

    def __init__(self, node: Node, producers: Mapping[str, Node], emitter: RewriteEmitter,
                 weights: Mapping[str, np.ndarray], uses: Mapping[str, int]) -> None:
        self.node, self._producers, self.e, self._weights, self._uses = node, producers, emitter, weights, uses

    def producer(self, value: Value, op: str | None = None) -> Node | None:
        """The node defining `value` (None for graph inputs; the matched node for its own results), provided it
        applies `op` when one is given."""
        node = self._producers.get(value.name)
        if node is None and value in self.node.outputs:
            node = self.node
        return node if node is not None and (op is None or node.op == op) else None

    def constant(self, value: Value) -> np.ndarray | None:
        """The array of a constant leaf, or None."""
        node = self.producer(value, "constant")
        return None if node is None else node.attr["value"].array

    def splat(self, value: Value) -> Any:
        """The one value every element of a non-empty constant holds (a Python bool, int or float), else None."""
        array = self.constant(value)
        if array is None or array.size == 0:
            return None
        first = array.reshape(-1)[0]
        return first.item() if bool(np.all(array == first)) else None

    def scalar(self, value: Value) -> float | None:
        """The number held by a one-element float or integer constant, else None."""
        array = self.constant(value)
        if array is None or array.size != 1 or array.dtype.kind not in "fiu":
            return None
        return float(array.reshape(-1)[0])

    def weight(self, value: Value) -> np.ndarray | None:
        """The array of a param leaf in the graph's weights, or None."""
        node = self.producer(value, "param")
        return None if node is None else self._weights.get(node.attr["path"])

    def use_count(self, value: Value) -> int:
        """How many nodes (and graph outputs) read `value` in the graph this sweep started from (0 if new)."""
        return self._uses.get(value.name, 0)


def apply_rules(graph: Graph, rules: Iterable[Rule], *, max_sweeps: int = MAX_SWEEPS,
                fired: Counter[str] | None = None) -> Graph:
    """Apply `rules` to a fixed point; returns a new graph (the input is not changed). When a Counter is given
    as `fired`, it counts how often each rule replaced a node."""
    by_op: dict[str | None, list[Rule]] = {}
    for r in rules:
        by_op.setdefault(r.op, []).append(r)
    weights = dict(graph.weights)
    counter = itertools.count(_max_temporary(graph) + 1)
    names = (str(k) for k in counter)
    current = graph
    for _ in range(max_sweeps):
        current, names_fired = _sweep(current, by_op, names, weights)
        current = prune_orphans(current, graph)  # a replaced node's operands lose its use before the next sweep
        if fired is not None:
            fired.update(names_fired)
        if not names_fired:
            return finalize(current, graph, weights)
    raise BrazeError(f"rewriting graph @{graph.name} did not reach a fixed point after {max_sweeps} sweeps; "
                     f"rules still firing: {', '.join(sorted(set(names_fired)))}")


def _max_temporary(graph: Graph) -> int:
    names = [v.name for v in graph.inputs] + [v.name for n in graph.nodes for v in n.outputs]
    return max((int(n) for n in names if n.isdigit()), default=-1)


def use_counts(graph: Graph) -> dict[str, int]:
    """Value name -> number of operand slots and graph outputs that read it."""
    counts: dict[str, int] = {}
    for v in itertools.chain((v for n in graph.nodes for v in n.inputs), graph.outputs):
        counts[v.name] = counts.get(v.name, 0) + 1
    return counts


def _sweep(graph: Graph, by_op: Mapping[str | None, list[Rule]], names: Iterator[str],
           weights: dict[str, np.ndarray]) -> tuple[Graph, list[str]]:
    builder = GraphBuilder(graph.name)
    for v in graph.inputs:
        builder.input(v.name, v.type)
    taken = {v.name for v in graph.inputs} | {v.name for n in graph.nodes for v in n.outputs}
    emitter = RewriteEmitter(builder, names, taken, weights)
    producers: dict[str, Node] = {}
    uses = use_counts(graph)
    sub: dict[str, Value] = {}
    fired: list[str] = []
    for node in graph.nodes:
        if any(v.name in sub for v in node.inputs):  # else the node stays the same object (verified once)
            node = node.replace(inputs=tuple(sub.get(v.name, v) for v in node.inputs))
        start = len(builder.nodes)
        emitter.loc = node.loc
        for r in itertools.chain(by_op.get(node.op, ()), by_op.get(None, ())):
            result = r.fn(Match(node, producers, emitter, weights, uses))
            if result is None:
                del builder.nodes[start:]  # a rule that declines leaves nothing behind
                continue
            for old, new in zip(node.outputs, _as_values(r, node, result), strict=True):
                sub[old.name] = new
            fired.append(r.name)
            break
        else:
            builder.append(node)
        producers.update((v.name, n) for n in builder.nodes[start:] for v in n.outputs)
    outputs = [sub.get(v.name, v) for v in graph.outputs]
    return builder.finish(outputs, attributes=graph.attributes, weights=weights, verify=False), fired


def _as_values(r: Rule, node: Node, result: Value | Sequence[Value]) -> tuple[Value, ...]:
    """The rule's answer as one value per result of `node`, each of the result's type."""
    values = (result,) if isinstance(result, Value) else tuple(result)
    if len(values) != len(node.outputs):
        raise BrazeError(f"rewrite rule {r.name} gave {len(values)} value(s) for the {len(node.outputs)} result(s) "
                         f"of {node.op}")
    for old, new in zip(node.outputs, values):
        if not isinstance(new, Value) or new.type != old.type:
            shown = f"%{new.name} : {new.type}" if isinstance(new, Value) else repr(new)
            raise BrazeError(f"rewrite rule {r.name} replaced %{old.name} : {old.type} ({node.op}) by {shown}; "
                             f"a replacement must have the same type")
    return values


def finalize(graph: Graph, original: Graph, weights: Mapping[str, np.ndarray] | None = None) -> Graph:
    """Drop the nodes a pass left unused (not those already unused in `original`), name new leaves after their
    paths where free, and keep exactly the weights of the remaining param leaves."""
    graph = _name_leaves(prune_orphans(graph, original))
    return with_weights(graph, weights if weights is not None else graph.weights)


def prune_orphans(graph: Graph, original: Graph) -> Graph:
    """Remove pure nodes whose results are all unused, unless every one of them was already unused in `original`."""
    counts = use_counts(original)
    idle_before = {v.name for n in original.nodes for v in n.outputs if not counts.get(v.name)}
    live = use_counts(graph)
    keep: list[Node] = []
    for node in reversed(graph.nodes):
        unused = not any(live.get(v.name) for v in node.outputs)
        if unused and get_op(node.op).pure and not all(v.name in idle_before for v in node.outputs):
            for v in node.inputs:
                live[v.name] -= 1
            continue
        keep.append(node)
    return graph if len(keep) == len(graph.nodes) else graph.replace(nodes=tuple(reversed(keep)))


def _name_leaves(graph: Graph) -> Graph:
    """Give param leaves whose value name is a suffixed variant of their path the path itself, when it is free."""
    taken = {v.name for v in graph.inputs} | {v.name for n in graph.nodes for v in n.outputs}
    rename: dict[str, str] = {}
    for n in graph.nodes:
        path = n.attr.get("path") if get_op(n.op).is_leaf else None
        if path and not path.isdigit() and n.out.name != path and path not in taken:
            rename[n.out.name] = path
            taken.add(path)
    if not rename:
        return graph

    return renamed_values(graph, rename)


def with_weights(graph: Graph, weights: Mapping[str, np.ndarray]) -> Graph:
    """`graph` carrying exactly the arrays of its param leaves taken from `weights` (shared, not copied)."""
    kept = {p.path: weights[p.path] for p in graph.params() if p.path in weights}
    return graph.replace(weights=kept)
