"""The row engine: reductions, the softmax family, layer norm and reduction regions as one threaded loop nest.

A domain is a shape S and the axes A reduced over; a *row* is one point of the kept axes. Every value of a body
(a single reduction node, or a fused region of reductions with one domain and their elementwise producers and
consumers) is read per element of S through broadcast strides, or per row (reduced results, and anything constant
along A). Each reduction becomes an accumulator; accumulators whose terms depend on the results of others run in
later passes over the row (softmax: max, then the sum of exp(x - max); layer norm: the mean, then the variance).
Terms are recomputed from the inputs in every pass, so nothing of shape S is ever stored except the results, with
one exception: a softmax that is a result stores its exponentials there as its sum pass computes them, and the
final pass scales them in place, so that each is computed once (an exponential costs 12-16 vector instructions,
the scaling one multiply: softmax over 128 rows of 256 took 20 us on one Zen 4 thread, a layer norm 8).
A final pass computes and stores the results of shape S, unless none of them needs the last pass's sums: then
that pass stores them as it goes (batch norm's backward sums the input gradient it stores), one walk over the
rows less, which counts when a row outgrows the caches. Results of the reduced shape are stored once per row.

Axes are coalesced with their kept/reduced labels. When the innermost axis is reduced (softmax over the last axis,
layer norm, sums over trailing axes), a row's elements are contiguous: passes run W lanes at a time with two
vector accumulators, the row's last n % W elements as one vector whose lanes past the row are masked (a lone last
element as a scalar), folded by a shuffle tree at the end of the pass. When the innermost axis is kept (sums over
leading axes, softmax over axis 1 of NCHW), W neighbouring rows are processed side by side, one lane each (the
last n % W rows too, the group's other lanes masked), and the passes walk the reduced axes with strided vector
loads: no horizontal work. Threads split the rows (groups of W rows in the second case). Row coordinates advance
like an odometer.

A body the engine cannot run as one nest raises Unfusable (fused.py then lowers the region op by op).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Callable, Sequence

import llvmlite.ir as ir

from braze.ir.graph import Graph, Node
from braze.ir.ops._common import reduced_shape
from braze.ir.registry import get_op, reduction_domain
from braze.ir.types import DType, float32, float64, int64

from ..loops import lane_mask
from .base import Unfusable, broadcast_strides, broadcasts_to, constant, lanes_of, load, register_type, widen
from .elementwise import ELEMENTWISE, apply_node
from .reducers import Reducer

# The row engine's rules for reducing ops (the registry's `reduces` trait says which ops reduce and over which
# axes): a plain reduction is one accumulator of this reducer; a normalizing op's result has the domain's shape and
# is computed per element from row statistics.
_REDUCERS = {"sum": "sum", "mean": "sum", "max": "max", "min": "min", "argmax": "argmax", "argmin": "argmin"}
_NORMALIZING = ("softmax", "log_softmax", "layer_norm")
ROW_OPS = (*_REDUCERS, *_NORMALIZING)


@dataclass
class Info:
    """How a body value is read: per element of S (space "S", broadcast strides) or per row in the layout of the
    reduced shape without kept axes (space "R"); `row` when constant along the reduced axes; `ready` is the first
    pass in which it can be computed."""

    space: str
    row: bool
    ready: int


@dataclass
class Acc:
    """An accumulator: its reducer, its term (evaluated per element), its pass, and how its state becomes the row
    value stored under `key`."""

    key: str
    reducer: Reducer
    term: Callable[["Element"], ir.Value]
    stage: int
    finish: Callable[[ir.IRBuilder, ir.Value, "Rows"], ir.Value] = field(default=lambda b, v, rows: v)
    keep: int | None = None  # the result every term is stored into as the pass goes (a softmax's exponentials)


class RowPlan:
    """The analysis of a body over one domain: value infos, accumulators by pass, what is stored where."""

    def __init__(self, shape: tuple[int, ...], axes: tuple[int, ...], body: Graph) -> None:
        self.shape, self.axes, self.body = shape, axes, body
        self.keep, self.flat = reduced_shape(shape, axes, True), reduced_shape(shape, axes, False)
        self.lead = axes == tuple(range(len(axes)))
        self.count = prod(shape[a] for a in axes)
        self.info: dict[str, Info] = {}
        self.nodes: dict[str, Node] = {}
        self.accs: list[Acc] = []
        self.kept: dict[str, int] = {}  # softmax name -> the result holding its exponentials after its sum pass
        self.input_index = {v.name: k for k, v in enumerate(body.inputs)}
        per_row = self._per_row_inputs()
        for v in body.inputs:
            self.info[v.name] = Info("R", True, 0) if v.name in per_row else self._input_info(v.shape)
        for node in body.nodes:
            self._analyze(node)
        self.stages = max((a.stage for a in self.accs), default=-1) + 1
        for v in body.outputs:
            if v.shape != shape and not (self.info[v.name].row and v.shape in (self.keep, self.flat)):
                raise Unfusable(f"result %{v.name} of shape {v.shape} is neither the domain nor a reduced shape")
        self.full = [(n, v) for n, v in enumerate(body.outputs) if v.shape == shape]
        # the results of the domain's shape are stored by the last accumulating pass when none needs its sums
        self.stores_in_last_pass = bool(self.full) and all(self.info[v.name].ready < self.stages for _, v in self.full)

    def _per_row_inputs(self) -> set[str]:
        """Inputs of the rows' shape that meet only values of that shape: read once per row. Numpy broadcasting
        would also run them along the domain's last axis when its length matches (a C-channel vector beside a
        domain ending in C columns), but nothing of the domain's shape reads them, so both readings agree."""
        if self.flat in ((), self.shape):
            return set()
        roots = {v.name: {v.name} for v in self.body.inputs if v.shape == self.flat}
        along_domain: set[str] = set()
        for node in self.body.nodes:
            reached = set().union(*(roots.get(v.name, ()) for v in node.inputs))
            if node.op in ELEMENTWISE and node.out.shape == self.flat:
                roots[node.out.name] = reached
            else:
                along_domain |= reached
        return {v.name for v in self.body.inputs if v.shape == self.flat} - along_domain

    def _input_info(self, shape: tuple[int, ...]) -> Info:
        if broadcasts_to(shape, self.shape):
            strides = broadcast_strides(shape, self.shape)
            return Info("S", all(strides[a] == 0 for a in self.axes), 0)
        if shape == self.flat:
            return Info("R", True, 0)
        raise Unfusable(f"an operand of shape {shape} fits neither the domain {self.shape} nor its rows")

    def _as_s(self, info: Info, shape: tuple[int, ...]) -> bool:
        """Whether a value can be read per element of S (an R value only when its numpy broadcast says so)."""
        return info.space == "S" or self.lead or shape == ()

    def _analyze(self, node: Node) -> None:
        out = node.outputs[0]
        self.nodes[out.name] = node
        ins = [self.info[v.name] for v in node.inputs]
        if node.op == "constant":
            self.info[out.name] = Info("S", True, 0)
        elif get_op(node.op).is_reduction:
            self._reduction(node, ins)
        elif node.op in ELEMENTWISE:
            self.info[out.name] = self._elementwise(node, ins)
        else:
            raise Unfusable(f"{node.op} cannot be computed row by row")

    def _elementwise(self, node: Node, ins: list[Info]) -> Info:
        ready = max((i.ready for i in ins), default=0)
        row = all(i.row for i in ins)
        if all(self._as_s(i, v.shape) for i, v in zip(ins, node.inputs)):
            if not broadcasts_to(node.out.shape, self.shape):
                raise Unfusable(f"{node.op} result {node.out.type} does not broadcast to {self.shape}")
            return Info("S", row, ready)
        if all(i.space == "R" and v.shape == node.out.shape or v.shape == () for i, v in zip(ins, node.inputs)):
            return Info("R", True, ready)
        raise Unfusable(f"{node.op} mixes per-row values with elements in a way numpy broadcasting does not")

    def _reduction(self, node: Node, ins: list[Info]) -> None:
        if reduction_domain(node) != (self.shape, self.axes) or not self._as_s(ins[0], node.inputs[0].shape):
            raise Unfusable(f"{node.op} reduces another domain than {self.shape} over {self.axes}")
        if node.op not in _REDUCERS and node.op not in _NORMALIZING:
            raise Unfusable(f"the row engine has no rule for the reduction {node.op}")
        x, out = node.inputs[0], node.out
        stage = max(i.ready for i in ins)
        if node.op in _REDUCERS:
            self._plain(node, x, stage)
            keep = node.attr.get("keepdim", False) or out.shape == self.keep
            self.info[out.name] = Info("S" if keep else "R", True, stage + 1)
            return
        if node.op == "layer_norm":
            self._layer_norm(node, stage)
        else:
            self._softmax(node, stage)
        self.info[out.name] = Info("S", False, stage + 2)

    def _plain(self, node: Node, x, stage: int) -> None:
        reducer = Reducer(_REDUCERS[node.op], node.out.dtype if node.op == "sum" else x.dtype)
        term = (lambda e: e.builder.zext(e.value(x.name), e.register(int64))) if x.dtype.name == "bool" else \
            (lambda e: e.value(x.name))
        finish = (lambda b, v, rows: b.fdiv(v, constant(x.dtype, self.count, lanes_of(v)))) if node.op == "mean" \
            else (lambda b, v, rows: v)
        self.accs.append(Acc(node.out.name, reducer, term, stage, finish))

    def _softmax(self, node: Node, stage: int) -> None:
        x, name, dtype = node.inputs[0].name, node.out.name, node.out.dtype
        self.accs.append(Acc(f"{name}#max", Reducer("max", dtype, quiet=True), lambda e: e.value(x), stage))

        def shifted_exp(e: "Element") -> ir.Value:
            return e.apply("exp", e.builder.fsub(e.value(x), e.row(f"{name}#max")), dtype)

        def log(b: ir.IRBuilder, v: ir.Value, rows: "Rows") -> ir.Value:
            return rows.apply("log", v, dtype)

        def reciprocal(b: ir.IRBuilder, v: ir.Value, rows: "Rows") -> ir.Value:
            return b.fdiv(constant(dtype, 1.0, lanes_of(v)), v)
        finish = log if node.op == "log_softmax" else reciprocal
        keep = self._result_of(name) if node.op == "softmax" and dtype in (float32, float64) else None
        if keep is not None:
            self.kept[name] = keep
        self.accs.append(Acc(f"{name}#sum", Reducer("sum", dtype), shifted_exp, stage + 1, finish, keep))

    def _result_of(self, name: str) -> int | None:
        """The index of the body result that is value `name` itself, if any."""
        return next((n for n, v in enumerate(self.body.outputs) if v.name == name), None)

    def _layer_norm(self, node: Node, stage: int) -> None:
        x, name, dtype = node.inputs[0].name, node.out.name, node.out.dtype
        count, eps = self.count, node.attr["eps"]
        self.accs.append(Acc(f"{name}#mean", Reducer("sum", dtype), lambda e: e.value(x), stage,
                             lambda b, v, rows: b.fdiv(v, constant(dtype, count, lanes_of(v)))))

        def square(e: "Element") -> ir.Value:
            centered = e.builder.fsub(e.value(x), e.row(f"{name}#mean"))
            return e.builder.fmul(centered, centered)

        def inverse_std(b: ir.IRBuilder, v: ir.Value, rows: "Rows") -> ir.Value:
            variance = b.fadd(b.fdiv(v, constant(dtype, count, lanes_of(v))), constant(dtype, eps, lanes_of(v)))
            return b.fdiv(constant(dtype, 1.0, lanes_of(v)), rows.apply("sqrt", variance, dtype))
        self.accs.append(Acc(f"{name}#rstd", Reducer("sum", dtype), square, stage + 1, inverse_std))


