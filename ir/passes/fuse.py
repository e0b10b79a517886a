"""fuse: group nodes into fusion regions; each region becomes one `fused` node (ir/ops/fused.py) holding the
region's nodes as its body, and codegen compiles each region into one kernel.

Which nodes take part (all by the registry's traits):
- elementwise: ops whose `elementwise_like` trait is set (category "elementwise", and broadcast_to);
- lookups: ops with a `table` trait (gather) join elementwise regions as elementwise ops whose table operand is
  read where their indices point: a region takes them in when both the table and the indices come from outside it
  (the indices possibly through broadcast_to members), so the kernel reads both from memory. grid_sample's four
  corner gathers, the broadcast of their indices over the channels and the weighted sum are then one kernel, where
  each gather and each broadcast index was written to memory and read back;
- reductions: ops with a `reduces` trait (sum, mean, max, min, argmax, argmin, softmax, log_softmax, layer_norm);
  each reduces its first operand, of shape S, over a set of axes (its *domain* is S and the axes);
- anchors: ops with an `anchor` trait: matmul and linear (kind "gemm"), conv2d (kind "conv");
- attention: each `attention` node takes in the movement ops that only feed its q, k and v (slices, reshapes and
  transposes of a QKV projection) and those that only carry its result on (the transpose and reshape back to
  (batch, L, heads * Ev)), as long as the operands stay strided views with unit stride along their last axis and
  the result one too (the registry's `view` and `unview` traits, ir/views.py): its kernel then reads and writes
  through those views instead of the ops copying them (kind "attention");
- views into elementwise regions: an elementwise region takes in the chains of view ops only its members read
  (slices, transposes, reshapes), when the composed view of the operand is contiguous or broadcast along the
  innermost axis of the region's domain: its kernel loads them from the chain's source (`x.chunk(2, -1)` gating
  itself costs no copy);
- movement: each join (concat, stack: the `joins` trait) and each view op left alone that copies (not the
  reshapes, which alias their operand: plan_memory) takes in the chains of view ops into its operands that it alone
  reads, whatever their strides: one strided copy per operand (kind "movement"; torch.roll is one kernel);
- leaves (param, flag, constant) and every other op never join a region. Scalar constants read by a region are
  copied into its body (a constant left with no reader outside any body disappears); other leaves are operands.

How regions grow: in graph order, each elementwise, lookup or reduction node starts a region of its own and then
merges with the regions that produce its operands: an anchor's region first (the node becomes part of an
epilogue), then reduction regions, then elementwise regions, earliest first. Anchors merge with nothing that
produces them.
A merge is legal when the merged region satisfies its kind's rule and creates no cycle between regions:
- "elementwise" (only elementwise members and lookups): the iteration space is the broadcast of the members' result
  shapes, and every value leaving the region has exactly that shape;
- "reduction" (at least one reduction): every reduction has the same domain (S, axes); every elementwise
  member's result broadcasts to S or has S's reduced shape (with or without the kept unit axes), and so does
  every value leaving the region. Softmax, layer norm and sum/mean written longhand, and a residual add before a
  layer norm, each become one such region;
- "gemm" / "conv": the anchor is the region's first op and the only anchor; every other member is an
  elementwise op with the anchor's result shape that reads a value computed in the region (bias add, activation,
  residual add). Its other operands come from outside the region and so cannot depend on the anchor's result.
  Once every region has grown, an elementwise region whose values only the epilogue reads, all of the anchor's
  result shape, joins it after the anchor (momentum * buffer, added to a weight gradient), so the epilogue
  computes it instead of reading a temporary;
- no cycles: regions A -> B merge only if B is not reachable from A through a third region (a depth-first search
  of the region graph, whose edges are the data edges between regions). Nodes are emitted in a topological order
  of the groups (each finished region, and each node outside a region), the group with the earliest original
  position first among those ready, so the output is deterministic; a group left unordered (a cycle between
  regions) is a bug the pass reports.

A region's operands are the values its members read but do not define, in order of first use; its results are
the member values read outside the region or returned by the graph, in graph order. The fused node states the
region's domain: `shape` (the iteration space, a reduction's operand shape or the anchor's result shape) and
`axes` (the reduced axes; empty unless the region reduces). A region of one node (or one whose values are all
unused) stays as plain nodes, except an elementwise node reading a scalar constant beside another operand: as a
region its body holds the constant, which the kernel then uses as a number. The pass never changes weights.
"""
from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..builder import GraphBuilder
from ..errors import BrazeError
from ..graph import Graph, Node, Value, sorted_attrs
from ..ops._common import reduced_shape
from ..registry import get_op, reduction_domain
from ..views import View, broadcast, contiguous, follow, follow_back, inner_stride, unit_last
from .manager import PassContext, register_pass

