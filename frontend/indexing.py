"""Tensor indexing (`t[...]`) expressed with registered ops: one slice, at most one transpose and one
index_select, and reshapes.

Supported: ints, slices with positive steps, None, Ellipsis, integer lists/arrays/tensors on any number of axes
(numpy/torch advanced indexing: the index arrays broadcast together, and their dims replace the indexed axes
in place when those are adjacent, else lead the result), and boolean masks. A mask's result shape depends on
its values, so it is resolved eagerly into integer indices (numpy.nonzero); a traced mask raises a TraceError
naming the user's line.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .dispatch import apply
from .tensor import Tensor

_MASK_HINT = ("boolean-mask indexing of a traced tensor: the result's shape depends on the mask's values, which a "
              "graph cannot express; use braze.where(mask, x, value) or x.masked_fill(mask, value) instead")


def getitem(x: Tensor, index: Any) -> Tensor:
    """x[index] with torch's semantics for the supported index kinds."""
    items = _expand_ellipsis(_resolve_masks(index if isinstance(index, tuple) else (index,)), x.ndim)
    if not any(_is_array_index(i) for i in items):
        return _basic(x, items)
    if any(isinstance(i, (int, np.integer)) for i in items):  # torch applies int indices first, as basic ones
        x = _basic(x, tuple(i if isinstance(i, (int, np.integer)) else slice(None) for i in items if i is not None))
        items = tuple(i for i in items if not isinstance(i, (int, np.integer)))
    return _advanced(x, items)


