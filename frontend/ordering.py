"""Sorting and running sums, products and extremes along one dim: sort, argsort, topk (the registered ops of those
names), cumsum, cumprod, cummax and cummin."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from braze.ir.types import int64

from .dispatch import apply
from .movement import cat, gather, narrow, normalize_dim
from .promotion import as_tensor, cast, to_dtype
from .tensor import Tensor


class SortResult(NamedTuple):
    """The (values, indices) pair sort, topk, cummax and cummin return, as torch.return_types.sort."""

    values: Tensor
    indices: Tensor


def sort(input: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False) -> SortResult:
    """Values sorted along `dim` and their positions; ties keep their order (braze's sort is always stable, which
    torch's stable=False allows), NaN sorts as the largest value."""
    x = as_tensor(input)
    values, indices = apply("sort", x, axis=normalize_dim(dim, x.ndim), descending=bool(descending))
    return SortResult(values, indices)


def argsort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """The positions that sort `input` along `dim` (see sort)."""
    return sort(input, dim, descending).indices


def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> SortResult:
    """The k largest (smallest, with largest=False) values along `dim` and their positions, in sorted order (ties by
    the lower position, NaN largest, as sort's first k)."""
    x = as_tensor(input)
    d = normalize_dim(dim, x.ndim)
    size = x.shape[d] if x.ndim else 1
    if not 0 <= k <= size:
        raise IndexError(f"topk: k={k} is out of range for dimension {dim} of size {size}")
    if not x.ndim:
        return sort(x, d, descending=largest)
    values, indices = apply("topk", x, axis=d, k=int(k), largest=bool(largest))
    return SortResult(values, indices)


def _scan(name: str, input: Tensor, dim: int, dtype: Any) -> Tensor:
    x = as_tensor(input)
    if dtype is not None:
        x = to_dtype(x, dtype)
    elif not x.dtype.is_float:
        x = cast(x, int64)
    return apply(name, x, axis=normalize_dim(dim, x.ndim))


def cumsum(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """Running sums along `dim`; integer and bool tensors sum as int64, as torch."""
    return _scan("cumsum", input, dim, dtype)


def cumprod(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """Running products along `dim`; integer and bool tensors multiply as int64, as torch."""
    return _scan("cumprod", input, dim, dtype)


def _running_extreme(input: Tensor, dim: int, compare: str) -> SortResult:
    """cummax (compare "ge") or cummin ("le"): the positions by a log2(n)-step scan whose pairwise step keeps the
    later of two running extremes when it compares `compare` to the earlier one or is NaN, so that ties and NaN
    go to the last occurrence, as torch's; the values are gathered from there, so the gradient flows to them."""
    x = as_tensor(input)
    d = normalize_dim(dim, x.ndim)
    if not x.ndim:
        return SortResult(x.clone(), Tensor._wrap(np.zeros((), np.int64)))
    n = x.shape[d]
    line = [1] * x.ndim
    line[d] = n
    index = apply("broadcast_to", Tensor._wrap(np.arange(n, dtype=np.int64).reshape(line)), shape=tuple(x.shape))
    values = x.detach()
    shift = 1
    while shift < n:
        earlier, later = narrow(values, d, 0, n - shift), narrow(values, d, shift, n - shift)
        take = apply(compare, later, earlier)
        if x.dtype.is_float:
            take = apply("maximum", take, apply("ne", later, later))
        picked = [apply("where", take, narrow(t, d, shift, n - shift), narrow(t, d, 0, n - shift))
                  for t in (values, index)]
        values, index = (cat([narrow(t, d, 0, shift), p], d) for t, p in zip((values, index), picked))
        shift *= 2
    return SortResult(gather(x, d, index), index)


def cummax(input: Tensor, dim: int) -> SortResult:
    """The running maximum along `dim` and the position it was taken from (the last of equal values; NaN, once
    seen, is the maximum), as torch's."""
    return _running_extreme(input, dim, "ge")


def cummin(input: Tensor, dim: int) -> SortResult:
    """The running minimum along `dim` and the position it was taken from (the last of equal values; NaN, once
    seen, is the minimum), as torch's."""
    return _running_extreme(input, dim, "le")


__all__ = ["sort", "argsort", "topk", "cumsum", "cumprod", "cummax", "cummin"]
TENSOR_METHODS: tuple[str, ...] = ("cummax", "cummin")  # bound as Tensor methods in methods.py
