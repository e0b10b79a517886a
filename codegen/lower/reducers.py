"""Accumulators of the row engine: sum, max, min, argmax and argmin on scalars or lanes.

A reducer's state is a tuple of register values (the running value; for arg reducers also the running index).
`update` folds in one term (with its element index for arg reducers), `merge` combines two partial states and
`horizontal` folds the lanes of a vector state into a scalar state with a tree of shuffles. max/min propagate NaN
like numpy.max, unless the reducer is `quiet`: then a NaN term may be dropped (one vmaxps instead of a compare, an
unordered test and a blend), for a maximum whose NaN terms poison the row anyway (the softmax family's, whose sum of
exp(x - max) is NaN where an x is); argmax/argmin return the first index of the extreme value, and the first NaN if
there is one, as numpy does. Arg states start at index INVALID (the largest i64), which loses every tie, so the
first element a lane sees always replaces the initial value.

Long float sums are blocked (reduction.py): a plain accumulator sums a block of terms, then `fold` adds the block's
sum into a compensated total (Neumaier's variant of Kahan summation, exact up to one rounding of the total per
fold), so the error of a whole row is that of one block plus a few ulps, however long the row.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from braze.ir.types import DType, int64

from ..loops import I1, I32, vector_const
from .base import constant, lanes_of
from .elementwise import ELEMENTWISE, compare, maximum, minimum

INVALID = 2 ** 63 - 1
State = tuple[ir.Value, ...]


def _not(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    ones = ir.Constant(x.type, [ir.Constant(I1, 1)] * x.type.count) if isinstance(x.type, ir.VectorType) \
        else ir.Constant(I1, 1)
    return b.xor(x, ones)


def quiet_maximum(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x > y ? x : y on floats, y where either is NaN: the x86 max instruction's rule (one vmaxps)."""
    return b.select(b.fcmp_ordered(">", x, y), x, y)


def _extreme(dtype: DType, largest: bool) -> float | int:
    if dtype.is_float:
        return float("inf") if largest else float("-inf")
    if dtype.kind == "uint":
        return 2 ** dtype.bits - 1 if largest else 0
    return 2 ** (dtype.bits - 1) - 1 if largest else -2 ** (dtype.bits - 1)


@dataclass(frozen=True)
class Reducer:
    """One accumulation over the terms of a row: kind is sum, max, min, argmax or argmin; dtype the terms' dtype."""

    kind: str
    dtype: DType
    quiet: bool = False  # a float max may drop NaN terms (module doc)

    @property
    def indexed(self) -> bool:
        return self.kind in ("argmax", "argmin")

    def init(self, lanes: int) -> State:
        if self.kind == "sum":
            return (constant(self.dtype, 0, lanes),)
        value = constant(self.dtype, _extreme(self.dtype, largest=self.kind in ("min", "argmin")), lanes)
        return (value, constant(int64, INVALID, lanes)) if self.indexed else (value,)

    def update(self, b: ir.IRBuilder, state: State, term: ir.Value, index: ir.Value | None) -> State:
        if self.indexed:
            return self.merge(b, (term, index), state)
        return self.merge(b, (term,), state)

    def merge(self, b: ir.IRBuilder, x: State, y: State) -> State:
        """Combine two partial states (for arg reducers: the better of the two, ties to the smaller index)."""
        if self.kind == "sum":
            return (b.fadd(x[0], y[0]) if self.dtype.is_float else b.add(x[0], y[0]),)
        if self.kind == "max":
            return (quiet_maximum(b, x[0], y[0]) if self.quiet and self.dtype.is_float else
                    maximum(b, x[0], y[0], self.dtype),)
        if self.kind == "min":
            return (minimum(b, x[0], y[0], self.dtype),)
        take = self._better(b, x, y)
        return b.select(take, x[0], y[0]), b.select(take, x[1], y[1])

    def _better(self, b: ir.IRBuilder, x: State, y: State) -> ir.Value:
        earlier = b.icmp_signed("<", x[1], y[1])
        strict = compare(b, ">" if self.kind == "argmax" else "<", x[0], y[0], self.dtype)
        tie = b.and_(compare(b, "==", x[0], y[0], self.dtype), earlier)
        better = b.or_(strict, tie)
        if not self.dtype.is_float:
            return better
        x_nan, y_nan = b.fcmp_unordered("uno", x[0], x[0]), b.fcmp_unordered("uno", y[0], y[0])
        return b.or_(b.and_(x_nan, b.or_(_not(b, y_nan), earlier)), better)

    def horizontal(self, b: ir.IRBuilder, state: State) -> State:
        """Fold the lanes of a vector state into a scalar state."""
        lanes = lanes_of(state[0])
        while lanes > 1:
            half = lanes // 2
            low = vector_const(ir.VectorType(I32, half), list(range(half)))
            high = vector_const(ir.VectorType(I32, half), list(range(half, lanes)))
            state = self.merge(b, tuple(b.shuffle_vector(s, s, low) for s in state),
                               tuple(b.shuffle_vector(s, s, high) for s in state))
            lanes = half
        if isinstance(state[0].type, ir.VectorType):
            state = tuple(b.extract_element(s, ir.Constant(I32, 0)) for s in state)
        return state

    @property
    def compensated(self) -> bool:
        """Whether long rows sum in blocks into a compensated total (float sums; other reductions are exact)."""
        return self.kind == "sum" and self.dtype.is_float

    def fold(self, b: ir.IRBuilder, total: State, part: State) -> State:
        """A compensated total (sum, compensation) with a block's sum `part` added (Neumaier)."""
        s, c = total
        x = part[0]
        t = b.fadd(s, x)
        larger = b.fcmp_ordered(">=", ELEMENTWISE["abs"](b, [s], {}, self.dtype),
                                ELEMENTWISE["abs"](b, [x], {}, self.dtype))
        lost = b.select(larger, b.fadd(b.fsub(s, t), x), b.fadd(b.fsub(x, t), s))
        return t, b.fadd(c, lost)

    def settle(self, b: ir.IRBuilder, total: State) -> State:
        """A compensated total as a plain state: sum + compensation, or the sum alone once it is not finite (an
        infinite term makes the compensation NaN)."""
        s, c = total
        finite = b.fcmp_ordered("<", ELEMENTWISE["abs"](b, [s], {}, self.dtype),
                                constant(self.dtype, float("inf"), lanes_of(s)))
        return (b.select(finite, b.fadd(s, c), s),)

    def result(self, state: State) -> ir.Value:
        """The reduced value: the running value, or the index for arg reducers."""
        return state[1] if self.indexed else state[0]


__all__ = ["INVALID", "Reducer", "State"]