def element_value(e: "Element", node: Node) -> ir.Value:
    """The per-element value of a softmax, log_softmax or layer_norm node from its row statistics: a softmax and a
    layer norm multiply by the reciprocal of the row's sum or standard deviation (one divide per row, as torch's
    kernels do; a divide per element took a third of the transformer's layer norms on AVX-512)."""
    b, name = e.builder, node.out.name
    x = e.value(node.inputs[0].name)
    if node.op == "softmax":
        kept = e.rows.plan.kept.get(name)
        shifted = e.result(kept, node.out.dtype) if kept is not None else \
            e.apply("exp", b.fsub(x, e.row(f"{name}#max")), node.out.dtype)
        return b.fmul(shifted, e.row(f"{name}#sum"))
    if node.op == "log_softmax":
        return b.fsub(b.fsub(x, e.row(f"{name}#max")), e.row(f"{name}#sum"))
    y = b.fmul(b.fsub(x, e.row(f"{name}#mean")), e.row(f"{name}#rstd"))
    if len(node.inputs) > 1:
        y = b.fmul(y, e.value(node.inputs[1].name))
    if len(node.inputs) > 2:
        y = b.fadd(y, e.value(node.inputs[2].name))
    return y


def mask_of(lanes: int, valid: int | None) -> ir.Constant | None:
    """The mask of a partial lane group's first `valid` lanes (None when the group is whole)."""
    return None if valid is None else lane_mask(lanes, valid)


