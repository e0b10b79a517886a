"""plan_memory: place every intermediate buffer of a graph in one arena, reusing the bytes of dead buffers.

Intermediate buffers are the results of top-level non-leaf nodes that are not graph outputs (inputs, outputs,
weights and constants live elsewhere; values inside fused bodies stay in the kernel). A buffer is live from the
node that defines it through the last top-level node that reads it (a result nobody reads is live at its node
only). Walking the nodes in order, each node's results get blocks first, then the buffers whose last reader is
that node are released, so a result shares no bytes with the operands it reads, with one exception:

In place: a result of an elementwise node (the registry's `elementwise_like` trait) or of an elementwise fused region
takes over the block of an operand that is itself an arena buffer, dies at that node, and has the same element
count and byte size (equal bytes alone would let a broadcast operand be overwritten while still being read).
That is safe for kernels that read element i of every operand before writing element i of their results, which
is how elementwise kernels work.

Blocks are multiples of 64 bytes at 64-byte-aligned offsets. A new block takes the smallest free block that
fits (best fit; the lowest offset among equals), else grows a free block that ends the arena, else starts at the
end of the arena; released blocks merge with free neighbours. Zero-byte buffers get offset 0 and no block.

The plan goes into the graph attribute `memory_plan`: {"arena_bytes": the arena's size, "naive_bytes": the sum of
the buffers' sizes (one allocation each), "alignment": 64, "offsets": {value name: byte offset}}. The pass runs
last and renumbers temporaries first, so the names in the plan are the graph's final names.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from ..graph import Graph, Node
from ..registry import get_op, is_leaf
from .manager import PassContext, register_pass

ALIGNMENT = 64


@dataclass(frozen=True)
class Buffer:
    """An intermediate value: its byte size and the node positions where it is defined and last read."""

    name: str
    nbytes: int
    elements: int
    first: int
    last: int


def intermediate_buffers(graph: Graph) -> dict[str, Buffer]:
    """Every intermediate buffer of the graph by value name, with its live range over the top-level nodes."""
    returned = {v.name for v in graph.outputs}
    last_read: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last_read[v.name] = i
    return {v.name: Buffer(v.name, v.type.nbytes, v.type.size, i, max(i, last_read.get(v.name, i)))
            for i, node in enumerate(graph.nodes) if not is_leaf(node)
            for v in node.outputs if v.name not in returned}


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def in_place_capable(node: Node) -> bool:
    """Elementwise nodes and elementwise regions may write a result over an operand that dies there."""
    if node.op == "fused":
        return node.attr["kind"] == "elementwise"
    return get_op(node.op).elementwise_like


class _Arena:
    """Free blocks as sorted (offset, size) pairs below a growing end."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int]] = []
        self.end = 0

    def allocate(self, size: int) -> int:
        fits = [(s, o) for o, s in self.free if s >= size]
        if fits:
            block_size, offset = min(fits)
            self.free.remove((offset, block_size))
            if block_size > size:
                bisect.insort(self.free, (offset + size, block_size - size))
            return offset
        if self.free and sum(self.free[-1]) == self.end:  # a free block ends the arena: grow it
            offset, _ = self.free.pop()
        else:
            offset = self.end
        self.end = offset + size
        return offset

    def release(self, offset: int, size: int) -> None:
        k = bisect.bisect(self.free, (offset, size))
        if k < len(self.free) and offset + size == self.free[k][0]:
            size += self.free.pop(k)[1]
        if k > 0 and sum(self.free[k - 1]) == offset:
            offset, before = self.free.pop(k - 1)
            size += before
            k -= 1
        self.free.insert(k, (offset, size))


def plan(graph: Graph) -> tuple[dict[str, Any], int]:
    """The memory plan of `graph` (the `memory_plan` attribute) and how many results were placed in place."""
    buffers = intermediate_buffers(graph)
    arena, offsets, in_place = _Arena(), {}, 0
    blocks: dict[str, int] = {}  # the live buffers that own a block, by name -> block size
    for i, node in enumerate(graph.nodes):
        dying = list(dict.fromkeys(v.name for v in node.inputs if v.name in blocks and buffers[v.name].last == i))
        for v in node.outputs:
            buffer = buffers.get(v.name)
            if buffer is None:
                continue
            size = _aligned(buffer.nbytes)
            donor = _donor(node, buffer, buffers, dying) if in_place_capable(node) else None
            if donor is not None:
                dying.remove(donor)
                offsets[v.name] = offsets[donor]
                blocks[v.name] = blocks.pop(donor)
                in_place += 1
            elif size:
                offsets[v.name] = arena.allocate(size)
                blocks[v.name] = size
            else:
                offsets[v.name] = 0
            if buffer.last == i and v.name in blocks:  # never read: free right away
                dying.append(v.name)
        for name in dying:
            arena.release(offsets[name], blocks.pop(name))
    result = {"arena_bytes": arena.end, "naive_bytes": sum(b.nbytes for b in buffers.values()),
              "alignment": ALIGNMENT, "offsets": offsets}
    return result, in_place


def _donor(node: Node, buffer: Buffer, buffers: dict[str, Buffer], dying: list[str]) -> str | None:
    """The first operand dying at this node whose block the result can take over."""
    for name in dying:
        operand = buffers[name]
        if operand.nbytes == buffer.nbytes and operand.elements == buffer.elements and operand.nbytes:
            return name
    return None


@register_pass("plan_memory")
def plan_memory(graph: Graph, ctx: PassContext) -> Graph:
    """Record the arena plan in the graph attribute `memory_plan`; the report compares the arena with the naive sum."""
    graph = graph.renumbered()
    memory_plan, in_place = plan(graph)
    arena, naive = memory_plan["arena_bytes"], memory_plan["naive_bytes"]
    share = f" ({100 * arena / naive:.1f}% of it)" if naive else ""
    ctx.note(f"arena {arena} bytes for {len(memory_plan['offsets'])} buffer(s), naive sum {naive} bytes{share}; "
             f"{in_place} in place")
    ctx.details.update(arena_bytes=arena, naive_bytes=naive, in_place=in_place)
    return graph.replace(attributes={**graph.attributes, "memory_plan": memory_plan})
