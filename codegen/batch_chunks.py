"""Whether a graph runs its batch in chunks, and the graph of one chunk.

A graph whose every node computes its rows independently (ir/rows.py) can run its batch a few rows at a time, each
chunk through every kernel before the next begins: the entry point loops over the chunks, offsetting the inputs'
and outputs' pointers, and the activations of one chunk, planned in an arena of the chunk's size, stay in the L2
cache from one kernel to the next instead of going out to L3 or memory. On several threads, with at least two
chunks per thread, each thread claims chunks (codegen/claims.py) and runs them through every kernel by itself, in
a slot of the arena of its own (BuiltModule.arena_for): no barrier between kernels, and each core
keeps its own chunk's activations. With fewer chunks all threads run each chunk's kernels together.

It pays where the batch's activations overflow the L2. chunk_rows takes the fewest chunks that bring the largest
node's operands and results to half of one L2, at most MAX_CHUNKS; where the weights do not fit in the other half,
each chunk streams them all again, so a chunk must do REUSE work per byte of them. Measured on a Xeon (2 MB L2),
medians side by side, whole batch against chunks: the CNN at batch 64 (8.4 MB written by its first conv, weights
0.4 MB), 16 chunks of 4 rows, 6.07 -> 5.67 ms on one thread, 3.38 -> 3.16 and 3.13 -> 2.96 ms on two running their
own chunks (running each chunk of 8 rows on both threads together had gained 2%, smaller shared chunks lost: a
barrier per kernel and chunk, 4 rows 3.98 against 3.85 ms). A transformer layer at batch 8 (6.3 MB of activations
around its feed-forward layers, 3.2 MB of weights, 35 work per weight byte and row), chunks of one row: 9.48 ->
9.37 ms on one thread, 4.92 -> 4.79 and 5.04 -> 4.90 on two. The MLP at batch 64 (0.3 work per weight byte and row)
in chunks of 16 rows: 0.485 -> 0.525 ms; its activations fit in the L2, so it runs whole.

BRAZE_BATCH_ROWS overrides the choice: 0 keeps every batch whole, a positive count cuts into chunks of that many
rows where the graph allows. A kernel built for fewer rows may block its work differently, so results match the
whole batch's to rounding.
"""
from __future__ import annotations

import os

from braze.ir.errors import CodegenError
from braze.ir.graph import Graph
from braze.ir.passes import optimize
from braze.ir.registry import get_op, is_leaf
from braze.ir.rows import batch_of, rows_graph
from braze.ir.train_step import updated_leaves

from .cache_sizes import host_cache_sizes

MAX_CHUNKS = 16
# Work (the registry's estimate: multiply-adds and elements written) a chunk does per byte of the weights it streams
# again when they do not stay in the L2: at 16, weights read at about 8 GB/s keep a core at 240 GFLOP/s busy.
REUSE = 16
ROWS_VARIABLE = "BRAZE_BATCH_ROWS"


def chunk_rows(graph: Graph) -> int | None:
    """The rows of one chunk for a planned inference graph, or None when it runs its batch whole (see the module
    doc)."""
    batch = batch_of(graph)
    if batch is None or batch < 2 or updated_leaves(graph):
        return None
    forced = _forced_rows()
    if forced is not None:
        rows = forced if 0 < forced < batch and batch % forced == 0 else None
    else:
        rows = rows_for(graph, host_cache_sizes().l2)
    return rows if rows is not None and rows_graph(graph, rows) is not None else None


def chunk_graph(graph: Graph, rows: int) -> Graph:
    """The planned graph of one chunk of `rows` rows (chunk_rows said the graph allows it)."""
    cut = rows_graph(graph, rows)
    if cut is None:
        raise CodegenError(f"graph @{graph.name} cannot run in chunks of {rows} rows")
    return optimize(cut, ("plan_memory",))


def rows_for(graph: Graph, l2: int) -> int | None:
    """The rows of the fewest chunks that bring the largest node's activations (peak_bytes) to half of an L2 cache
    of `l2` bytes, at most MAX_CHUNKS chunks, each doing at least REUSE work per byte of weights where the weights
    do not fit in the L2's other half; None when the activations fit in the L2 whole, or no chunk does enough work."""
    batch = batch_of(graph)
    if batch is None or batch < 2:
        return None
    peak, budget = peak_bytes(graph), l2 // 2
    if peak <= l2:
        return None
    weights = sum(p.type.nbytes for p in graph.params())
    work = sum(get_op(n.op).work_estimate(n) for n in graph.ops())
    allowed = [c for c in range(2, min(batch, MAX_CHUNKS) + 1)
               if batch % c == 0 and (weights <= budget or work // c >= REUSE * weights)]
    if not allowed:
        return None
    return batch // next((c for c in allowed if peak // c <= budget), allowed[-1])


def peak_bytes(graph: Graph) -> int:
    """The most bytes one node reads and writes that are not weights: what a chunk must keep in the cache."""
    producers = graph.producers

    def activations(node) -> int:
        read = {v.name: v for v in node.inputs if v.name not in producers or not is_leaf(producers[v.name])}
        return sum(v.type.nbytes for v in (*read.values(), *node.outputs))
    return max((activations(n) for n in graph.ops()), default=0)


def _forced_rows() -> int | None:
    text = os.environ.get(ROWS_VARIABLE, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise CodegenError(f"{ROWS_VARIABLE} must be a count of rows (0 keeps every batch whole), got {text!r}")
    return int(text)