def _basic(x: Tensor, items: tuple[Any, ...]) -> Tensor:
    """Ints, slices and None: one slice op and one reshape (dropping int axes, inserting new ones)."""
    starts, stops, steps, out_shape = [], [], [], []
    axis = 0
    for item in items:
        if item is None:
            out_shape.append(1)
            continue
        start, stop, step = _bounds(item, x.shape[axis], axis)
        if isinstance(item, slice):
            out_shape.append(-(-(stop - start) // step))
        starts.append(start)
        stops.append(stop)
        steps.append(step)
        axis += 1
    y = _slice(x, starts, stops, steps)
    if y is x or y.shape != tuple(out_shape):
        y = apply("reshape", y, shape=tuple(out_shape))
    return y


def _advanced(x: Tensor, items: tuple[Any, ...]) -> Tensor:
    """Integer arrays, with None axes inserted afterwards where numpy puts them: the array dims replace the indexed
    axes when those are adjacent in the index, else lead the result."""
    arrays = [k for k, i in enumerate(items) if _is_array_index(i)]
    adjacent = arrays == list(range(arrays[0], arrays[-1] + 1))
    y = _select(x, tuple(i for i in items if i is not None), adjacent)
    if not any(i is None for i in items):
        return y
    slots = [k for k in range(len(items)) if k not in arrays[1:]] if adjacent else \
        [arrays[0]] + [k for k in range(len(items)) if k not in arrays]
    dims, block = iter(y.shape), y.ndim - sum(isinstance(i, slice) for i in items)
    shape: list[int] = []
    for k in slots:
        shape.extend([1] if items[k] is None else [next(dims) for _ in range(block if k in arrays else 1)])
    return apply("reshape", y, shape=tuple(shape))


def _select(x: Tensor, items: tuple[Any, ...], adjacent: bool) -> Tensor:
    """Slice the slice axes, bring the array axes together (in place when adjacent, else first), merge them into
    one and select the broadcast linear index along it."""
    starts, stops, steps, arrays, picked = [], [], [], [], []
    for axis, item in enumerate(items):
        if isinstance(item, slice):
            start, stop, step = _bounds(item, x.shape[axis], axis)
        else:
            start, stop, step = 0, x.shape[axis], 1
            arrays.append(_index_tensor(item, x.shape[axis]))
            picked.append(axis)
        starts.append(start)
        stops.append(stop)
        steps.append(step)
    y = _slice(x, starts, stops, steps)
    at = picked[0] if adjacent else 0
    if not adjacent:
        y = apply("transpose", y, perm=tuple(picked + [a for a in range(y.ndim) if a not in picked]))
    dims = y.shape[at:at + len(picked)]
    linear = _linear_index(arrays, dims)
    if len(dims) > 1:
        y = apply("reshape", y, shape=y.shape[:at] + (math.prod(dims),) + y.shape[at + len(dims):])
    return apply("index_select", y, linear, axis=at)


def _slice(x: Tensor, starts: list[int], stops: list[int], steps: list[int]) -> Tensor:
    if any(b != 0 or e != d or s != 1 for b, e, s, d in zip(starts, stops, steps, x.shape)):
        return apply("slice", x, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))
    return x


def _linear_index(arrays: list[Tensor], dims: tuple[int, ...]) -> Tensor:
    """sum_j arrays[j] * stride_j over the merged axes of `dims`, broadcast together (one array: itself)."""
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    total = None
    for j, a in enumerate(arrays):
        stride = math.prod(dims[j + 1:])
        term = a if stride == 1 else apply("mul", a, Tensor._wrap(np.asarray(stride, a._data.dtype)))
        total = term if total is None else apply("add", total, term)
    return total if total.shape == shape else apply("broadcast_to", total, shape=tuple(shape))


def _is_array_index(item: Any) -> bool:
    return not (item is None or isinstance(item, (slice, int, np.integer)))


def _resolve_masks(items: tuple[Any, ...]) -> tuple[Any, ...]:
    """Boolean masks replaced by the integer arrays of their True positions (one per masked axis)."""
    out: list[Any] = []
    for item in items:
        mask = _mask_values(item)
        out.extend(np.nonzero(mask) if mask is not None else (item,))
    return tuple(out)


def _mask_values(item: Any) -> np.ndarray | None:
    """The values of a boolean mask index (None for any other index); a traced mask raises a TraceError."""
    if isinstance(item, Tensor):
        if item.dtype.kind != "bool":
            return None
        from .traced import TracedTensor, trace_error
        if isinstance(item, TracedTensor):
            raise trace_error(_MASK_HINT)
        array = item._data
    elif isinstance(item, (bool, np.bool_)):
        raise IndexError("a Python bool is not a supported index; use a boolean mask tensor")
    elif isinstance(item, (list, np.ndarray)):
        array = np.asarray(item)
        if array.dtype != np.bool_:
            return None
    else:
        return None
    if array.ndim == 0:
        raise IndexError("a 0-d boolean mask is not a supported index; use a boolean mask with the indexed shape")
    return array


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


def _bounds(item: slice | int, dim: int, axis: int) -> tuple[int, int, int]:
    """Normalized (start, stop, step) of a slice or an int on one axis, as the slice op requires."""
    if isinstance(item, slice):
        return _slice_bounds(item, dim)
    if not -dim <= item < dim:
        raise IndexError(f"index {item} is out of range for dimension {axis} of size {dim}")
    return int(item) % dim, int(item) % dim + 1, 1


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
        if not item.dtype.is_integer:
            raise IndexError(f"tensors used as indices must be integer or bool tensors, got {item.dtype}")
        if not isinstance(item._data, np.ndarray):  # a traced index: its range is checked when the graph runs
            wrapped = apply("add", item, Tensor._wrap(np.asarray(dim, dtype=item._data.dtype)))
            return apply("where", apply("lt", item, Tensor._wrap(np.zeros((), item._data.dtype))), wrapped, item)
        item = item._data
    array = np.asarray(item)
    if array.dtype.kind not in "iu" and array.size:
        raise IndexError(f"only integers, slices, None, ..., integer arrays and boolean masks are valid indices, "
                         f"got {item!r}")
    array = array.astype(np.int64)
    # wrapped as a traced index is; one still out of range is refused by the op that reads it, with the message
    # compiled code gives for the same index
    return Tensor._wrap(np.where(array < 0, array + dim, array))