class Rows:
    """Values of one row (or W rows side by side): loads of row-constant inputs, reduction results, and the
    elementwise nodes on them, all computed in straight-line code at row scope so they dominate every pass."""

    def __init__(self, builder: ir.IRBuilder, plan: RowPlan, ptrs: list[ir.Value], bases: list[ir.Value],
                 steps: list[int], lanes: int, outs: Sequence[ir.Value], valid: int | None = None) -> None:
        self.builder, self.plan, self.ptrs, self.bases, self.steps, self.lanes = builder, plan, ptrs, bases, steps, lanes
        self.outs = outs
        self.valid = valid  # of W rows side by side, how many are rows (the last group; None: all)
        self.cache: dict[str, ir.Value] = {}

    def apply(self, op: str, x: ir.Value, dtype: DType) -> ir.Value:
        return ELEMENTWISE[op](self.builder, [x], {}, dtype)

    def load_input(self, k: int, lanes: int, offset: ir.Value, mask: ir.Value | None = None) -> ir.Value:
        """Input k at `offset`: `lanes` elements (only the lanes of `mask`, others 0), or one widened where the input
        is constant along the row's inner axis."""
        v = self.plan.body.inputs[k]
        if self.steps[k] == 0:
            return widen(self.builder, load(self.builder, self.ptrs[k], offset, v.dtype), lanes)
        return load(self.builder, self.ptrs[k], offset, v.dtype, lanes, mask)

    def compute_ready(self, stage: int) -> None:
        """Compute every row value that is available before pass `stage` and not computed yet."""
        plan, b = self.plan, self.builder
        for k, v in enumerate(plan.body.inputs):
            if plan.info[v.name].row and v.name not in self.cache:
                self.cache[v.name] = self.load_input(k, self.lanes, self.bases[k], mask_of(self.lanes, self.valid))
        for node in plan.body.nodes:
            name = node.outputs[0].name
            info = plan.info[name]
            if info.row and info.ready <= stage and name not in self.cache and node.op not in _REDUCERS:
                self.cache[name] = apply_node(b, node, [self.cache[v.name] for v in node.inputs], self.lanes)


