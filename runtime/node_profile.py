"""Where a compiled graph's time goes: each computing node of a planned graph compiled and timed on its own.

    for row in profile_nodes(step.executable.graph)[:10]:
        print(row)

The entry point runs every kernel in one native call, so it has no per-kernel clock; instead each top-level node
(a kernel, or a fused region) becomes a graph of its own, its operands as inputs (constants kept), compiled on the
same path and run on random operands of the node's types (integers zero, so indices stay in range). The times are
what each kernel costs alone, with its operands warm in the cache: a profile, not a split of one call's time.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from braze.ir.builder import GraphBuilder
from braze.ir.graph import Graph, Node, Value
from braze.ir.registry import is_leaf




@dataclass(frozen=True)
class NodeTime:
    """One node's best time over the runs of its own compiled graph."""

    index: int
    op: str
    kind: str
    shapes: str
    seconds: float

    def __str__(self) -> str:
        return f"{self.seconds * 1e3:9.3f} ms  #{self.index:<4} {self.op:<20} {self.kind:<12} {self.shapes}"


def node_graph(graph: Graph, node: Node) -> Graph:
    """`node` alone: its constant and param operands kept (a param with its weight, so a GEMM reads it prepared as
    in the model, not packed per call), its other operands as inputs, its results out."""
    b = GraphBuilder(f"{graph.name}_node")
    producers = graph.producers
    weights = {}
    for value in dict.fromkeys(node.inputs):
        producer = producers.get(value.name)
        if producer is not None and _bound(graph, producer):
            b.append(producer)
            if producer.op == "param":
                weights[producer.attr["path"]] = graph.weights[producer.attr["path"]]
        else:
            b.input(value.name, value.type)
    b.append(node)
    return b.finish(list(node.outputs), weights=weights)


def _bound(graph: Graph, producer: Node) -> bool:
    """Whether the graph binds the producer's value: a constant, or a param whose weight the graph carries."""
    return producer.op == "constant" or (producer.op == "param" and producer.attr["path"] in graph.weights)


def _operand(value: Value, rng: np.random.Generator) -> np.ndarray:
    dtype = value.type.dtype.numpy
    if value.type.dtype.is_float:
        return rng.standard_normal(value.shape).astype(dtype)
    return np.zeros(value.shape, dtype)


def profile_nodes(graph: Graph, *, threads: int | None = None, runs: int = 5, skip: Sequence[str] = ("reshape",),
                  clock: Callable[[], float] = time.perf_counter) -> list[NodeTime]:
    """The best of `runs` timed calls of every computing node of a planned graph (ops in `skip` left out: views
    that cost nothing in the whole graph), slowest first. On a shared machine, threads=1 with
    clock=time.thread_time counts only this thread's CPU time, which other processes barely disturb."""
    from .compile_path import compile_graph
    rng = np.random.default_rng(0)
    times = []
    for index, node in enumerate(graph.nodes):
        if is_leaf(node) or node.op in skip:
            continue
        alone = node_graph(graph, node)
        executable = compile_graph(alone, pipeline=["plan_memory"], threads=threads)
        inputs = [_operand(v, rng) for v in alone.inputs]
        outputs = executable.run(inputs)  # reused: a fresh result would add its page faults to the time
        best = float("inf")
        for _ in range(runs):
            start = clock()
            executable.run(inputs, out=outputs)
            best = min(best, clock() - start)
        shapes = ", ".join("x".join(map(str, v.shape)) for v in node.inputs)
        times.append(NodeTime(index, node.op, str(node.attr.get("kind", "")), shapes, best))
    return sorted(times, key=lambda t: -t.seconds)


__all__ = ["NodeTime", "node_graph", "profile_nodes"]
