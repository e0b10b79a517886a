"""Whether a graph runs its batch in chunks, and the graph of one chunk.

A graph whose every node computes its rows independently (ir/rows.py) can run its batch a few rows at a time, each
chunk through every kernel before the next begins: the entry point loops over the chunks, offsetting the inputs'
and outputs' pointers, and the activations of one chunk, planned in an arena of the chunk's size, stay in the L2
cache from one kernel to the next instead of going out to L3 or memory. On several threads, with at least two
chunks per thread, each thread claims chunks (codegen/claims.py) and runs them through every kernel by itself, in
a slot of the arena of its own (the runtime allocates one per thread): no barrier between kernels, and each core
keeps its own chunk's activations. With fewer chunks all threads run each chunk's kernels together.

The CNN at batch 64 writes 8.4 MB after its first conv and reads it back for the second. On a Xeon (2 MB L2),
medians side by side: one thread, 16 chunks of 4 rows, 6.07 -> 5.67 ms; two threads running their own chunks
3.38 -> 3.16 and 3.13 -> 2.96 ms, where running each chunk (of 8 rows) on both threads together had gained 2% and
smaller shared chunks lost (a barrier per kernel and chunk: 4 rows 3.98 against 3.85 ms whole). Graphs whose
weights do not fit beside a chunk lost (the MLP at batch 64 in chunks of 16 rows, 0.485 -> 0.525 ms) or gained
nothing (a transformer layer at batch 8, chunks of 1 to 4 rows).

It pays where the batch's activations overflow the L2 while the weights fit beside a chunk's (each chunk reads
them all again). chunk_rows takes the fewest chunks that bring the largest node's operands and results to half
of one L2, at most MAX_CHUNKS. BRAZE_BATCH_ROWS overrides
the choice: 0 keeps every batch whole, a positive count cuts into chunks of that many rows where the graph allows.
A kernel built for fewer rows may block its work differently, so results match the whole batch's to rounding.
"""
from __future__ import annotations

import os

from braze.ir.errors import CodegenError
from braze.ir.graph import Graph
from braze.ir.passes import optimize
from braze.ir.registry import is_leaf
from braze.ir.rows import batch_of, rows_graph
from braze.ir.train_step import updated_leaves

from .cache_sizes import host_cache_sizes

MAX_CHUNKS = 16
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
    of `l2` bytes, at most MAX_CHUNKS chunks; None when the activations fit in it whole, or the weights do not fit
    in its other half."""
    batch = batch_of(graph)
    if batch is None or batch < 2:
        return None
    peak, budget = peak_bytes(graph), l2 // 2
    if peak <= l2 or sum(p.type.nbytes for p in graph.params()) > budget:
        return None
    divisors = [c for c in range(2, min(batch, MAX_CHUNKS) + 1) if batch % c == 0]
    if not divisors:
        return None
    return batch // next((c for c in divisors if peak // c <= budget), divisors[-1])


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
