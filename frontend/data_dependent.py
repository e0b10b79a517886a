"""Functions whose result shape depends on the values: nonzero, unique and masked_select. They run eagerly; on a
traced tensor (for masked_select, a traced mask) they raise a TraceError naming the user's line, since a graph's
shapes are fixed."""
from __future__ import annotations

from typing import Any

import numpy as np

from braze.ir.errors import DTypeError, ShapeError
from braze.ir.types import bool_

from .dispatch import apply
from .markers import eager_only
from .movement import broadcast_to, reshape
from .promotion import as_tensor
from .tensor import Tensor

_SHAPE_FROM_VALUES = "the result's shape depends on the values"


def _values(name: str, input: Any) -> np.ndarray:
    if isinstance(input, Tensor) and not isinstance(input._data, np.ndarray):
        from .traced import trace_error
        raise trace_error(f"{name}() of a traced tensor: its result's shape depends on the values, which a graph "
                          f"cannot express; compute it eagerly, or use a fixed-shape form (a mask with "
                          f"braze.where, or topk)")
    return np.asarray(input._data if isinstance(input, Tensor) else input)


@eager_only(_SHAPE_FROM_VALUES)
def nonzero(input: Tensor, *, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """The int64 coordinates of the nonzero elements, one row each (or one tensor per dim with as_tuple)."""
    values = _values("nonzero", input)
    device = input.device if isinstance(input, Tensor) else None
    if not values.ndim:  # a scalar has one coordinate row of no entries when it is nonzero
        rows = np.zeros((int(bool(values)), 0), np.int64)
        return tuple(Tensor._wrap(np.zeros(len(rows), np.int64), True, device) for _ in range(1)) if as_tuple \
            else Tensor._wrap(rows, True, device)
    coords = [c.astype(np.int64) for c in np.nonzero(values)]
    if as_tuple:
        return tuple(Tensor._wrap(c, True, device) for c in coords)
    return Tensor._wrap(np.stack(coords, axis=1), True, device)


@eager_only(_SHAPE_FROM_VALUES)
def argwhere(input: Tensor) -> Tensor:
    """nonzero's coordinate rows."""
    return nonzero(input)


@eager_only(_SHAPE_FROM_VALUES)
def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,
           dim: int | None = None) -> Tensor | tuple[Tensor, ...]:
    """The distinct values in ascending order (of rows along `dim`, when given), with the inverse indices and
    counts when asked."""
    values = _values("unique", input)
    found = np.unique(values, return_inverse=True, return_counts=True, axis=dim)
    device = input.device if isinstance(input, Tensor) else None
    out = Tensor._wrap(found[0], True, device)
    extras = []
    if return_inverse:
        inverse = found[1].reshape(values.shape if dim is None else -1)
        extras.append(Tensor._wrap(inverse.astype(np.int64), True, device))
    if return_counts:
        extras.append(Tensor._wrap(found[2].astype(np.int64), True, device))
    return (out, *extras) if extras else out


@eager_only(_SHAPE_FROM_VALUES)
def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    """The elements of `input` where the bool `mask` is True, as a 1-D tensor in row-major order (input and mask
    broadcast together); the positions come from the mask's values, the elements through index_select, so the
    gradient reaches `input`."""
    if not isinstance(mask, Tensor) or mask.dtype != bool_:
        raise DTypeError(f"masked_select: the mask must be a bool tensor, got "
                         f"{mask.dtype if isinstance(mask, Tensor) else type(mask).__name__}")
    selected = _values("masked_select", mask)
    x = as_tensor(input)
    try:
        shape = np.broadcast_shapes(tuple(x.shape), selected.shape)
    except ValueError:
        raise ShapeError(f"masked_select: input of shape {tuple(x.shape)} and mask of shape {selected.shape} do "
                         f"not broadcast") from None
    flat = reshape(broadcast_to(x, shape), (-1,))
    positions = Tensor._wrap(np.flatnonzero(np.broadcast_to(selected, shape)).astype(np.int64))
    return apply("index_select", flat, positions, axis=0)


__all__ = ["nonzero", "argwhere", "unique", "masked_select"]
