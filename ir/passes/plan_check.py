"""check_memory_plan: validate a graph's `memory_plan` attribute against the graph, trusting nothing in it.

A plan decides where native code writes, and one that arrives with a graph (IR text, an artifact) may be
malformed or hostile, so before codegen uses it the plan must be well formed and safe:
- a dict of exactly alignment (64), arena_bytes, naive_bytes and offsets (value name -> byte offset), each count
  a non-negative int and the arena within the tensor size limit (BRAZE_MAX_TENSOR_BYTES);
- offsets for exactly the graph's intermediate buffers (`intermediate_buffers`: an alias of another value's storage,
  which the graph's nodes decide, has none), each aligned and inside the arena, and naive_bytes their total;
- no two buffers live at the same time share a byte, except a result written in place over an operand that dies
  at its node, with plan_memory's rule (`in_place_capable`, the same element count and bytes, the same offset, not
  read through a view).
The sweep keeps the live buffers' byte ranges sorted and disjoint, so each new buffer is compared with its two
neighbours only: O(n log n) bisection for a graph of n buffers, whatever the plan claims.
"""
from __future__ import annotations

import bisect
from typing import Any, NoReturn

from ..errors import VerifyError
from ..graph import Graph, Node
from ..types import max_tensor_bytes
from .plan_memory import (ALIGNMENT, Buffer, in_place_capable, intermediate_buffers, read_through_views,
                          storage_aliases)

_KEYS = ("alignment", "arena_bytes", "naive_bytes", "offsets")


def check_memory_plan(graph: Graph) -> dict[str, Any]:
    """The memory plan of a verified graph, after checking it (see the module doc); VerifyError names the values."""
    plan = graph.attributes.get("memory_plan")
    if not isinstance(plan, dict):
        _fail(graph, "is missing" if plan is None else f"must be a dict, got {_kind(plan)}")
    if sorted(plan) != sorted(_KEYS):
        _fail(graph, f"must have exactly the keys {', '.join(_KEYS)}, got {', '.join(map(str, sorted(plan)))}")
    alignment, arena, naive = (_count(graph, key, plan[key]) for key in _KEYS[:3])
    if alignment != ALIGNMENT:
        _fail(graph, f"alignment must be {ALIGNMENT}, got {alignment}")
    limit = max_tensor_bytes()
    if arena > limit:
        _fail(graph, f"arena_bytes {arena} is more than the limit of {limit} bytes (BRAZE_MAX_TENSOR_BYTES)")
    offsets = _offsets(graph, plan["offsets"])
    storage = storage_aliases(graph)
    buffers = intermediate_buffers(graph, storage)
    _check_coverage(graph, buffers, offsets)
    total = sum(b.nbytes for b in buffers.values())
    if naive != total:
        _fail(graph, f"naive_bytes is {naive}, but the intermediate buffers take {total} bytes")
    for name, buffer in buffers.items():
        offset = offsets[name]
        if offset % ALIGNMENT or offset + buffer.nbytes > arena:
            _fail(graph, f"%{name} ({buffer.nbytes} bytes) at offset {offset} is not a {ALIGNMENT}-byte aligned "
                         f"place inside the {arena}-byte arena")
    _check_disjoint(graph, buffers, offsets, storage)
    return plan


def _fail(graph: Graph, message: str) -> NoReturn:
    raise VerifyError(f"graph @{graph.name}: memory_plan {message}")


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def _count(graph: Graph, what: str, value: Any) -> int:
    """A non-negative int (bool, float and str are refused, though Python would compare or convert them)."""
    if type(value) is not int or value < 0:
        _fail(graph, f"{what} must be a non-negative int, got {_kind(value)}")
    return value


def _offsets(graph: Graph, offsets: Any) -> dict[str, int]:
    if not isinstance(offsets, dict):
        _fail(graph, f"offsets must be a dict of value name -> byte offset, got {_kind(offsets)}")
    for name, offset in offsets.items():
        if not isinstance(name, str):
            _fail(graph, f"offsets are keyed by value names, got {_kind(name)}")
        _count(graph, f"the offset of %{name}", offset)
    return offsets


