"""GraphBuilder: the one way tests, the tracer, passes and the parser assemble graphs."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .errors import BrazeError
from .graph import Attributes, Graph, Loc, Node, Value, sorted_attrs
from .registry import Emitter, get_op
from .types import TensorType, bool_
from .verify import VerifiedNodes, verify as verify_graph


class GraphBuilder(Emitter):
    """Collects inputs, leaves and nodes in order, then `finish()`es into an immutable Graph.

    As an Emitter, `b.add(x, y)` or `b.bind("add", [x, y], {})` infers the result type and appends a node,
    so VJP rules can write their gradients straight into a graph.
    """

    def __init__(self, name: str = "main") -> None:
        self.name = name
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.loc: Loc | None = None  # provenance given to the nodes appended next
        self._names: set[str] = set()
        self._counter = 0
        self._params: dict[str, Value] = {}
        self._flags: dict[str, Value] = {}
        self._made = VerifiedNodes()  # the nodes checked as they were made: finish() checks only where they sit

    # --- naming ---------------------------------------------------------------------------------------------
    def _claim(self, name: str) -> str:
        if name in self._names:
            raise BrazeError(f"value name %{name} is already defined in graph @{self.name}")
        self._names.add(name)
        return name

    def leaf_name(self, path: str) -> str:
        """The value name of a param or flag leaf: its path, unless that is empty or digit-only (digit-only names
        are temporaries, see `renumber`) or already taken, in which case a distinct name derived from it."""
        base = path if path and not path.isdigit() else f"_{path}"
        name, k = base, 1
        while name in self._names:
            name, k = f"{base}_{k}", k + 1
        return self._claim(name)

    def fresh_name(self) -> str:
        while str(self._counter) in self._names:
            self._counter += 1
        name = str(self._counter)
        self._counter += 1
        return self._claim(name)

    # --- leaves ----------------------------------------------------------------------------------------------
    def input(self, name: str, type: TensorType) -> Value:
        value = Value(self._claim(name), type)
        self.inputs.append(value)
        return value

    def param(self, path: str, type: TensorType, *, id: int, trainable: bool = True, buffer: bool = False) -> Value:
        """The param leaf for `path`, created on first use; a second read of the same path returns the same value."""
        if path in self._params:
            existing = self._params[path]
            if existing.type != type:
                raise BrazeError(f"param '{path}' is read as {type} but its leaf is {existing.type}")
            return existing
        attrs = get_op("param").check_attrs({"path": path, "id": id, "trainable": trainable, "buffer": buffer})
        value = Value(self.leaf_name(path), type)
        self.nodes.append(self._made.adding(Node("param", (), (value,), sorted_attrs(attrs), self.loc)))
        self._params[path] = value
        return value

    def flag(self, path: str, *, id: int, value: bool) -> Value:
        """The flag leaf for `path`, created on first use."""
        if path in self._flags:
            return self._flags[path]
        attrs = get_op("flag").check_attrs({"path": path, "id": id, "value": value})
        out = Value(self.leaf_name(path), TensorType((), bool_))
        self.nodes.append(self._made.adding(Node("flag", (), (out,), sorted_attrs(attrs), self.loc)))
        self._flags[path] = out
        return out

    def constant(self, array: Any) -> Value:
        return self.bind("constant", (), {"value": np.asarray(array)})

    # --- nodes -----------------------------------------------------------------------------------------------
    def bind(self, name: str, operands: Sequence[Any], attrs: dict[str, Any]) -> Any:
        outs = self.add_node(name, operands, attrs)
        return outs[0] if len(outs) == 1 else outs

    def add_node(self, op_name: str, operands: Sequence[Value], attrs: Mapping[str, Any] | None = None, *,
            names: Sequence[str] | None = None, loc: Loc | None = None) -> tuple[Value, ...]:
        """Append a node applying `op_name`; returns its result values."""
        op = get_op(op_name)
        for o in operands:
            if not isinstance(o, Value):
                raise BrazeError(f"{op_name}: operand {o!r} is not a graph value")
        checked = op.check_attrs(dict(attrs or {}))
        types = op.infer_types([o.type for o in operands], checked)
        if names is not None and len(names) != len(types):
            raise BrazeError(f"{op_name}: {len(names)} result names given for {len(types)} results")
        outs = tuple(Value(self._claim(n) if names else self.fresh_name(), t)
                     for n, t in zip(names or [None] * len(types), types))
        node = Node(op_name, tuple(operands), outs, sorted_attrs(checked), loc or self.loc)
        # a nested graph attribute (a fusion region's body) was not verified here: finish() verifies its node whole
        self.nodes.append(node if any(spec.kind == "graph" for spec in op.attrs) else self._made.adding(node))
        return outs

    def append(self, node: Node) -> Node:
        """Append an already-formed node (its result names are claimed); used when copying graphs."""
        for v in node.outputs:
            self._claim(v.name)
        if node.op == "param":
            self._params[node.attr["path"]] = node.out
        elif node.op == "flag":
            self._flags[node.attr["path"]] = node.out
        self.nodes.append(node)
        return node

    def finish(self, outputs: Sequence[Value], *, attributes: Mapping[str, Any] | None = None,
               weights: Mapping[str, np.ndarray] | None = None, verify: bool = True) -> Graph:
        graph = Graph(self.name, tuple(self.inputs), tuple(self.nodes), tuple(outputs),
                      Attributes(attributes or {}), dict(weights or {}))
        if verify:
            verify_graph(graph, self._made)
        return graph


def renumber(graph: Graph) -> Graph:
    """Rename digit-only value names 0, 1, 2... in definition order so printed text is stable across passes.

    Digit-only names are temporaries; other names (inputs, param paths) never collide with them.
    """
    defined = [v for v in graph.inputs] + [v for n in graph.nodes for v in n.outputs]
    temporaries = [v.name for v in defined if v.name.isdigit()]
    return renamed_values(graph, {old: str(i) for i, old in enumerate(temporaries) if old != str(i)})


def renamed_values(graph: Graph, rename: Mapping[str, str]) -> Graph:
    """The graph with values renamed by `rename` (old name -> new name); a node none of whose values is renamed
    stays the same object, so a pipeline's verifier checks it once (ir/verify.py VerifiedNodes)."""
    if not rename:
        return graph

    def sub(v: Value) -> Value:
        return Value(rename[v.name], v.type) if v.name in rename else v

    def renamed(n: Node) -> Node:
        if not any(v.name in rename for v in (*n.inputs, *n.outputs)):
            return n
        return n.replace(inputs=tuple(map(sub, n.inputs)), outputs=tuple(map(sub, n.outputs)))

    return graph.replace(inputs=tuple(map(sub, graph.inputs)), nodes=tuple(map(renamed, graph.nodes)),
                         outputs=tuple(map(sub, graph.outputs)))