# Which producer region an elementwise or reduction node joins first.
_PRIORITY = {"gemm": 0, "conv": 0, "reduction": 1, "elementwise": 2}

Domain = tuple[tuple[int, ...], tuple[int, ...]]


def node_kind(node: Node) -> str:
    """How fusion sees a node: "leaf", "gemm", "conv", "reduction", "elementwise", "lookup" or "opaque"."""
    op = get_op(node.op)
    if op.is_leaf:
        return "leaf"
    if op.anchor is not None:
        return op.anchor
    if op.is_reduction:
        return "reduction"
    if op.table is not None:
        return "lookup"
    return "elementwise" if op.elementwise_like else "opaque"


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    return len(shape) <= len(target) and all(d in (1, t) for d, t in zip(reversed(shape), reversed(target)))


@dataclass
class _Region:
    """A group of nodes growing into one kernel: its kind and its members."""

    kind: str
    members: list[int]  # node indices, ascending (a topological order)


class _Fuser:
    """Grows regions over one graph, then rebuilds the graph with a fused node per region."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes = graph.nodes
        self.kinds = [node_kind(n) for n in self.nodes]
        self.producer = {v.name: i for i, n in enumerate(self.nodes) for v in n.outputs}
        self.readers: dict[str, set[int]] = {}
        for i, n in enumerate(self.nodes):
            for v in n.inputs:
                self.readers.setdefault(v.name, set()).add(i)
        self.returned = {v.name for v in graph.outputs}
        self.region_of: dict[int, int] = {}
        self.regions: dict[int, _Region] = {}
        # the region graph: regions (keyed by their first member) and the data edges between them, both ways
        self.succ: dict[int, set[int]] = {}
        self.pred: dict[int, set[int]] = {}

    # --- growing ----------------------------------------------------------------------------------------------
    def grow(self) -> None:
        """Form the regions, visiting nodes in graph order (see the module docstring)."""
        for i, kind in enumerate(self.kinds):
            if kind == "leaf":
                continue
            self.regions[i], self.region_of[i] = _Region("elementwise" if kind == "lookup" else kind, [i]), i
            self.pred[i] = {self.region_of[p] for p in self._producers(i)}
            self.succ[i] = set()
            for r in self.pred[i]:
                self.succ[r].add(i)
            if kind not in ("elementwise", "reduction", "lookup"):
                continue
            for p in sorted(self._producers(i), key=self._priority):
                if self.region_of[p] != self.region_of[i]:
                    self._try_merge(self.region_of[p], self.region_of[i])

    def absorb_epilogue_operands(self) -> None:
        """Pull into each gemm/conv region the elementwise regions that only compute operands of its epilogue (a
        momentum buffer scaled before the gradient GEMM adds to it): they run inside the epilogue instead of
        writing and re-reading a temporary. Such a region joins when all its members have the anchor's result
        shape, every value it lets out is read by the gemm region alone (not returned), and no third region sits
        between the two. Its members follow the anchor in the body, in graph order."""
        for key in sorted(k for k, r in self.regions.items() if r.kind in ("gemm", "conv")):
            for producer in sorted(self.pred.get(key, ())):
                target = self.regions.get(key)
                if target is not None and self._feeds_only_epilogue(producer, target):
                    self._absorb(producer, key)

    def _feeds_only_epilogue(self, producer: int, target: _Region) -> bool:
        region = self.regions.get(producer)
        if region is None or region.kind != "elementwise" or len(target.members) < 2 \
                or any(self.kinds[m] == "lookup" for m in region.members):
            return False
        shape, inside = self.nodes[target.members[0]].outputs[0].shape, set(target.members[1:])
        own = set(region.members)
        for m in region.members:
            if self.nodes[m].out.shape != shape:
                return False
            for v in self.nodes[m].outputs:
                outside = self.readers.get(v.name, set()) - own
                if v.name in self.returned or not outside <= inside:
                    return False
        return not self._reaches_around(producer, self.region_of[target.members[0]])

    def _absorb(self, producer: int, key: int) -> None:
        """Region `producer` joins gemm region `key`: the anchor stays first, the rest in graph order."""
        target, joining = self.regions[key], self.regions.pop(producer)
        members = [target.members[0]] + sorted(target.members[1:] + joining.members)
        for m in joining.members:
            self.region_of[m] = key
        self.regions[key] = _Region(target.kind, members)
        self._contract(key, producer)

    def _producers(self, i: int) -> list[int]:
        """The non-leaf nodes defining node i's operands, once each, in operand order."""
        found = (self.producer.get(v.name) for v in self.nodes[i].inputs)
        return list(dict.fromkeys(p for p in found if p is not None and self.kinds[p] != "leaf"))

    def _priority(self, p: int) -> tuple[int, int]:
        """Anchor regions first, then reduction, then elementwise regions; earliest producer first."""
        return _PRIORITY.get(self.regions[self.region_of[p]].kind, len(_PRIORITY)), p

    def _try_merge(self, a: int, b: int) -> None:
        """Merge region a into region b's (a produces a value b reads) when the result is a legal region."""
        members = sorted(self.regions[a].members + self.regions[b].members)
        kind = self._merged_kind(self.regions[a].kind, self.regions[b].kind, members)
        if kind is None or self._reaches_around(a, b):
            return
        keep, drop = min(a, b), max(a, b)
        for m in self.regions[drop].members:
            self.region_of[m] = keep
        del self.regions[drop]
        self.regions[keep] = _Region(kind, members)
        self._contract(keep, drop)

    def _contract(self, keep: int, drop: int) -> None:
        """Region `drop` joins `keep` in the region graph: its edges become keep's, without a self-loop."""
        succ, pred = self.succ.pop(drop), self.pred.pop(drop)
        for s in succ:
            self.pred[s].discard(drop)
            self.pred[s].add(keep)
        for p in pred:
            self.succ[p].discard(drop)
            self.succ[p].add(keep)
        self.succ[keep] |= succ
        self.pred[keep] |= pred
        for edges in (self.succ, self.pred):
            edges[keep].discard(keep)
            edges[keep].discard(drop)

    def _reaches_around(self, a: int, b: int) -> bool:
        """Whether b is reachable from a other than by their direct edge: merging them would create a cycle."""
        stack = [r for r in self.succ[a] if r != b]
        seen = set(stack)
        while stack:
            r = stack.pop()
            if r == b:
                return True
            for s in self.succ[r]:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return False

    def _merged_kind(self, producer: str, consumer: str, members: list[int]) -> str | None:
        """The kind of the region of `members` formed from a producer and a consumer region, or None if illegal."""
        kinds = (producer, consumer)
        if "opaque" in kinds or consumer in ("gemm", "conv"):
            return None
        if producer in ("gemm", "conv"):
            return producer if self._is_epilogue(members) else None
        kind = "reduction" if "reduction" in kinds else "elementwise"
        if not self._lookups_read_memory(kind, members):
            return None
        domain = self._domain(kind, members)
        return kind if domain is not None and self._fits(domain, members) else None

    def _lookups_read_memory(self, kind: str, members: list[int]) -> bool:
        """Lookups (gather) join elementwise regions only, with their table from outside the region and their
        indices too, or broadcast from a value from outside: the kernel reads both from memory, so a bad index is
        found again by scanning the indices after the loop, and no member computes what a lookup reads."""
        lookups = [m for m in members if self.kinds[m] == "lookup"]
        if not lookups:
            return True
        if kind != "elementwise":
            return False
        inside = set(members)
        for m in lookups:
            node = self.nodes[m]
            table = get_op(node.op).table
            for position, value in enumerate(node.inputs):
                p = self.producer.get(value.name)
                while position != table and p in inside and self.nodes[p].op == "broadcast_to":
                    p = self.producer.get(self.nodes[p].inputs[0].name)
                if p in inside:
                    return False
        return True

    def _is_epilogue(self, members: list[int]) -> bool:
        """The first member is the anchor; every other one is elementwise, of its shape, reading a region value."""
        if self.kinds[members[0]] not in ("gemm", "conv"):
            return False
        shape, chain = self.nodes[members[0]].outputs[0].shape, {members[0]}
        for m in members[1:]:
            node = self.nodes[m]
            if self.kinds[m] != "elementwise" or node.out.shape != shape:
                return False
            if not any(self.producer.get(v.name) in chain for v in node.inputs):
                return False
            chain.add(m)
        return True

    def _domain(self, kind: str, members: list[int]) -> Domain | None:
        """The region's iteration space (shape and reduced axes), or None when its members disagree."""
        if kind == "reduction":
            domains = {reduction_domain(self.nodes[m]) for m in members if self.kinds[m] == "reduction"}
            return domains.pop() if len(domains) == 1 else None
        try:
            computing = [m for m in members if self.kinds[m] in ("elementwise", "lookup")]  # not view ops taken in
            return tuple(np.broadcast_shapes(*(self.nodes[m].out.shape for m in computing))), ()
        except ValueError:
            return None

    def _fits(self, domain: Domain, members: list[int]) -> bool:
        """Elementwise results broadcast to the domain's shape or have its reduced shape; values that leave the
        region have exactly one of those shapes (always the full shape in an elementwise region)."""
        shape, axes = domain
        reduced = {reduced_shape(shape, axes, True), reduced_shape(shape, axes, False)} if axes else set()
        member_set = set(members)
        for m in members:
            out = self.nodes[m].outputs[0].shape
            if self.kinds[m] in ("elementwise", "lookup") and not (out in reduced or _broadcasts_to(out, shape)):
                return False
            if self._escapes(m, member_set) and out != shape and out not in reduced:
                return False
        return True

    def _escapes(self, m: int, member_set: set[int]) -> bool:
        """Whether a result of node m is read outside the region or returned by the graph."""
        return any(v.name in self.returned or not self.readers.get(v.name, set()) <= member_set
                   for v in self.nodes[m].outputs)

    def absorb_elementwise_views(self) -> None:
        """Pull into each elementwise region the view ops (slice, transpose, the reshapes) that only its members
        read, chains of them included, when the region's kernel can read their results through strided views of
        the operand they start from: contiguous (or broadcast) along the innermost axis of the region's domain.
        The chunks of `x.chunk(2, -1)` gating each other, or the halves of a rotary embedding, then cost no copies."""
        for key in sorted(k for k, r in self.regions.items() if r.kind == "elementwise"):
            region = self.regions[key]
            shape = self._stated_domain(region)[0]
            taken: list[int] = []
            def loads_rows(view: View, operand: Value) -> bool:
                return inner_stride(broadcast(view, operand.shape, shape), shape) in (0, 1)
            for m in region.members:
                table = get_op(self.nodes[m].op).table
                for position in range(len(self.nodes[m].inputs)):
                    if position != table:   # a table is read where its indices point, from its own buffer
                        taken += self._view_chain_into(m, position, set(region.members) | set(taken), loads_rows)
            for m in dict.fromkeys(taken):
                del self.regions[self.region_of[m]]
                self._contract(key, m)
                self.region_of[m] = key
            if taken:
                self.regions[key] = _Region("elementwise", sorted(set(region.members) | set(taken)))

    def absorb_attention_views(self) -> None:
        """Give each attention node a region with the view chains into its q, k, v and out of its result."""
        for i, node in enumerate(self.nodes):
            if node.op != "attention" or self.region_of.get(i) != i or len(self.regions[i].members) != 1:
                continue
            members = [m for position in range(3)
                       for m in self._view_chain_into(i, position, {i}, lambda view, v: unit_last(view, v.shape))]
            members = list(dict.fromkeys(members + self._view_chain_out_of(i)))  # q and k may be one value
            if not members:
                continue
            for m in members:
                del self.regions[self.region_of[m]]
                self.region_of[m] = i
            self.regions[i] = _Region("attention", sorted(set(members) | {i}))

    def _read_only_by(self, value: Value, readers: set[int]) -> bool:
        return value.name not in self.returned and self.readers.get(value.name, set()) <= readers

    def _view_chain_into(self, i: int, position: int, readers: set[int],
                         accept: Callable[[View, Value], bool]) -> list[int]:
        """The longest chain of view ops (each a region of its own), each value read by the next op alone and the
        last by `readers` alone, ending in operand `position` of node i, whose composition `accept`s (given the
        view of the operand in the buffer the chain starts from, and the operand)."""
        chain: list[int] = []
        value = self.nodes[i].inputs[position]
        while True:
            p = self.producer.get(value.name)
            if p is None or self.kinds[p] != "opaque" or get_op(self.nodes[p].op).view is None \
                    or not self._read_only_by(value, readers if not chain else {chain[0]}) \
                    or self.region_of.get(p) != p or len(self.regions[p].members) != 1:
                break
            chain.insert(0, p)
            value = self.nodes[p].inputs[0]
        operand = self.nodes[i].inputs[position]
        while chain:
            source = self.nodes[chain[0]].inputs[0]
            view = follow(contiguous(source.shape), [self.nodes[m] for m in chain], get_op)
            if view is not None and accept(view, operand):
                break
            chain.pop(0)
        return chain

    def _view_chain_out_of(self, i: int) -> list[int]:
        """The longest chain of bijective view ops from node i's result, each value read by the next op alone,
        through which the result is still written with unit stride along its last axis."""
        chain: list[int] = []
        value = self.nodes[i].outputs[0]
        while True:
            readers = self.readers.get(value.name, set())
            if len(readers) != 1 or value.name in self.returned:
                break
            (r,) = readers
            if self.kinds[r] != "opaque" or get_op(self.nodes[r].op).unview is None or self.region_of.get(r) != r:
                break
            chain.append(r)
            value = self.nodes[r].outputs[0]
        while chain:
            last = self.nodes[chain[-1]].outputs[0]
            view = follow_back(contiguous(last.shape), [self.nodes[m] for m in chain], get_op)
            if view is not None and unit_last(view, self.nodes[i].outputs[0].shape):
                break
            chain.pop()
        return chain

    def absorb_movement_chains(self) -> None:
        """Give each join (concat, stack: the registry's `joins` trait) and each view op a region with the chains
        of view ops into its operands that it alone reads (consumers first, so each takes its longest chains): the
        region's kernel copies every operand once, from where its chain starts through the composed strided view,
        instead of once per op. torch.roll's two slices and their concat are one copy. An aliasing op (a reshape)
        copies nothing itself (plan_memory), so it takes no chain: two reshapes in a row stay free."""
        for i in reversed(range(len(self.nodes))):
            node, op = self.nodes[i], get_op(self.nodes[i].op)
            if self.kinds[i] != "opaque" or not (op.joins or op.view is not None) or op.aliases \
                    or self.region_of.get(i) != i or len(self.regions[i].members) != 1:
                continue
            positions = range(len(node.inputs)) if op.joins else (0,)
            last = op.view if op.view is not None and not op.joins else None

            def copies(view: View, v: Value, node: Node = node, last=last) -> bool:
                return last is None or last(node, view) is not None  # a view op's own step composes too
            chains = [m for p in positions for m in self._view_chain_into(i, p, {i}, copies)]
            for m in dict.fromkeys(chains):
                del self.regions[m]
                self._contract(i, m)
                self.region_of[m] = i
            if chains:
                self.regions[i] = _Region("movement", sorted(set(chains) | {i}))

    # --- rebuilding -------------------------------------------------------------------------------------------
    def fused_regions(self) -> list[_Region]:
        """Regions that become fused nodes: more than one member and at least one value leaving, or one elementwise
        node that reads a scalar constant beside an operand (its body then holds the constant, which the kernel
        computes with as a number: x ** 3 as multiplies, where a plain pow node read 3 from memory and called libm's
        powf per element)."""
        out = []
        for region in self.regions.values():
            member_set = set(region.members)
            if not any(self._escapes(m, member_set) for m in region.members):
                continue
            if len(region.members) > 1 or (region.kind == "elementwise" and self._with_scalar(region.members[0])):
                out.append(region)
        return sorted(out, key=lambda r: r.members[0])

    def _with_scalar(self, i: int) -> bool:
        """Whether node i reads a scalar constant and some other operand."""
        scalars = [self._scalar_constant(v) is not None for v in self.nodes[i].inputs]
        return any(scalars) and not all(scalars)

    def emission_order(self, regions: list[_Region]) -> list[frozenset[int]]:
        """Groups of node indices (a region, or one node) in a topological order of the graph of groups, the ready
        group with the earliest first member first (Kahn's algorithm with a heap)."""
        group_of = list(range(len(self.nodes)))  # each group is keyed by its earliest member
        for region in regions:
            for m in region.members:
                group_of[m] = min(region.members)
        members: dict[int, list[int]] = {}
        for i, g in enumerate(group_of):
            members.setdefault(g, []).append(i)
        succ: dict[int, set[int]] = {g: set() for g in members}
        for i, n in enumerate(self.nodes):
            for v in n.inputs:
                p = self.producer.get(v.name)
                if p is not None and group_of[p] != group_of[i]:
                    succ[group_of[p]].add(group_of[i])
        indegree = Counter(s for targets in succ.values() for s in targets)
        ready = [g for g in members if not indegree[g]]
        heapq.heapify(ready)
        order: list[frozenset[int]] = []
        while ready:
            g = heapq.heappop(ready)
            order.append(frozenset(members[g]))
            for s in succ[g]:
                indegree[s] -= 1
                if not indegree[s]:
                    heapq.heappush(ready, s)
        if len(order) < len(members):
            stuck = sorted(i for g in members if indegree[g] for i in members[g])
            raise BrazeError(f"fuse: regions around nodes {stuck} depend on each other (a cycle); "
                             f"this is a bug in the fuse pass")
        return order

    def build(self) -> tuple[Graph, list[_Region]]:
        """The graph with a fused node per region (in a topological order), and the regions it formed."""
        regions = self.fused_regions()
        by_first = {min(r.members): r for r in regions}
        copied: set[int] = set()
        emitted: list[tuple[int, Node]] = []
        for group in self.emission_order(regions):
            first = min(group)
            if first in by_first:
                node, constants = self._fused_node(by_first[first])
                emitted.append((first, node))
                copied |= constants
            else:
                emitted.append((first, self.nodes[first]))
        absorbed = {m for r in regions for m in r.members}
        kept = tuple(n for i, n in emitted if not (i in copied and self._copied_away(n, absorbed)))
        return self.graph.replace(nodes=kept), regions

    def _copied_away(self, constant: Node, absorbed: set[int]) -> bool:
        """Whether every reader of a copied scalar constant is in a region (and the graph does not return it)."""
        name = constant.out.name
        return name not in self.returned and self.readers.get(name, set()) <= absorbed

    def _scalar_constant(self, value: Value) -> int | None:
        """The index of the constant leaf defining `value` when it is a scalar (which is copied into bodies)."""
        p = self.producer.get(value.name)
        return p if p is not None and self.nodes[p].op == "constant" and value.shape == () else None

    def _fused_node(self, region: _Region) -> tuple[Node, set[int]]:
        """The fused node of a region and the scalar constants copied into its body."""
        member_set = set(region.members)
        external = [v for m in region.members for v in self.nodes[m].inputs
                    if self.producer.get(v.name) not in member_set]
        # Scalar constants are copied in, unless the region would then have no operand at all.
        copy = any(self._scalar_constant(v) is None for v in external)
        b = GraphBuilder(region.kind)
        env: dict[str, Value] = {}
        operands: list[Value] = []
        copied: set[int] = set()
        for m in region.members:
            node = self.nodes[m]
            for v in node.inputs:
                if v.name in env:
                    continue
                constant = self._scalar_constant(v) if copy else None
                if constant is not None:
                    leaf = self.nodes[constant]
                    env[v.name] = b.add_node("constant", (), leaf.attr, loc=leaf.loc)[0]
                    copied.add(constant)
                else:
                    env[v.name] = b.input(f"in{len(operands)}", v.type)
                    operands.append(v)
            outs = b.add_node(node.op, [env[v.name] for v in node.inputs], node.attr, loc=node.loc)
            env.update(zip((v.name for v in node.outputs), outs))
        results = [v for m in region.members if self._escapes(m, member_set) for v in self.nodes[m].outputs]
        body = b.finish([env[v.name] for v in results])
        shape, axes = self._stated_domain(region)
        attrs = get_op("fused").check_attrs({"kind": region.kind, "body": body, "shape": shape, "axes": axes})
        return Node("fused", tuple(operands), tuple(results), sorted_attrs(attrs), self._anchor(region).loc), copied

    def _anchor(self, region: _Region) -> Node:
        """The node a region is built around: its attention node, a movement region's last op, else its first
        member."""
        if region.kind == "attention":
            return next(self.nodes[m] for m in region.members if self.nodes[m].op == "attention")
        return self.nodes[region.members[-1 if region.kind == "movement" else 0]]

    def _stated_domain(self, region: _Region) -> Domain:
        """The domain the fused node states: the anchor's result shape for gemm/conv regions, the attention's for an
        attention region, else _domain's."""
        if region.kind in ("gemm", "conv", "attention", "movement"):
            return self._anchor(region).outputs[0].shape, ()
        domain = self._domain(region.kind, region.members)
        if domain is None:
            raise BrazeError(f"fuse: the {region.kind} region of nodes {region.members} has no single domain; "
                             f"this is a bug in the fuse pass")
        return domain


def fuse_regions(graph: Graph) -> tuple[Graph, list[tuple[str, list[int]]]]:
    """The graph with its fusion regions formed, and each region's kind and node indices in the input graph."""
    fuser = _Fuser(graph)
    fuser.grow()
    fuser.absorb_epilogue_operands()
    fuser.absorb_elementwise_views()
    fuser.absorb_attention_views()
    fuser.absorb_movement_chains()
    result, regions = fuser.build()
    return result, [(r.kind, r.members) for r in regions]


@register_pass("fuse")
def fuse(graph: Graph, ctx: PassContext) -> Graph:
    """Form fusion regions (see the module docstring); the report counts regions by kind."""
    result, regions = fuse_regions(graph)
    kinds = Counter(kind for kind, _ in regions)
    summary = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items())) or "none"
    ctx.note(f"{len(regions)} region(s) ({summary}) holding {sum(len(m) for _, m in regions)} node(s)")
    ctx.details["regions"] = dict(sorted(kinds.items()))
    return result
