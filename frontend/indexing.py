"""Tensor indexing (`t[...]`) expressed with registered ops: one slice, at most one index_select, one reshape.

Supported: ints, slices with positive steps, None, Ellipsis, and one integer list/array/tensor on one axis
(numpy.take semantics on that axis) combined with the others. Boolean masks are rejected because their
result shape depends on the data, which a traced graph cannot express.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .dispatch import apply
from .tensor import Tensor

_MASK_HINT = ("boolean-mask indexing is not supported: its result shape depends on the data, which a compiled "
              "graph cannot express; use braze.where(mask, x, value) or x.masked_fill(~mask, value) instead")


def getitem(x: Tensor, index: Any) -> Tensor:
    """x[index] with torch's semantics for the supported index kinds."""
    items = _expand_ellipsis(index if isinstance(index, tuple) else (index,), x.ndim)
    starts, stops, steps, out_shape = [], [], [], []
    advanced: tuple[int, Tensor] | None = None
    axis = 0
    for item in items:
        if item is None:
            out_shape.append(1)
            continue
        dim = x.shape[axis]
        if isinstance(item, slice):
            start, stop, step = _slice_bounds(item, dim)
            out_shape.append(-(-(stop - start) // step))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            if not -dim <= item < dim:
                raise IndexError(f"index {item} is out of range for dimension {axis} of size {dim}")
            start, stop, step = int(item) % dim, int(item) % dim + 1, 1
        else:
            if advanced is not None:
                raise IndexError("only one integer-array index per indexing expression is supported; "
                                 "index in two steps instead")
            idx = _index_tensor(item, dim)
            advanced = (axis, idx)
            out_shape.extend(idx.shape)
            start, stop, step = 0, dim, 1
        starts.append(start)
        stops.append(stop)
        steps.append(step)
        axis += 1
    y = x
    if any(b != 0 or e != d or s != 1 for b, e, s, d in zip(starts, stops, steps, x.shape)):
        y = apply("slice", y, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))
    if advanced is not None:
        y = apply("index_select", y, advanced[1], axis=advanced[0])
    if y is x or y.shape != tuple(out_shape):
        y = apply("reshape", y, shape=tuple(out_shape))
    return y


def _expand_ellipsis(items: tuple[Any, ...], ndim: int) -> tuple[Any, ...]:
    """Replace the Ellipsis (or the missing tail) with full slices."""
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    if consumed > ndim:
        raise IndexError(f"too many indices for a tensor of rank {ndim}: {consumed} were indexed")
    fill = (slice(None),) * (ndim - consumed)
    at = next((k for k, i in enumerate(items) if i is Ellipsis), None)
    if at is not None:
        return items[:at] + fill + items[at + 1:]
    return items + fill


def _slice_bounds(item: slice, dim: int) -> tuple[int, int, int]:
    """Normalized (start, stop, step) with 0 <= start <= stop <= dim, as the slice op requires."""
    if item.step is not None and item.step <= 0:
        raise ValueError(f"slice step must be positive, got {item.step} (negative steps are not supported, "
                         f"as in torch)")
    start, stop, step = item.indices(dim)
    return start, max(stop, start), step


def _index_tensor(item: Any, dim: int) -> Tensor:
    """An integer index on one axis as an i64/i32 tensor with negative entries wrapped around."""
    if isinstance(item, Tensor):
        if item.dtype.kind == "bool":
            raise IndexError(_MASK_HINT)
        if not item.dtype.is_integer:
            raise IndexError(f"tensors used as indices must be integer tensors, got {item.dtype}")
        wrapped = apply("add", item, Tensor._wrap(np.asarray(dim, dtype=item._data.dtype)))
        return apply("where", apply("lt", item, Tensor._wrap(np.zeros((), item._data.dtype))), wrapped, item)
    array = np.asarray(item)
    if array.dtype == np.bool_:
        raise IndexError(_MASK_HINT)
    if array.dtype.kind not in "iu" and array.size:
        raise IndexError(f"only integers, slices, None, ... and integer arrays are valid indices, got {item!r}")
    array = array.astype(np.int64)
    if array.size and (array.min() < -dim or array.max() >= dim):
        raise IndexError(f"index {array.min() if array.min() < -dim else array.max()} is out of range "
                         f"for a dimension of size {dim}")
    return Tensor._wrap(np.where(array < 0, array + dim, array))
