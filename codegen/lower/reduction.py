"""Reductions (sum, mean, max, min, argmax, argmin over any axes), softmax, log_softmax, layer norm and reduction
regions: the loop nests of the row engine (rows.py explains the plan), emitted for both layouts of a domain.

Float sums (sum, mean, the sums inside softmax, log_softmax and layer norm) are blocked when a row is long: every
accumulator lane adds at most BLOCK terms in sequence before its block's sum is folded into a compensated total
(reducers.py) and the lane starts again from zero. A row's error is then about that of a sum of BLOCK terms, plus a
few ulps: with the 2 x W lanes of a contiguous row, n terms of float32 have a relative error of at most about
BLOCK * eps (8e-6 for BLOCK = 64) in the worst case and a few 1e-7 typically, for any n (numpy's pairwise sum is
similar). Rows with at most BLOCK terms per lane (up to about 2000 contiguous float32 elements at W = 16) compile
to the same unblocked loop as before; blocking costs one fold per BLOCK loop iterations.
"""
from __future__ import annotations

from contextlib import contextmanager
from math import prod
from typing import Callable, Iterator, Sequence

import llvmlite.ir as ir

from braze.ir.builder import GraphBuilder
from braze.ir.graph import Graph, Node, Value
from braze.ir.registry import reduction_domain

from ..loops import I64, alloca, for_range, i64, loop_nest, vector_loop
from .base import (Kernel, KernelContext, KernelSpec, Unfusable, begin_kernel, broadcast_strides, claimed_unit_loop,
                   coalesce, contiguous_strides, iota, masked_tail, offset_of, register, store, store_first,
                   unit_loop, unsupported, widen)
from .rows import ROW_OPS, Element, RowPlan, Rows

BLOCK = 64  # terms an accumulator lane adds in sequence before a fold (module doc)
# Vectors of neighbouring rows a one-pass, one-accumulator reduction over leading axes takes side by side (sum, mean,
# max over axis 0): one vector's accumulator waits on its own last add every step, so WIDE_GROUP of them overlap.
# Each row's terms still add in the same order. One Xeon thread, sum over axis 0 of 64 x 4096 float32 (in L2):
# 25.9 us with one vector (torch 16.8).
WIDE_GROUP = 4


def single_body(node: Node) -> Graph:
    """A node as a one-node body graph over inputs in0, in1, ... (the row engine's input for plain nodes)."""
    b = GraphBuilder(node.op)
    inputs = [b.input(f"in{i}", v.type) for i, v in enumerate(node.inputs)]
    return b.finish(list(b.add_node(node.op, inputs, node.attr)), verify=False)


def _layout(plan: RowPlan) -> tuple[list[int], list[list[int]], list[object]]:
    """Coalesced axes of the domain, with the strides of every input, output and (for arg reducers) of the
    element index; labels "k" (kept) and "r" (reduced)."""
    shape, axes = plan.shape, plan.axes
    kept = [a for a in range(len(shape)) if a not in axes]
    flat = dict(zip(kept, contiguous_strides(plan.flat)))
    row_strides = [flat.get(a, 0) for a in range(len(shape))]
    strides = [broadcast_strides(v.shape, shape) if plan.info[v.name].space == "S" else row_strides
               for v in plan.body.inputs]
    strides += [contiguous_strides(shape) if v.shape == shape else row_strides for v in plan.body.outputs]
    reduced = dict(zip(axes, contiguous_strides([shape[a] for a in axes])))
    strides.append([reduced.get(a, 0) for a in range(len(shape))])
    dims, walks, marks = coalesce(shape, strides, ["r" if a in axes else "k" for a in range(len(shape))])
    if not dims:
        return [1], [[0] for _ in strides], ["r"]
    return dims, walks, marks


