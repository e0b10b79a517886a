"""Helpers shared by op definitions: broadcasting, axis normalization, dtype checks, gradient reshaping."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import DTypeError, ShapeError
from ..types import DType, TensorType, bool_


def shapes_text(*types: TensorType) -> str:
    return ", ".join(str(t) for t in types)


def broadcast_shapes(op: str, *types: TensorType) -> tuple[int, ...]:
    """The numpy broadcast of the operands' shapes, or a ShapeError naming op and shapes."""
    shapes = {t.shape for t in types} - {()}
    if len(shapes) <= 1:  # equal shapes or scalars: the common cases, without numpy's overhead
        return shapes.pop() if shapes else ()
    try:
        return tuple(np.broadcast_shapes(*(t.shape for t in types)))
    except ValueError:
        raise ShapeError(f"{op}: operand shapes {shapes_text(*types)} do not broadcast "
                         f"(trailing dimensions must be equal or 1)") from None


def same_dtype(op: str, *types: TensorType) -> DType:
    """The common dtype of the operands; the IR never promotes implicitly."""
    first = types[0].dtype
    if any(t.dtype != first for t in types[1:]):
        raise DTypeError(f"{op}: operand dtypes differ ({shapes_text(*types)}); insert a cast")
    return first


def require_float(op: str, *types: TensorType) -> None:
    for t in types:
        if not t.dtype.is_float:
            raise DTypeError(f"{op}: expects floating-point operands, got {t}")


def require_dtype_kind(op: str, t: TensorType, kinds: Sequence[str], what: str) -> None:
    if t.dtype.kind not in kinds:
        raise DTypeError(f"{op}: {what} must be {' or '.join(kinds)}, got {t}")


def require_bool(op: str, t: TensorType, what: str) -> None:
    if t.dtype != bool_:
        raise DTypeError(f"{op}: {what} must be bool, got {t}")


def require_rank(op: str, t: TensorType, rank: int | Sequence[int], what: str) -> None:
    ranks = (rank,) if isinstance(rank, int) else tuple(rank)
    if t.rank not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ShapeError(f"{op}: {what} must have rank {want}, got shape {t}")


def normalize_axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1) or (rank == 0 and axis not in (0, -1)):
        raise ShapeError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def normalize_axes(op: str, axes: tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    """Sorted, non-negative, distinct axes; None means every axis."""
    if axes is None:
        return tuple(range(rank))
    out = tuple(sorted(normalize_axis(op, a, rank) for a in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {list(axes)}")
    return out


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def unbroadcast(e: Any, g: Any, shape: tuple[int, ...]) -> Any:
    """Sum a gradient of a broadcast result back down to an operand's `shape`."""
    gshape = tuple(g.shape)
    if gshape == tuple(shape):
        return g
    lead = len(gshape) - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(shape) if d == 1 and gshape[i + lead] != 1)
    if axes:
        g = e.sum(g, axes=axes, keepdim=True)
    return e.reshape(g, shape=tuple(shape))


def expand_reduced(e: Any, g: Any, in_shape: tuple[int, ...], axes: tuple[int, ...], keepdim: bool) -> Any:
    """Broadcast the gradient of a reduction over `axes` back to the input shape."""
    if not keepdim:
        g = e.reshape(g, shape=reduced_shape(in_shape, axes, True))
    return e.broadcast_to(g, shape=tuple(in_shape))
