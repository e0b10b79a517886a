"""Reductions (sum, mean, max, min, argmax, argmin over any axes), softmax, log_softmax, layer norm and reduction
regions: the loop nests of the row engine (rows.py explains the plan), emitted for both layouts of a domain."""
from __future__ import annotations

from contextlib import contextmanager
from math import prod
from typing import Iterator, Sequence

import llvmlite.ir as ir

from braze.ir.builder import GraphBuilder
from braze.ir.graph import Graph, Node
from braze.ir.registry import reduction_domain

from ..loops import I64, alloca, for_range, i64, loop_nest, vector_loop
from .base import (Kernel, KernelContext, KernelSpec, Unfusable, begin_kernel, broadcast_strides, coalesce,
                   contiguous_strides, iota, offset_of, register, store, thread_share, unit_loop, unsupported, widen)
from .rows import ROW_OPS, Element, RowPlan, Rows


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
        first, last = thread_share(b, self.k.tid, self.k.nthreads, prod(dims[d] for d in kept))
        with unit_loop(b, [dims[d] for d in kept], first, last, name="row") as index:
            bases = [offset_of(b, index, [w[d] for d in kept]) for w in self.walks]
            self._row(bases, 1)

    def _inner_kept(self) -> None:
        b, dims, width = self.b, self.dims, self.k.width
        outer = [d for d in range(len(dims) - 1) if self.marks[d] == "k"]
        n = dims[-1]
        groups, full = -(-n // width), n // width
        first, last = thread_share(b, self.k.tid, self.k.nthreads, prod(dims[d] for d in outer) * groups)
        with unit_loop(b, [dims[d] for d in outer] + [groups], first, last, name="rows") as index:
            bases = [offset_of(b, index[:-1], [w[d] for d in outer]) for w in self.walks]
            j0 = b.mul(index[-1], i64(width))

            def group(j: ir.Value, lanes: int) -> None:
                self._row([b.add(base, j) if w[-1] else base for base, w in zip(bases, self.walks)], lanes)

            def rest() -> None:
                with for_range(b, j0, i64(n), name="j") as j:
                    group(j, 1)
            if full == groups:
                group(j0, width)
            elif full == 0:
                rest()
            else:
                with b.if_else(b.icmp_signed("<", index[-1], i64(full))) as (then, otherwise):
                    with then:
                        group(j0, width)
                    with otherwise:
                        rest()

    # --- one row (or `lanes` rows side by side) --------------------------------------------------------------
    def _row(self, bases: list[ir.Value], lanes: int) -> None:
        plan, b = self.plan, self.b
        steps = [w[-1] for w in self.walks]
        rows = Rows(b, plan, self.ins, bases[:self.n_in], steps[:self.n_in], lanes)
        for stage in range(plan.stages):
            rows.compute_ready(stage)
            self._accumulate(rows, bases, lanes, [a for a in plan.accs if a.stage == stage])
        rows.compute_ready(plan.stages)
        self._store_elements(rows, bases, lanes)
        for n, v in enumerate(plan.body.outputs):
            if v.shape != plan.shape:
                store(b, widen(b, rows.cache[v.name], lanes), self.outs[n], bases[self.n_in + n], v.dtype)

    def _outer_reduced(self) -> list[int]:
        """The reduced axes the pass loops walk (all of them when rows are side by side, else all but the inner)."""
        red = [d for d in range(len(self.dims)) if self.marks[d] == "r"]
        return red if self.marks[-1] == "k" else red[:-1]

    @contextmanager
    def _walk(self, bases: list[ir.Value]) -> Iterator[list[ir.Value]]:
        """Nested loops over the reduced axes a pass walks; yields the offsets of every array at each point."""
        b = self.b
        axes = self._outer_reduced()
        with loop_nest(b, [self.dims[d] for d in axes], name="r") as index:
            yield [offset_of(b, index, [w[d] for d in axes], base) for base, w in zip(bases, self.walks)]

    def _element(self, rows: Rows, offsets: list[ir.Value], i: ir.Value | None, lanes: int) -> Element:
        b = self.b
        if i is not None:
            offsets = [b.add(o, i) if w[-1] else o for o, w in zip(offsets, self.walks)]
        index = offsets[self.index_array]
        if lanes > 1:
            index = widen(b, index, lanes)
            if i is not None:
                index = b.add(index, iota(I64, lanes))
        return Element(rows, offsets[:self.n_in], lanes, index)

    def _accumulate(self, rows: Rows, bases: list[ir.Value], lanes: int, accs) -> None:
        """One pass over the row updating `accs`; their finished values go into the row cache."""
        b, width = self.b, self.k.width
        split = self.marks[-1] == "r"
        slot_lanes = [width, width, 1] if split else [lanes]
        slots = []
        for acc in accs:
            init = [acc.reducer.init(n) for n in slot_lanes]
            cells = [[alloca(b, v.type) for v in state] for state in init]
            for state, cell in zip(init, cells):
                for v, c in zip(state, cell):
                    b.store(v, c)
            slots.append(cells)

        def update(element: Element, slot: int) -> None:
            for acc, cells in zip(accs, slots):
                state = tuple(b.load(c, typ=c.allocated_type) for c in cells[slot])
                new = acc.reducer.update(b, state, acc.term(element), element.index)
                for v, c in zip(new, cells[slot]):
                    b.store(v, c)
        with self._walk(bases) as offsets:
            if split:
                self._split_loop(rows, offsets, update)
            else:
                update(self._element(rows, offsets, None, lanes), 0)
        for acc, cells in zip(accs, slots):
            states = [tuple(b.load(c, typ=c.allocated_type) for c in cell) for cell in cells]
            if split:
                merged = acc.reducer.horizontal(b, acc.reducer.merge(b, states[0], states[1]))
                final = acc.reducer.merge(b, merged, states[2])
            else:
                final = states[0]
            rows.cache[acc.key] = acc.finish(b, acc.reducer.result(final), rows)

    def _split_loop(self, rows: Rows, offsets: list[ir.Value], update) -> None:
        """The contiguous inner axis of a row: two W-lane accumulators, then one W-lane step, then scalars."""
        b, width, n = self.b, self.k.width, self.dims[-1]
        pairs, singles = n // (2 * width) * 2 * width, n // width * width
        with for_range(b, 0, pairs, 2 * width, name="i") as i:
            update(self._element(rows, offsets, i, width), 0)
            update(self._element(rows, offsets, b.add(i, i64(width)), width), 1)
        if singles > pairs:
            update(self._element(rows, offsets, i64(pairs), width), 0)
        with for_range(b, singles, n, name="i.tail") as i:
            update(self._element(rows, offsets, i, 1), 2)

    def _store_elements(self, rows: Rows, bases: list[ir.Value], lanes: int) -> None:
        """The final pass: every result of the domain's shape, element by element."""
        plan, b = self.plan, self.b
        full = [(n, v) for n, v in enumerate(plan.body.outputs) if v.shape == plan.shape]
        if not full:
            return

        def put(element: Element, offsets: list[ir.Value]) -> None:
            for n, v in full:
                store(b, element.value(v.name), self.outs[n], offsets[self.n_in + n], v.dtype)
        with self._walk(bases) as offsets:
            if self.marks[-1] == "r" and lanes == 1:
                def body(i: ir.Value, width: int, offsets=offsets) -> None:
                    put(self._element(rows, offsets, i, width),
                        [b.add(o, i) if w[-1] else o for o, w in zip(offsets, self.walks)])
                vector_loop(b, 0, self.dims[-1], self.k.width, body, name="s")
            else:
                put(self._element(rows, offsets, None, lanes), offsets)


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
