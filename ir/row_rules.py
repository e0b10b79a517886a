"""Rules for the registry's `rows` trait: whether a node computes each row of its result (index i of axis 0) from row
i of the operands that carry rows alone, reading its other operands whole.

A graph all of whose nodes do so can run on a few rows at a time (ir/rows.py): a batch cut into chunks, each
computed through the whole graph while its activations stay in the cache. A rule gets the node, which operands
carry rows (a graph input's axis 0, or a result computed row by row from one) and the row count of a chunk; it
returns the node's attributes for a chunk of that many rows (those naming the row count changed, the rest as they
are), or None when the node mixes rows (a reduction over axis 0, a transpose moving it, a reshape merging it) or
reads an operand that neither carries rows nor broadcasts along them. The new attributes are checked by inferring
the node's types again, so a rule need not re-derive what inference checks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from .graph import Node, Value

RowsRule = Callable[["Node", tuple[bool, ...], int], "Mapping[str, Any] | None"]


def shared(v: Value, rank: int) -> bool:
    """Whether an operand that carries no rows is read whole by every row of a result of `rank` axes: it broadcasts
    along axis 0 (fewer axes, or a first axis of 1)."""
    return len(v.shape) < rank or v.shape[0] == 1


def broadcast_rows(node: Node, carried: tuple[bool, ...], rows: int) -> Mapping[str, Any] | None:
    """Elementwise ops: each row-carrying operand lines its axis 0 up with the result's, every other broadcasts."""
    rank = len(node.outputs[0].shape)
    for v, c in zip(node.inputs, carried):
        if (c and len(v.shape) != rank) or (not c and not shared(v, rank)):
            return None
    return node.attr


def first_rows(node: Node, carried: tuple[bool, ...], rows: int) -> Mapping[str, Any] | None:
    """Ops whose first operand carries the rows and whose others (weights, statistics) are read whole."""
    return node.attr if carried[0] and not any(carried[1:]) else None


def batched_rows(rank: int) -> RowsRule:
    """first_rows for a first operand of exactly `rank` axes (a conv's input: unbatched, its axis 0 is channels)."""
    def rule(node: Node, carried: tuple[bool, ...], rows: int) -> Mapping[str, Any] | None:
        return first_rows(node, carried, rows) if len(node.inputs[0].shape) == rank else None
    return rule


def linear_rows(node: Node, carried: tuple[bool, ...], rows: int) -> Mapping[str, Any] | None:
    """x @ W^T and its packed forms: rows of x (two axes or more) against a weight read whole."""
    return first_rows(node, carried, rows) if len(node.inputs[0].shape) >= 2 else None


def keeps_axis(name: str, rank_of: Callable[[Node], int] = lambda node: len(node.inputs[0].shape)) -> RowsRule:
    """Ops of one row-carrying operand working along the axes named by attribute `name` (an int or ints, negative
    from the end of `rank_of(node)` axes): row-wise unless axis 0 is among them."""
    def rule(node: Node, carried: tuple[bool, ...], rows: int) -> Mapping[str, Any] | None:
        value, rank = node.attr[name], rank_of(node)
        axes = value if isinstance(value, tuple) else (value,)
        if not (carried[0] and not any(carried[1:])) or not rank or any(a % rank == 0 for a in axes):
            return None
        return node.attr
    return rule


def all_rows_along(name: str, extra_axes: int = 0) -> RowsRule:
    """concat and stack: every operand carries rows and the joined axis (attribute `name`, of a result with
    `extra_axes` more axes than an operand) is not axis 0."""
    def rule(node: Node, carried: tuple[bool, ...], rows: int) -> Mapping[str, Any] | None:
        rank = len(node.inputs[0].shape) + extra_axes
        return node.attr if all(carried) and rank and node.attr[name] % rank != 0 else None
    return rule


def first_entry(name: str, same_rank: bool = False) -> RowsRule:
    """Ops of one row-carrying operand with a shape attribute `name` whose first entry is the row count (reshape,
    and broadcast_to, whose operand must then have as many axes: `same_rank`): that entry becomes the chunk's."""
    def rule(node: Node, carried: tuple[bool, ...], rows: int) -> Mapping[str, Any] | None:
        x, shape = node.inputs[0], tuple(node.attr[name])
        if carried != (True,) or not x.shape or not shape or shape[0] != x.shape[0]:
            return None
        if same_rank and len(shape) != len(x.shape):
            return None
        return {**node.attr, name: (rows, *shape[1:])}
    return rule
