"""Strided views: where the elements of a movement op's result lie in its operand's memory.

A View is an offset and one stride per axis, in elements, of a value inside a buffer. The movement ops whose every
result element sits at an affine position of the operand state it through their registry traits: `view` maps the
operand's view to the result's (slice, transpose and the reshapes), `unview` maps the result's view back to the
operand's for the ops that are bijections (transpose and the reshapes). A kernel can then read a value through a
chain of such ops, or write it through them, without the copies the ops would make one by one (the attention
region: codegen/lower/attention.py). A reshape is a view only where the axes it merges are laid out one inside the
other, as numpy.reshape returns a view exactly then.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class View:
    """Element (i0, i1, ...) of a value is at offset + sum(i_k * strides[k]) of its buffer."""

    offset: int
    strides: tuple[int, ...]


def unit_last(view: View, shape: Sequence[int]) -> bool:
    """Whether a value of `shape` under `view` has its last axis contiguous (or of at most one element): rows a
    kernel loads as vectors."""
    return not shape or shape[-1] <= 1 or view.strides[-1] == 1


def contiguous(shape: Sequence[int]) -> View:
    """The view of a row-major value filling its own buffer."""
    strides, inner = [], 1
    for dim in reversed(tuple(shape)):
        strides.append(inner)
        inner *= dim
    return View(0, tuple(reversed(strides)))


def sliced(view: View, starts: Sequence[int], steps: Sequence[int]) -> View:
    """x[start::step] on every axis (bounds already checked against the shape)."""
    offset = view.offset + sum(s * st for s, st in zip(starts, view.strides))
    return View(offset, tuple(st * step for st, step in zip(view.strides, steps)))


def permuted(view: View, perm: Sequence[int]) -> View:
    """Result axis i is axis perm[i]."""
    return View(view.offset, tuple(view.strides[p] for p in perm))


def reshaped(view: View, old: Sequence[int], new: Sequence[int]) -> View | None:
    """The same elements in row-major order under shape `new` (of equal size), or None when that needs a copy: a
    run of new axes spans a run of old axes (of equal product) that are not laid out one inside the other. Axes of
    size 1 take stride 1 (any stride addresses their one element)."""
    old, new = tuple(old), tuple(new)
    if 0 in old:
        return View(view.offset, contiguous(new).strides)
    dims = [(d, s) for d, s in zip(old, view.strides) if d != 1]
    wide = [j for j, d in enumerate(new) if d != 1]
    strides = [1] * len(new)
    o = n = 0
    while n < len(wide) and o < len(dims):
        o_end, n_end = o + 1, n + 1
        o_size, n_size = dims[o][0], new[wide[n]]
        while o_size != n_size:  # equal total sizes: both runs end inside their shapes
            if n_size < o_size:
                n_size *= new[wide[n_end]]
                n_end += 1
            else:
                o_size *= dims[o_end][0]
                o_end += 1
        if any(dims[k][1] != dims[k + 1][0] * dims[k + 1][1] for k in range(o, o_end - 1)):
            return None
        stride = dims[o_end - 1][1]
        for k in range(n_end - 1, n - 1, -1):
            strides[wide[k]] = stride
            stride *= new[wide[k]]
        o, n = o_end, n_end
    return View(view.offset, tuple(strides))


def broadcast(view: View, shape: Sequence[int], target: Sequence[int]) -> View:
    """The view of a value of `shape` read as if broadcast to `target` (numpy's rules): stride 0 along the axes it
    repeats; ValueError when it does not broadcast."""
    lead = len(target) - len(shape)
    if lead < 0:
        raise ValueError(f"shape {tuple(shape)} does not broadcast to {tuple(target)}")
    strides = []
    for axis, dim in enumerate(target):
        k = axis - lead
        if k < 0 or shape[k] == 1:
            strides.append(0)
        elif shape[k] == dim:
            strides.append(view.strides[k])
        else:
            raise ValueError(f"shape {tuple(shape)} does not broadcast to {tuple(target)}")
    return View(view.offset, tuple(strides))


def inner_stride(view: View, shape: Sequence[int]) -> int:
    """The stride along the last axis of `shape` longer than 1 (0 without one): the axis a loop nest over `shape`
    walks innermost, whose elements a kernel loads as vectors only at stride 1 (or 0, one element splatted)."""
    axes = [a for a, d in enumerate(shape) if d != 1]
    return view.strides[axes[-1]] if axes else 0


def body_views(body, traits) -> tuple[dict[str, tuple[int, View]], list]:
    """Where a region body's inputs and the results of its view ops on them lie: value name -> (input position, its
    View in that input's buffer); and the body's other nodes in order, among them any view op whose step needs a
    copy. `traits` maps an op name to its OpDef."""
    at = {v.name: (k, contiguous(v.shape)) for k, v in enumerate(body.inputs)}
    rest = []
    for node in body.nodes:
        op = traits(node.op)
        source = at.get(node.inputs[0].name) if node.inputs and op.view is not None and not op.elementwise_like \
            else None
        view = None if source is None else op.view(node, source[1])
        if view is None:
            rest.append(node)
        else:
            at[node.outputs[0].name] = (source[0], view)
    return at, rest


def follow(view: View, nodes: Sequence, traits) -> View | None:
    """`view` carried through a chain of nodes (each reading the previous one's result) by their registry trait
    `view`; None when one of them has none or needs a copy. `traits` maps an op name to its OpDef."""
    for node in nodes:
        rule = traits(node.op).view
        view = None if rule is None else rule(node, view)
        if view is None:
            return None
    return view


def follow_back(view: View, nodes: Sequence, traits) -> View | None:
    """The view of the first node's operand, given the view of the last node's result, through their `unview`."""
    for node in reversed(nodes):
        rule = traits(node.op).unview
        view = None if rule is None else rule(node, view)
        if view is None:
            return None
    return view
