"""The IR graph: SSA values, nodes in topological order, leaves for inputs, parameters and flags.

Graphs are immutable; passes build new ones (GraphBuilder in ir/builder.py, or `Graph.replace`). A graph
carries its weights (param path -> array) beside its structure; the weights are not part of equality or text.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

import numpy as np

from .types import DType, TensorType


@dataclass(frozen=True, slots=True)
class Value:
    """An SSA value: a name unique in its graph and a static type."""

    name: str
    type: TensorType

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    def __str__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True, slots=True)
class Loc:
    """Where a node came from: the module path that created it and the user's source file and line."""

    module: str = ""
    file: str = ""
    line: int = 0

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file else ""
        return " @ ".join(p for p in (self.module, where) if p)


@dataclass(frozen=True)
class Node:
    """One op application. Attributes are a name-sorted tuple of checked values; `loc` is provenance and
    does not take part in equality."""

    op: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    loc: Loc | None = field(default=None, compare=False)

    @cached_property
    def attr(self) -> dict[str, Any]:
        """The attributes as a dict (read-only by convention)."""
        return dict(self.attrs)

    @property
    def out(self) -> Value:
        """The single result of a one-result node."""
        if len(self.outputs) != 1:
            raise ValueError(f"{self.op} has {len(self.outputs)} results; use .outputs")
        return self.outputs[0]

    def replace(self, **changes: Any) -> Node:
        return replace(self, **changes)


def sorted_attrs(attrs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(attrs.items()))


# Every NaN attribute is this one object, so attributes holding NaN compare equal (tuples and dicts compare items
# by identity first) and a parsed graph equals the graph it was printed from, as the text shows every NaN as nan.
NAN = float("nan")


def frozen_literal(value: Any) -> Any:
    """Lists become tuples and dicts sorted pair-tuples, recursively, so graph attributes compare and hash;
    every NaN becomes NAN."""
    if isinstance(value, float) and value != value:
        return NAN
    if isinstance(value, (list, tuple)):
        return tuple(frozen_literal(v) for v in value)
    if isinstance(value, Mapping):
        return {k: frozen_literal(v) for k, v in sorted(value.items())}
    return value


class Attributes(Mapping[str, Any]):
    """A graph's attributes: a read-only mapping ordered by name whose values are frozen literals, so a graph
    holding it compares and hashes (fusion bodies are attribute values)."""

    __slots__ = ("_items", "_lookup")

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        self._items = tuple(sorted((k, frozen_literal(v)) for k, v in pairs))
        self._lookup = dict(self._items)

    def __getitem__(self, key: str) -> Any:
        return self._lookup[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._lookup)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._lookup == dict(other.items())

    def __repr__(self) -> str:
        return f"Attributes({self._lookup!r})"


class ParamLeaf(NamedTuple):
    """A parameter or buffer leaf of a graph, as `Graph.params()` lists it."""

    path: str
    id: int
    type: TensorType
    trainable: bool
    buffer: bool
    out: Value


class FlagLeaf(NamedTuple):
    """A training-flag leaf of a graph, as `Graph.flags()` lists it."""

    path: str
    id: int
    value: bool
    out: Value


@dataclass(frozen=True)
class Graph:
    """A function: typed inputs, nodes in topological order (leaves included), outputs, graph attributes."""

    name: str
    inputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Value, ...]
    attributes: Attributes = Attributes()
    weights: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.attributes, Attributes):
            object.__setattr__(self, "attributes", Attributes(self.attributes))

    def replace(self, **changes: Any) -> Graph:
        """A new graph with some fields replaced (`attributes` may be given as any mapping)."""
        return replace(self, **changes)

    # --- lookups ----------------------------------------------------------------------------------------
    @cached_property
    def producers(self) -> dict[str, Node]:
        """Value name -> the node that defines it (graph inputs are absent)."""
        return {v.name: n for n in self.nodes for v in n.outputs}

    @cached_property
    def users(self) -> dict[str, list[Node]]:
        """Value name -> nodes that read it, in graph order."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for v in dict.fromkeys(n.inputs):
                out.setdefault(v.name, []).append(n)
        return out

    def producer(self, value: Value) -> Node | None:
        return self.producers.get(value.name)

    def params(self) -> list[ParamLeaf]:
        """The param (and buffer) leaves in graph order."""
        return [ParamLeaf(n.attr["path"], n.attr["id"], n.out.type, n.attr["trainable"], n.attr["buffer"], n.out)
                for n in self.nodes if n.op == "param"]

    def flags(self) -> list[FlagLeaf]:
        """The flag leaves in graph order."""
        return [FlagLeaf(n.attr["path"], n.attr["id"], n.attr["value"], n.out) for n in self.nodes if n.op == "flag"]

    def ops(self) -> Iterator[Node]:
        """The computing nodes (everything but the leaves: params, flags and constants)."""
        from .registry import is_leaf
        return (n for n in self.nodes if not is_leaf(n))

    # --- views --------------------------------------------------------------------------------------------
    def __str__(self) -> str:
        from .printer import print_graph
        return print_graph(self)

    def dump(self, provenance: bool = False) -> str:
        """The text form; with provenance, each node also shows the module path and source line it came from."""
        from .printer import print_graph
        return print_graph(self, provenance=provenance)

    def summary(self) -> str:
        from .printer import summarize
        return summarize(self)

    def to_networkx(self) -> Any:
        """A networkx DiGraph with one vertex per node (keyed by index) and edges from producers to users."""
        from .analysis import to_networkx
        return to_networkx(self)

    def to_dot(self) -> str:
        """A Graphviz drawing in dot text (no graphviz binary needed to produce it)."""
        from .analysis import to_dot
        return to_dot(self)

    def renumbered(self) -> Graph:
        """The same graph with temporaries (digit-only names) renamed 0, 1, 2... in definition order."""
        from .builder import renumber
        return renumber(self)
