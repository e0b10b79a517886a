"""Sorting and running sums and products along one dim: sort, argsort, topk (the registered ops of those names),
cumsum and cumprod."""
from __future__ import annotations

from typing import Any, NamedTuple

from braze.ir.types import int64

from .dispatch import apply
from .movement import normalize_dim
from .promotion import as_tensor, cast, to_dtype
from .tensor import Tensor


class SortResult(NamedTuple):
    """The (values, indices) pair sort and topk return, as torch.return_types.sort."""

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


__all__ = ["sort", "argsort", "topk", "cumsum", "cumprod"]