class _Emitter:
    """Emits the row engine's loops for one plan into a kernel."""

    def __init__(self, k: Kernel, plan: RowPlan, ins: Sequence[ir.Value], outs: Sequence[ir.Value]) -> None:
        self.k, self.b, self.plan, self.ins, self.outs = k, k.builder, plan, list(ins), list(outs)
        self.dims, self.walks, self.marks = _layout(plan)
        self.n_in = len(ins)
        self.index_array = len(self.walks) - 1

    def emit(self) -> None:
        if any(self.plan.shape[a] == 0 for a in range(len(self.plan.shape)) if a not in self.plan.axes):
            return
        (self._inner_reduced if self.marks[-1] == "r" else self._inner_kept)()

    # --- the two layouts ------------------------------------------------------------------------------------
    def _inner_reduced(self) -> None:
        b, dims = self.b, self.dims
        kept = [d for d in range(len(dims)) if self.marks[d] == "k"]
        with claimed_unit_loop(self.k, [dims[d] for d in kept], name="row") as index:
            bases = [offset_of(b, index, [w[d] for d in kept]) for w in self.walks]
            self._row(bases, 1)

    def _inner_kept(self) -> None:
        b, dims, width = self.b, self.dims, self.k.width
        outer = [d for d in range(len(dims) - 1) if self.marks[d] == "k"]
        n = dims[-1]
        wide = width * WIDE_GROUP if len(self.plan.accs) == 1 and self.plan.stages == 1 else width
        bulk = n // wide * wide   # rows in wide groups; the others in groups of W
        groups = bulk // wide + -(-(n - bulk) // width)
        full = bulk // wide + (n - bulk) // width
        with claimed_unit_loop(self.k, [dims[d] for d in outer] + [groups], name="rows") as index:
            bases = [offset_of(b, index[:-1], [w[d] for d in outer]) for w in self.walks]
            unit = index[-1]
            j0 = b.add(i64(bulk), b.mul(b.sub(unit, i64(bulk // wide)), i64(width)))

            def group(j: ir.Value, lanes: int, valid: int | None = None) -> None:
                self._row([b.add(base, j) if w[-1] else base for base, w in zip(bases, self.walks)], lanes, valid)

            def narrow() -> None:
                if full == groups:
                    group(j0, width)
                elif full == 0:
                    self._rest(group, j0, n)
                else:
                    with b.if_else(b.icmp_signed("<", unit, i64(full))) as (then, otherwise):
                        with then:
                            group(j0, width)
                        with otherwise:
                            self._rest(group, j0, n)
            if not bulk:
                narrow()
            elif bulk == n:
                group(b.mul(unit, i64(wide)), wide)
            else:
                with b.if_else(b.icmp_signed("<", unit, i64(bulk // wide))) as (then, otherwise):
                    with then:
                        group(b.mul(unit, i64(wide)), wide)
                    with otherwise:
                        narrow()

    def _rest(self, group: Callable[..., None], j0: ir.Value, n: int) -> None:
        """The last n % W rows: side by side in one masked group, or one by one when there is one. One by one,
        softmax over axis 0 of 77 columns cost 1.33 ns per element against 0.43 at 64 (AVX-512, one Zen 4 thread),
        of 13 columns 4.66; as a group 0.52 and 1.08 (AVX2 code 1.16 and 2.11 -> 0.99 and 0.91)."""
        b, width = self.b, self.k.width
        if masked_tail(n, width):
            group(j0, width, masked_tail(n, width))
            return
        with for_range(b, j0, i64(n), name="j") as j:
            group(j, 1)

    # --- one row (or `lanes` rows side by side) --------------------------------------------------------------
    def _row(self, bases: list[ir.Value], lanes: int, valid: int | None = None) -> None:
        """One row, or `lanes` rows side by side (only the first `valid` of them when given: the last group)."""
        plan, b = self.plan, self.b
        steps = [w[-1] for w in self.walks]
        rows = Rows(b, plan, self.ins, bases[:self.n_in], steps[:self.n_in], lanes, self.outs, valid)
        for stage in range(plan.stages):
            rows.compute_ready(stage)
            early = plan.stores_in_last_pass and stage == plan.stages - 1
            self._accumulate(rows, bases, lanes, [a for a in plan.accs if a.stage == stage], plan.full if early else [])
        rows.compute_ready(plan.stages)
        if not plan.stores_in_last_pass:
            self._store_elements(rows, bases, lanes, plan.full)
        for n, v in enumerate(plan.body.outputs):
            if v.shape != plan.shape:
                self._store(widen(b, rows.cache[v.name], lanes), n, bases[self.n_in + n], v, valid)

    def _outer_reduced(self) -> list[int]:
        """The reduced axes the pass loops walk (all of them when rows are side by side, else all but the inner)."""
        red = [d for d in range(len(self.dims)) if self.marks[d] == "r"]
        return red if self.marks[-1] == "k" else red[:-1]

    @contextmanager
    def _walk(self, bases: list[ir.Value], block: int = 0, fold: Callable[[], None] | None = None
              ) -> Iterator[list[ir.Value]]:
        """Nested loops over the reduced axes a pass walks; yields the offsets of every array at each point. With a
        block, the points go in blocks of that many, `fold()` emitted after each block."""
        b = self.b
        axes = self._outer_reduced()
        dims = [self.dims[d] for d in axes]
        if not block or prod(dims) <= block:
            with loop_nest(b, dims, name="r") as index:
                yield [offset_of(b, index, [w[d] for d in axes], base) for base, w in zip(bases, self.walks)]
            if fold is not None:
                fold()
            return
        points = prod(dims)
        with for_range(b, 0, points, block, name="r.block") as start:
            end = b.add(start, i64(block))
            end = b.select(b.icmp_signed("<", end, i64(points)), end, i64(points))
            with unit_loop(b, dims, start, end, name="r") as index:
                yield [offset_of(b, index, [w[d] for d in axes], base) for base, w in zip(bases, self.walks)]
            fold()

    def _element(self, rows: Rows, offsets: list[ir.Value], i: ir.Value | None, lanes: int, valid: int | None = None
                 ) -> Element:
        """The element at inner index i (None: the row's own offsets) of `lanes` lanes, the first `valid` of them
        only when given (a row's partial last vector)."""
        b = self.b
        if i is not None:
            offsets = [b.add(o, i) if w[-1] else o for o, w in zip(offsets, self.walks)]
        index = offsets[self.index_array]
        if lanes > 1:
            index = widen(b, index, lanes)
            if i is not None:
                index = b.add(index, iota(I64, lanes))
        return Element(rows, offsets[:self.n_in], lanes, index, offsets[self.n_in:self.index_array], valid)

    def _put(self, element: Element, full: list[tuple[int, Value]]) -> None:
        """Store the listed results of the domain's shape at the element (all computed before any is stored)."""
        values = [element.value(v.name) for _, v in full]
        for (n, v), value in zip(full, values):
            self._store(value, n, element.targets[n], v, element.valid)

    def _store(self, value: ir.Value, n: int, at: ir.Value, result: Value, valid: int | None) -> None:
        """Store a value of result n at offset `at`: its first `valid` lanes only when given (a partial group)."""
        if valid is None:
            store(self.b, value, self.outs[n], at, result.dtype)
        else:
            store_first(self.b, value, self.outs[n], at, result.dtype, valid, self.k.target)

    def _accumulate(self, rows: Rows, bases: list[ir.Value], lanes: int, accs,
                    full: list[tuple[int, Value]]) -> None:
        """One pass over the row updating `accs` (their finished values go into the row cache) and storing the
        results in `full` at each element (rows.py: the last pass, when they need none of its sums)."""
        b, width = self.b, self.k.width
        split = self.marks[-1] == "r"
        slot_lanes = ([width, width, 1] if self._scalar_tail() else [width, width]) if split else [lanes]
        slots = [[_cells(b, acc.reducer.init(n)) for n in slot_lanes] for acc in accs]
        blocked, long_inner, block = self._blocking(accs)
        totals = [[_cells(b, acc.reducer.init(n) * 2) for n in slot_lanes] if on else None
                  for acc, on in zip(accs, blocked)]

        def update(element: Element, slot: int) -> None:
            for acc, cells in zip(accs, slots):
                term = acc.term(element)
                state = _load(b, cells[slot])
                updated = acc.reducer.update(b, state, term, element.index)
                if element.mask is not None:  # the lanes past the row keep their state
                    updated = tuple(b.select(element.mask, new, old) for new, old in zip(updated, state))
                _store(b, updated, cells[slot])
                if acc.keep is not None:
                    self._store(term, acc.keep, element.targets[acc.keep], self.plan.body.outputs[acc.keep],
                                element.valid)
            self._put(element, full)

        def fold(which: Sequence[int]) -> None:
            """Move the block sums of the listed slots into their compensated totals."""
            for acc, cells, total in zip(accs, slots, totals):
                for slot in which if total is not None else ():
                    _store(b, acc.reducer.fold(b, _load(b, total[slot]), _load(b, cells[slot])), total[slot])
                    _store(b, acc.reducer.init(slot_lanes[slot]), cells[slot])
        every = range(len(slot_lanes))
        with self._walk(bases, block, (lambda: fold(every)) if block else None) as offsets:
            if split:
                self._split_loop(rows, offsets, update, (lambda: fold((0, 1))) if long_inner else None)
                if long_inner:
                    fold(every)
            else:
                update(self._element(rows, offsets, None, lanes, rows.valid), 0)
        for acc, cells, total in zip(accs, slots, totals):
            states = [_load(b, cell) for cell in cells] if total is None else \
                [acc.reducer.settle(b, _load(b, cell)) for cell in total]
            final = acc.reducer.horizontal(b, acc.reducer.merge(b, states[0], states[1])) if split else states[0]
            if len(states) == 3:
                final = acc.reducer.merge(b, final, states[2])
            rows.cache[acc.key] = acc.finish(b, acc.reducer.result(final), rows)

    def _blocking(self, accs) -> tuple[list[bool], bool, int]:
        """How a pass sums in blocks (module doc): which accumulators do, whether the contiguous inner loop is cut
        into blocks itself, and else how many walk points make a block (0: no blocks, the row is short)."""
        width, n = self.k.width, self.dims[-1]
        split = self.marks[-1] == "r"
        per_point = max(n // (2 * width) + 1, n % width) if split else 1  # terms a lane adds per walk point
        blocked = [acc.reducer.compensated for acc in accs]
        if not any(blocked) or per_point * prod(self.dims[d] for d in self._outer_reduced()) <= BLOCK:
            return [False] * len(accs), False, 0
        if split and n // (2 * width) > BLOCK:
            return blocked, True, 0
        return blocked, False, max(BLOCK // per_point, 1)

    def _split_loop(self, rows: Rows, offsets: list[ir.Value], update,
                    fold: Callable[[], None] | None = None) -> None:
        """The contiguous inner axis of a row: two W-lane accumulators, then one W-lane step into the first, then the
        last n % W elements into the second as one vector, its lanes masked (or, base.masked_tail, one by one into a
        scalar accumulator). With `fold`, the two-accumulator loop goes in blocks of BLOCK steps, fold() emitted
        after each. One by one, the tail made softmax over rows of 77 float32 2x slower per element than over rows of
        197, and rows of 13 8x slower (AVX-512, one Zen 4 thread): 0.94, 0.45 and 3.6 ns; masked, 0.42, 0.35-0.42 and
        0.89 (AVX2 code: 0.96, 0.71-0.75 and 2.1-2.2 ns; masked, 0.79-0.80, 0.69-0.75 and 1.1)."""
        b, width, n = self.b, self.k.width, self.dims[-1]
        pairs, singles = n // (2 * width) * 2 * width, n // width * width

        def two(start: ir.Value | int, end: ir.Value | int) -> None:
            with for_range(b, start, end, 2 * width, name="i") as i:
                update(self._element(rows, offsets, i, width), 0)
                update(self._element(rows, offsets, b.add(i, i64(width)), width), 1)
        if fold is None:
            two(0, pairs)
        else:
            step = 2 * width * BLOCK
            with for_range(b, 0, pairs, step, name="i.block") as start:
                end = b.add(start, i64(step))
                two(start, b.select(b.icmp_signed("<", end, i64(pairs)), end, i64(pairs)))
                fold()
        if singles > pairs:
            update(self._element(rows, offsets, i64(pairs), width), 0)
        if self._scalar_tail():
            with for_range(b, singles, n, name="i.tail") as i:
                update(self._element(rows, offsets, i, 1), 2)
        elif n > singles:
            update(self._element(rows, offsets, i64(singles), width, n - singles), 1)

    def _scalar_tail(self) -> bool:
        """Whether the last n % W elements of a contiguous row go one by one (a few) rather than as one masked
        vector (split_loop)."""
        n, width = self.dims[-1], self.k.width
        return n % width != 0 and not masked_tail(n, width)

    def _store_elements(self, rows: Rows, bases: list[ir.Value], lanes: int, full: list[tuple[int, Value]]) -> None:
        """The final pass: the results of the domain's shape (`full`), element by element."""
        if not full:
            return
        with self._walk(bases) as offsets:
            if self.marks[-1] == "r" and lanes == 1:
                def body(i: ir.Value, width: int, valid: int | None = None, offsets=offsets) -> None:
                    self._put(self._element(rows, offsets, i, width, valid), full)
                n = self.dims[-1]
                vector_loop(self.b, 0, n, self.k.width, body, name="s", partial=masked_tail(n, self.k.width))
            else:
                self._put(self._element(rows, offsets, None, lanes, rows.valid), full)


def _cells(b: ir.IRBuilder, state: Sequence[ir.Value]) -> list[ir.Value]:
    """Stack cells holding a reducer state, initialized to it."""
    cells = [alloca(b, v.type) for v in state]
    _store(b, state, cells)
    return cells


def _load(b: ir.IRBuilder, cells: Sequence[ir.Value]) -> tuple[ir.Value, ...]:
    return tuple(b.load(c, typ=c.allocated_type) for c in cells)


def _store(b: ir.IRBuilder, state: Sequence[ir.Value], cells: Sequence[ir.Value]) -> None:
    for v, c in zip(state, cells):
        b.store(v, c)


def emit_rows(k: Kernel, plan: RowPlan, ins: Sequence[ir.Value], outs: Sequence[ir.Value]) -> None:
    """Emit the row engine's loop nest for `plan`, reading body inputs from `ins` and writing outputs to `outs`."""
    _Emitter(k, plan, ins, outs).emit()


def lower_rows(node: Node, ctx: KernelContext, body: Graph, domain: tuple[tuple[int, ...], tuple[int, ...]],
               op: str) -> KernelSpec:
    """A kernel running `body` (inputs = node operands, outputs = node results) with the row engine."""
    plan = RowPlan(domain[0], domain[1], body)
    k = begin_kernel(ctx, node.outputs, node.inputs)
    emit_rows(k, plan, k.ins, k.outs)
    return k.finish(op)


@register(*ROW_OPS)
def lower_reduction(node: Node, ctx: KernelContext) -> KernelSpec:
    """A reducing node (layer norm included: y = (x - mean) / sqrt(var + eps) * weight + bias, as the reference):
    the row engine over its domain with the node as a one-node body."""
    try:
        return lower_rows(node, ctx, single_body(node), reduction_domain(node), node.op)
    except Unfusable as exc:
        raise unsupported(node, str(exc)) from None


__all__ = ["emit_rows", "lower_reduction", "lower_rows", "single_body"]
