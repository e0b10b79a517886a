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
is how elementwise kernels work; an operand an elementwise region reads through a view op (a slice, a transpose in
its body) is never a donor.

Aliases: the result of an aliasing node (the registry's `aliases` trait: the reshapes) is no buffer of its own
but a second name for its operand's storage (`storage_aliases`): the operand's buffer, if it is one, stays live
through the last read of either name, and codegen gives the result the operand's place and runs no kernel for the
node, so a reshape between two kernels moves no bytes. Where the result is a graph output, the operand (when it
is computed by the graph and not an output itself) is written straight into the output's buffer instead of the
arena. An elementwise node reading an alias may write in place over the storage when every name of it dies there.

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


def storage_aliases(graph: Graph) -> dict[str, str]:
    """Value name -> the value whose storage it takes, for the results of aliasing nodes (the registry's `aliases`
    trait; a chain of them leads to the first value that is none) and for values computed to be aliased as a graph
    output: where an output is such a result, its operand's storage (when computed here, not an output and not
    taken yet) is the output's buffer instead."""
    returned = {v.name for v in graph.outputs}
    computed = {v.name for node in graph.nodes if not is_leaf(node) for v in node.outputs}
    storage: dict[str, str] = {}
    for node in graph.nodes:
        if is_leaf(node) or not get_op(node.op).aliases or len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        operand, result = node.inputs[0], node.out
        if (result.type.dtype, result.type.nbytes) != (operand.type.dtype, operand.type.nbytes):
            continue
        root = storage.get(operand.name, operand.name)
        if result.name not in returned:
            storage[result.name] = root
        elif root in computed and root not in returned:
            storage.update((name, result.name) for name, at in list(storage.items()) if at == root)
            storage[root] = result.name
    return storage


def names_storage(node: Node, storage: dict[str, str]) -> bool:
    """Whether the node computes nothing, its result naming its operand's storage (see storage_aliases)."""
    if is_leaf(node) or not get_op(node.op).aliases:
        return False
    result = node.outputs[0].name
    return result in storage or storage.get(node.inputs[0].name) == result


def intermediate_buffers(graph: Graph, storage: dict[str, str] | None = None) -> dict[str, Buffer]:
    """Every intermediate buffer of the graph by value name, with its live range over the top-level nodes (a read
    of an alias reads its storage's buffer); `storage` is storage_aliases(graph), computed when not given."""
    storage = storage_aliases(graph) if storage is None else storage
    returned = {v.name for v in graph.outputs}
    last_read: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last_read[storage.get(v.name, v.name)] = i
    return {v.name: Buffer(v.name, v.type.nbytes, v.type.size, i, max(i, last_read.get(v.name, i)))
            for i, node in enumerate(graph.nodes) if not is_leaf(node)
            for v in node.outputs if v.name not in returned and v.name not in storage}


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def in_place_capable(node: Node) -> bool:
    """Elementwise nodes and elementwise regions may write a result over an operand that dies there."""
    if node.op == "fused":
        return node.attr["kind"] == "elementwise"
    return get_op(node.op).elementwise_like


def read_through_views(node: Node) -> set[str]:
    """The operands a fused region's body reads through view ops (a slice, a transpose) or as a lookup's table
    (gather's x): element i of the result is not computed from their element i, so no result may be written over
    them."""
    if node.op != "fused":
        return set()
    body = node.attr["body"]
    viewed = {v.name for n in body.nodes if get_op(n.op).view is not None for v in n.inputs}
    viewed |= {n.inputs[get_op(n.op).table].name for n in body.nodes if get_op(n.op).table is not None}
    return {outer.name for outer, inner in zip(node.inputs, body.inputs) if inner.name in viewed}


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
    storage = storage_aliases(graph)
    buffers = intermediate_buffers(graph, storage)
    arena, offsets, in_place = _Arena(), {}, 0
    blocks: dict[str, int] = {}  # the live buffers that own a block, by name -> block size
    for i, node in enumerate(graph.nodes):
        read = (storage.get(v.name, v.name) for v in node.inputs)
        dying = list(dict.fromkeys(name for name in read if name in blocks and buffers[name].last == i))
        for v in node.outputs:
            buffer = buffers.get(v.name)
            if buffer is None:
                continue
            size = _aligned(buffer.nbytes)
            donor = _donor(node, buffer, buffers, dying, storage) if in_place_capable(node) else None
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


def _donor(node: Node, buffer: Buffer, buffers: dict[str, Buffer], dying: list[str],
           storage: dict[str, str]) -> str | None:
    """The first operand dying at this node whose block the result can take over."""
    strided = {storage.get(name, name) for name in read_through_views(node)}
    for name in dying:
        if name in strided:
            continue
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