def _check_coverage(graph: Graph, buffers: dict[str, Buffer], offsets: dict[str, int]) -> None:
    missing, extra = sorted(set(buffers) - set(offsets)), sorted(set(offsets) - set(buffers))
    if missing:
        _fail(graph, f"has no offset for the intermediate value(s) {', '.join('%' + n for n in missing)}")
    if extra:
        _fail(graph, f"places {', '.join('%' + n for n in extra)}, which are not intermediate values of the graph "
                     f"(inputs, outputs, leaves and aliases of another value's storage have no place of their own)")


class _LiveBytes:
    """The byte ranges [start, end) of the live non-empty buffers, sorted and pairwise disjoint."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ranges: list[tuple[int, int, str]] = []

    def insert(self, start: int, end: int, name: str) -> str | None:
        """Add a range; returns the name of a live buffer it would overlap instead (and adds nothing)."""
        k = bisect.bisect_left(self.starts, start)
        if k > 0 and self.ranges[k - 1][1] > start:
            return self.ranges[k - 1][2]
        if k < len(self.ranges) and self.ranges[k][0] < end:
            return self.ranges[k][2]
        self.starts.insert(k, start)
        self.ranges.insert(k, (start, end, name))
        return None

    def owner(self, start: int) -> str | None:
        k = bisect.bisect_left(self.starts, start)
        return self.ranges[k][2] if k < len(self.ranges) and self.starts[k] == start else None

    def rename(self, start: int, name: str) -> None:
        k = bisect.bisect_left(self.starts, start)
        self.ranges[k] = self.ranges[k][:2] + (name,)

    def remove(self, start: int, name: str) -> None:
        k = bisect.bisect_left(self.starts, start)
        if k < len(self.ranges) and self.ranges[k][2] == name:
            del self.starts[k], self.ranges[k]


def _check_disjoint(graph: Graph, buffers: dict[str, Buffer], offsets: dict[str, int],
                    storage: dict[str, str]) -> None:
    """Walk the nodes: each node's results take their bytes while its operands are still live, then the buffers
    whose live range ends at the node leave."""
    ending: dict[int, list[Buffer]] = {}
    for buffer in buffers.values():
        ending.setdefault(buffer.last, []).append(buffer)
    live = _LiveBytes()
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            buffer = buffers.get(v.name)
            if buffer is None or not buffer.nbytes:
                continue
            start = offsets[v.name]
            donor = live.owner(start)
            if donor is not None and _writes_in_place(node, i, buffers[donor], buffer, storage):
                live.rename(start, v.name)
                continue
            other = live.insert(start, start + buffer.nbytes, v.name)
            if other is not None:
                _fail(graph, f"puts %{v.name} and %{other} in overlapping bytes while both are live: "
                             f"{_placed(buffers[other], offsets)} and {_placed(buffer, offsets)}")
        for buffer in ending.get(i, ()):
            live.remove(offsets[buffer.name], buffer.name)


def _writes_in_place(node: Node, index: int, operand: Buffer, result: Buffer, storage: dict[str, str]) -> bool:
    """plan_memory's in-place rule: an elementwise result over an operand of the same size (read by its name or an
    alias) that dies here."""
    read = {storage.get(v.name, v.name) for v in node.inputs}
    strided = {storage.get(name, name) for name in read_through_views(node)}
    return (in_place_capable(node) and operand.last == index and operand.name in read - strided
            and operand.nbytes == result.nbytes and operand.elements == result.elements)


def _placed(buffer: Buffer, offsets: dict[str, int]) -> str:
    start = offsets[buffer.name]
    return (f"%{buffer.name} at bytes [{start}, {start + buffer.nbytes}) live over nodes "
            f"{buffer.first}-{buffer.last}")
