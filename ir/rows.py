"""A graph cut to a chunk of its batch: the same nodes over `rows` rows of axis 0 instead of the whole batch.

    rows_graph(graph, 8)   # @CNN(x: f32[64,3,32,32]) -> f32[64,10]  becomes  (x: f32[8,3,32,32]) -> f32[8,10]

Valid where every computing node computes row i of its result from row i of the operands that carry rows alone
(the registry's `rows` trait, ir/row_rules.py): the graph's inputs carry them, a node's results do when one of its
operands does, and params and constants are read whole. Running the cut graph on each chunk of the batch in turn
then gives the whole batch's result, row for row the same, while a chunk's activations are small enough to stay in
the cache from one kernel to the next (codegen/batch_chunks.py decides when that pays). Attributes that name the
row count (a reshape's shape, a slice's stop, a fusion region's domain and body) are rewritten by the op's rule,
and every node's types are inferred again, so a cut graph is as well-typed as one traced at the smaller batch.
Value names are kept; a memory plan is dropped (the cut graph's buffers are smaller: plan it again).
"""
from __future__ import annotations

from .errors import BrazeError
from .graph import Graph, Value, sorted_attrs
from .registry import get_op, is_leaf


def batch_of(graph: Graph) -> int | None:
    """The size of axis 0 shared by every input and output of the graph, or None (no inputs, a scalar, sizes that
    differ)."""
    values = (*graph.inputs, *graph.outputs)
    if not graph.inputs or any(not v.shape for v in values):
        return None
    sizes = {v.shape[0] for v in values}
    return sizes.pop() if len(sizes) == 1 else None


def rows_graph(graph: Graph, rows: int) -> Graph | None:
    """The graph over `rows` rows of its batch (batch_of), or None: `rows` does not divide the batch into several
    chunks, a node mixes rows, or an output does not carry them (a param returned as it is)."""
    batch = batch_of(graph)
    if batch is None or not 0 < rows < batch or batch % rows:
        return None
    cut = cut_rows(graph, (True,) * len(graph.inputs), batch, rows)
    if cut is None or not all(cut[1]):
        return None
    attributes = {k: v for k, v in graph.attributes.items() if k != "memory_plan"}
    return cut[0].replace(attributes=attributes)


def cut_rows(graph: Graph, carried: tuple[bool, ...], batch: int, rows: int) -> tuple[Graph, tuple[bool, ...]] | None:
    """The graph with axis 0 of the inputs flagged in `carried` (each of `batch` rows) cut to `rows`, and which of
    its outputs carry rows; None when a node mixes rows. Also cuts a fusion region's body (ir/ops/fused.py)."""
    values: dict[str, Value] = {}
    has_rows: dict[str, bool] = {}
    inputs = []
    for v, c in zip(graph.inputs, carried):
        if c and (not v.shape or v.shape[0] != batch):
            return None
        inputs.append(_cut(v, rows) if c else v)
        values[v.name], has_rows[v.name] = inputs[-1], c
    nodes = []
    for node in graph.nodes:
        flags = tuple(has_rows[v.name] for v in node.inputs)
        if is_leaf(node) or not any(flags):  # computed whole, as before
            nodes.append(node)
            for v in node.outputs:
                values[v.name], has_rows[v.name] = v, False
            continue
        op = get_op(node.op)
        attrs = op.rows_attrs(node, flags, rows)
        operands = tuple(values[v.name] for v in node.inputs)
        try:
            checked = op.check_attrs(attrs) if attrs is not None else None
            types = op.infer_types([v.type for v in operands], checked) if checked is not None else None
        except BrazeError:
            return None
        if types is None or len(types) != len(node.outputs):
            return None
        outputs = []
        for old, typ in zip(node.outputs, types):
            if not old.shape or old.shape[0] != batch or typ != old.type.with_shape((rows, *old.shape[1:])):
                return None
            outputs.append(Value(old.name, typ))
            values[old.name], has_rows[old.name] = outputs[-1], True
        nodes.append(node.replace(inputs=operands, outputs=tuple(outputs), attrs=sorted_attrs(checked)))
    cut = graph.replace(inputs=tuple(inputs), nodes=tuple(nodes), outputs=tuple(values[v.name] for v in graph.outputs))
    return cut, tuple(has_rows[v.name] for v in graph.outputs)


def _cut(v: Value, rows: int) -> Value:
    return Value(v.name, v.type.with_shape((rows, *v.shape[1:])))
