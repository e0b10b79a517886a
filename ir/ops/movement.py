"""Movement ops: reshape, transpose, flip, broadcast_to, squeeze, unsqueeze, concat and stack.

They only rearrange elements, so each VJP is another movement of the cotangent.
Slicing and padding, which also move elements, live in ir/ops/indexing.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..attrs import AttrSpec
from ..errors import ShapeError
from ..registry import defop
from ..row_rules import all_rows_along, first_entry, first_rows, keeps_axis
from ..types import TensorType
from ..views import permuted, reshaped
from ._common import broadcast_shapes, normalize_axis, same_dtype, shapes_text, unbroadcast


def _size(shape: tuple[int, ...]) -> int:
    return math.prod(shape)  # exact: a product that wraps int64 could pass for the operand's size


# --- reshape ----------------------------------------------------------------------------------------------


def _reshape_infer(x: TensorType, *, shape: tuple[int, ...]) -> TensorType:
    if _size(shape) != x.size:
        raise ShapeError(f"reshape: cannot reshape {x} ({x.size} elements) to shape {list(shape)} "
                         f"({_size(shape)} elements)")
    return x.with_shape(shape)


def _same_order_view(node, view):
    return reshaped(view, node.inputs[0].shape, node.out.shape)


def _same_order_unview(node, view):
    return reshaped(view, node.out.shape, node.inputs[0].shape)


reshape = defop("reshape", ("x",), vjp_reads=(), infer=_reshape_infer, impl=lambda x, *, shape: np.reshape(x, shape),
                vjp=lambda e, g, out, x, *, shape: (e.reshape(g, shape=tuple(x.shape)),),
                attrs=(AttrSpec("shape", "shape"),), category="movement", preserves_values=True,
                view=_same_order_view, unview=_same_order_unview, aliases=True, rows=first_entry("shape"),
                doc="The same elements in row-major order under a new shape of equal size.")


copy = defop("copy", ("x",), vjp_reads=(), infer=lambda x: x, impl=lambda x: np.array(x, copy=True),
             vjp=lambda e, g, out, x: (g,), rows=first_rows,
             category="movement", preserves_values=True,
             doc="A copy of the operand: what moving a tensor to another device records.")


def _scale_grad_infer(x: TensorType, scale: TensorType) -> TensorType:
    same_dtype("scale_grad", x, scale)
    if broadcast_shapes("scale_grad", x, scale) != x.shape:
        raise ShapeError(f"scale_grad: the scale ({scale}) must broadcast to the operand ({x})")
    return x


# Not a derivative: the VJP weighs the cotangent on purpose (torch's Embedding(scale_grad_by_freq=True)).
scale_grad = defop("scale_grad", ("x", "scale"), vjp_reads=(1,), infer=_scale_grad_infer,
                   impl=lambda x, scale: np.array(x, copy=True),
                   vjp=lambda e, g, out, x, scale: (e.mul(g, scale), None), category="movement",
                   preserves_values=True, decomposition=lambda e, x, scale: x,
                   doc="The operand itself, whose gradient is the cotangent times `scale` (broadcast to it): how "
                       "Embedding(scale_grad_by_freq=True) divides each row's gradient by the count of its index.")


# --- transpose --------------------------------------------------------------------------------------------


def _transpose_infer(x: TensorType, *, perm: tuple[int, ...]) -> TensorType:
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"transpose: perm {list(perm)} is not a permutation of the {x.rank} axes of {x}")
    return x.with_shape(tuple(x.shape[p] for p in perm))


def _transpose_vjp(e, g, out, x, *, perm):
    return (e.transpose(g, perm=tuple(int(i) for i in np.argsort(perm))),)


transpose = defop("transpose", ("x",), vjp_reads=(), infer=_transpose_infer,
                  impl=lambda x, *, perm: np.transpose(x, perm),
                  vjp=_transpose_vjp, attrs=(AttrSpec("perm", "ints"),), category="movement", preserves_values=True,
                  view=lambda node, view: permuted(view, node.attr["perm"]),
                  unview=lambda node, view: permuted(view, [int(i) for i in np.argsort(node.attr["perm"])]),
                  rows=lambda node, carried, rows: node.attr if node.attr["perm"][:1] == (0,) else None,
                  doc="Permute the axes: result axis i is operand axis perm[i].")


def _flip_infer(x: TensorType, *, axes: tuple[int, ...]) -> TensorType:
    if len({normalize_axis("flip", a, x.rank) for a in axes}) != len(axes):
        raise ShapeError(f"flip: repeated axis in {list(axes)} for {x}")
    return x


flip = defop("flip", ("x",), vjp_reads=(), infer=_flip_infer, impl=lambda x, *, axes: np.flip(x, axes).copy(),
             vjp=lambda e, g, out, x, *, axes: (e.flip(g, axes=axes),), attrs=(AttrSpec("axes", "ints"),),
             category="movement", preserves_values=True, rows=keeps_axis("axes"),
             doc="The elements in reverse order along each of `axes`.")


# --- broadcast_to -----------------------------------------------------------------------------------------


def _broadcast_to_infer(x: TensorType, *, shape: tuple[int, ...]) -> TensorType:
    lead = len(shape) - x.rank
    if lead < 0 or any(d != 1 and d != shape[lead + i] for i, d in enumerate(x.shape)):
        raise ShapeError(f"broadcast_to: cannot broadcast {x} to shape {list(shape)} "
                         f"(each trailing dimension must equal the target's or be 1)")
    return x.with_shape(shape)


broadcast_to = defop("broadcast_to", ("x",), vjp_reads=(), infer=_broadcast_to_infer,
                     impl=lambda x, *, shape: np.array(np.broadcast_to(x, shape)),
                     vjp=lambda e, g, out, x, *, shape: (unbroadcast(e, g, tuple(x.shape)),),
                     attrs=(AttrSpec("shape", "shape"),), category="movement", preserves_values=True,
                     elementwise_like=True, rows=first_entry("shape", same_rank=True),
                     doc="Repeat size-1 and missing leading dimensions to reach `shape` (numpy rules).")


# --- squeeze / unsqueeze ----------------------------------------------------------------------------------


def _distinct_axes(op: str, axes: tuple[int, ...], rank: int) -> tuple[int, ...]:
    norm = tuple(sorted(normalize_axis(op, a, rank) for a in axes))
    if len(set(norm)) != len(norm):
        raise ShapeError(f"{op}: repeated axis in {list(axes)} for rank {rank}")
    return norm


def _squeeze_infer(x: TensorType, *, axes: tuple[int, ...]) -> TensorType:
    norm = _distinct_axes("squeeze", axes, x.rank)
    if x.rank == 0 and norm:
        raise ShapeError(f"squeeze: a scalar {x} has no axis {list(axes)} to remove")
    wide = [a for a in norm if x.shape[a] != 1]
    if wide:
        raise ShapeError(f"squeeze: axes {wide} of {x} do not have size 1")
    return x.with_shape(tuple(d for i, d in enumerate(x.shape) if i not in norm))


def _unsqueeze_infer(x: TensorType, *, axes: tuple[int, ...]) -> TensorType:
    rank = x.rank + len(axes)
    norm = _distinct_axes("unsqueeze", axes, rank)
    rest = iter(x.shape)
    return x.with_shape(tuple(1 if i in norm else next(rest) for i in range(rank)))


def _reshape_back(e, g, out, x, *, axes):
    return (e.reshape(g, shape=tuple(x.shape)),)


squeeze = defop("squeeze", ("x",), vjp_reads=(), infer=_squeeze_infer,
                impl=lambda x, *, axes: np.reshape(x, _squeeze_infer(TensorType(x.shape, x.dtype), axes=axes).shape),
                vjp=_reshape_back, attrs=(AttrSpec("axes", "ints"),), category="movement", preserves_values=True,
                view=_same_order_view, unview=_same_order_unview, aliases=True, rows=keeps_axis("axes"),
                doc="Remove the listed size-1 axes.")
unsqueeze = defop("unsqueeze", ("x",), vjp_reads=(), infer=_unsqueeze_infer,
                  impl=lambda x, *, axes: np.reshape(
                      x, _unsqueeze_infer(TensorType(x.shape, x.dtype), axes=axes).shape),
                  vjp=_reshape_back, attrs=(AttrSpec("axes", "ints"),), category="movement", preserves_values=True,
                  view=_same_order_view, unview=_same_order_unview, aliases=True,
                  rows=keeps_axis("axes", rank_of=lambda node: len(node.out.shape)),
                  doc="Insert size-1 axes; `axes` index the result, as numpy.expand_dims with a tuple.")


# --- concat / stack ---------------------------------------------------------------------------------------


def _concat_infer(*xs: TensorType, axis: int) -> TensorType:
    dtype = same_dtype("concat", *xs)
    rank = xs[0].rank
    if rank == 0:
        raise ShapeError(f"concat: cannot concatenate scalars ({shapes_text(*xs)}); use stack")
    ax = normalize_axis("concat", axis, rank)
    for t in xs[1:]:
        if t.rank != rank or any(d != e for i, (d, e) in enumerate(zip(t.shape, xs[0].shape)) if i != ax):
            raise ShapeError(f"concat: operand shapes {shapes_text(*xs)} differ outside axis {axis}")
    total = sum(t.shape[ax] for t in xs)
    return TensorType(xs[0].shape[:ax] + (total,) + xs[0].shape[ax + 1:], dtype)


def _concat_vjp(e, g, out, *xs, axis):
    ax = normalize_axis("concat", axis, len(out.shape))
    grads, start = [], 0
    for x in xs:
        stop = start + x.shape[ax]
        starts = tuple(start if i == ax else 0 for i in range(len(out.shape)))
        stops = tuple(stop if i == ax else d for i, d in enumerate(out.shape))
        grads.append(e.slice(g, starts=starts, stops=stops, steps=(1,) * len(out.shape)))
        start = stop
    return tuple(grads)


concat = defop("concat", ("*xs",), vjp_reads=(), infer=_concat_infer,
               impl=lambda *xs, axis: np.concatenate(xs, axis=axis), vjp=_concat_vjp,
               attrs=(AttrSpec("axis", "int"),), category="movement", rows=all_rows_along("axis"), joins=True,
               doc="Join tensors of one dtype along an existing axis.")


def _stack_infer(*xs: TensorType, axis: int) -> TensorType:
    dtype = same_dtype("stack", *xs)
    if any(t.shape != xs[0].shape for t in xs[1:]):
        raise ShapeError(f"stack: operand shapes {shapes_text(*xs)} must all be equal")
    ax = normalize_axis("stack", axis, xs[0].rank + 1)
    return TensorType(xs[0].shape[:ax] + (len(xs),) + xs[0].shape[ax:], dtype)


def _stack_vjp(e, g, out, *xs, axis):
    rank = len(out.shape)
    ax = normalize_axis("stack", axis, rank)
    grads = []
    for k in range(len(xs)):
        starts = tuple(k if i == ax else 0 for i in range(rank))
        stops = tuple(k + 1 if i == ax else d for i, d in enumerate(out.shape))
        part = e.slice(g, starts=starts, stops=stops, steps=(1,) * rank)
        grads.append(e.squeeze(part, axes=(ax,)))
    return tuple(grads)


stack = defop("stack", ("*xs",), vjp_reads=(), infer=_stack_infer, impl=lambda *xs, axis: np.stack(xs, axis=axis),
              vjp=_stack_vjp, attrs=(AttrSpec("axis", "int"),), category="movement", rows=all_rows_along("axis", 1),
              joins=True,
              doc="Join equal-shaped tensors along a new axis `axis` of the result.")