class Element:
    """Values at one element (or lane group) of a pass: loads at the element's offsets, row values widened. A row's
    last lane group may be partial: its first `valid` lanes are read (`mask`) and written, no others."""

    def __init__(self, rows: Rows, offsets: list[ir.Value], lanes: int, index: ir.Value | None,
                 targets: Sequence[ir.Value] = (), valid: int | None = None) -> None:
        self.rows, self.builder, self.offsets, self.lanes, self.index = rows, rows.builder, offsets, lanes, index
        self.targets = targets  # the results' offsets at this element
        self.valid = valid  # lanes inside the row when the group is partial
        self.mask = mask_of(lanes, valid)
        self.memo: dict[str, ir.Value] = {}

    def register(self, dtype: DType) -> ir.Type:
        return register_type(dtype, self.lanes)

    def apply(self, op: str, x: ir.Value, dtype: DType) -> ir.Value:
        return ELEMENTWISE[op](self.builder, [x], {}, dtype)

    def row(self, key: str) -> ir.Value:
        return widen(self.builder, self.rows.cache[key], self.lanes)

    def result(self, n: int, dtype: DType) -> ir.Value:
        """What result n holds at this element (a softmax's exponentials, stored by its sum pass)."""
        return load(self.builder, self.rows.outs[n], self.targets[n], dtype, self.lanes, self.mask)

    def value(self, name: str) -> ir.Value:
        if name in self.memo:
            return self.memo[name]
        plan = self.rows.plan
        if plan.info[name].row:
            result = self.row(name)
        elif name in plan.nodes:
            node = plan.nodes[name]
            result = element_value(self, node) if node.op in _NORMALIZING else \
                apply_node(self.builder, node, [self.value(v.name) for v in node.inputs], self.lanes)
        else:
            k = plan.input_index[name]
            result = self.rows.load_input(k, self.lanes, self.offsets[k], self.mask)
        self.memo[name] = result
        return result


__all__ = ["ROW_OPS", "Acc", "Element", "Info", "RowPlan", "Rows", "element_value"]
