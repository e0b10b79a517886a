"""Searching sorted sequences and counting into bins, with torch's names: searchsorted, bucketize, histc.

Each is written with ops the registry already defines, so it traces, differentiates and compiles as those do.
searchsorted counts the boundaries below each value, by comparing every value with every boundary or, when that
costs more, from one stable sort of values and boundaries together; histc computes the data's range inside the graph
when asked for it (min = max), so it traces with a fixed number of bins.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from braze.ir.errors import DTypeError, ShapeError
from braze.ir.types import bool_, int32, int64

from .dispatch import apply
from .functions import where
from .movement import cat, flatten, gather, narrow, reshape, unsqueeze
from .promotion import SCALARS, as_tensor, cast, coerce, result_dtype
from .tensor import Tensor

# a stable sort of n elements costs about what 32 n log2(n) comparisons do (compiled, float32: sorting 10^4 + 10^4
# values took 0.3 ms, comparing them pairwise 4.2 ms; 10^2 against 10^4 values 0.12 and 0.045 ms)
_SORT_COST = 32


def _side(right: bool, side: str | None) -> bool:
    """True for the right side (the first position after values equal to the one searched)."""
    if side is None:
        return bool(right)
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    if side == "left" and right:
        raise ValueError("searchsorted: side='left' and right=True ask for opposite sides")
    return side == "right"


def searchsorted(sorted_sequence: Tensor, input: Any, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter: Tensor | None = None) -> Tensor:
    """The positions at which the values of `input` would be inserted into the innermost dim of `sorted_sequence`
    to keep it sorted: the count of entries below each value (with right=True or side='right', of entries not above
    it). A 1-D sequence serves every value; otherwise its leading dims must equal input's. `sorter` holds positions
    that sort an unsorted sequence. Operands promote as torch's; a NaN value goes to the end, and NaN in the
    sequence counts as larger than every number (as torch.sort places it)."""
    after = _side(right, side)
    seq = as_tensor(sorted_sequence)
    scalar = isinstance(input, SCALARS)
    values = as_tensor(input) if not scalar else None
    if not seq.ndim:
        raise ShapeError("searchsorted: the sorted sequence must have at least 1 dim, got a 0-d tensor")
    if seq.ndim > 1 and (scalar or values.ndim != seq.ndim or tuple(values.shape[:-1]) != tuple(seq.shape[:-1])):
        shape = () if scalar else tuple(values.shape)
        raise ShapeError(f"searchsorted: a sequence of shape {tuple(seq.shape)} needs values of shape "
                         f"{tuple(seq.shape[:-1])} + (n,), got {shape}; only a 1-D sequence serves any shape")
    if sorter is not None:
        sorter = as_tensor(sorter)
        if sorter.dtype != int64 or tuple(sorter.shape) != tuple(seq.shape):
            raise ShapeError(f"searchsorted: sorter must be an int64 tensor of the sequence's shape "
                             f"{tuple(seq.shape)}, got {sorter.dtype} of shape {tuple(sorter.shape)}")
        seq = gather(seq, -1, sorter)
    dtype = result_dtype(seq, input)
    if dtype == bool_:
        raise DTypeError("searchsorted: bool sequences and values are not supported, as in torch")
    seq, values = coerce((seq, input), dtype)
    shape = tuple(values.shape)
    if seq.ndim == 1:
        seq, values = unsqueeze(seq, 0), reshape(values, (1, -1))
    else:
        seq, values = flatten(seq, 0, -2), flatten(values, 0, -2)
    count = _count_below(seq, values, after)
    if dtype.is_float:
        count = where(apply("ne", values, values), as_tensor(seq.shape[-1], int64), count)
    count = reshape(count, shape)
    return cast(count, int32) if out_int32 else count


def _count_below(seq: Tensor, values: Tensor, after: bool) -> Tensor:
    """For rows seq (b, m) and values (b, n): per value the count of its row's entries below it (not above it when
    `after`), int64 (b, n); by comparing all pairs, or from a stable sort when that costs fewer steps."""
    m, n = seq.shape[-1], values.shape[-1]
    if m * n <= _SORT_COST * (m + n) * math.log2(m + n + 1):
        below = apply("le" if after else "lt", unsqueeze(seq, 1), unsqueeze(values, 2))
        return apply("sum", cast(below, int64), axes=(2,), keepdim=False)
    return _count_by_sorting(seq, values, after)


def _count_by_sorting(seq: Tensor, values: Tensor, after: bool) -> Tensor:
    """_count_below from one stable sort of each row's values and entries together, the values placed first (or,
    when `after`, last) so that equal entries sort after (before) them: a value's count is the number of entries
    sorted before it, a running sum of the entry flags read at its sorted position and scattered back."""
    (b, m), n = seq.shape, values.shape[-1]
    joined = cat([seq, values] if after else [values, seq], 1)
    order = apply("sort", joined, axis=1, descending=False)[1]
    is_entry = apply("lt", order, m) if after else apply("ge", order, n)
    running = apply("cumsum", cast(is_entry, int64), axis=1)
    counts = apply("scatter", apply("broadcast_to", as_tensor(0, int64), shape=(b, m + n)), order, running, axis=1)
    return narrow(counts, 1, m if after else 0, n)


def bucketize(input: Any, boundaries: Tensor, *, out_int32: bool = False, right: bool = False) -> Tensor:
    """The index of the bucket of each value among the 1-D increasing `boundaries`: searchsorted(boundaries, input)
    (right=True puts a value equal to a boundary in the bucket after it)."""
    b = as_tensor(boundaries)
    if b.ndim != 1:
        raise ShapeError(f"bucketize: boundaries must be 1-D, got shape {tuple(b.shape)}")
    return searchsorted(b, input, out_int32=out_int32, right=right)


def histc(input: Tensor, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:
    """Counts of the elements in `bins` equal-width bins over [min, max] (the last bin includes max; elements
    outside and NaN are left out), in input's dtype. With min = max the range is the data's, computed inside the
    graph (widened by 1 each way when all elements are equal), so that histc traces with fixed bins; eagerly a
    non-finite range raises, as torch's. The bin of x is int((x - min) bins / (max - min)), as torch computes it."""
    x = as_tensor(input)
    if not x.dtype.is_float:
        raise DTypeError(f"histc: expects a floating-point tensor, got {x.dtype}")
    if bins <= 0:
        raise ValueError(f"histc: bins must be positive, got {bins}")
    lo, hi = float(min), float(max)
    if lo > hi:
        raise ValueError(f"histc: max must be larger than min, got min={min}, max={max}")
    flat = reshape(x, (-1,))
    if lo == hi and flat.shape[0]:
        lo_t, hi_t = apply("min", flat, axes=None, keepdim=False), apply("max", flat, axes=None, keepdim=False)
        same = apply("eq", lo_t, hi_t)
        lo_t = where(same, apply("sub", lo_t, 1.0), lo_t)
        hi_t = where(same, apply("add", hi_t, 1.0), hi_t)
        if isinstance(x._data, np.ndarray):
            _check_range(float(lo_t._data), float(hi_t._data))
    else:
        lo, hi = (lo - 1.0, hi + 1.0) if lo == hi else (lo, hi)
        _check_range(lo, hi)
        lo_t, hi_t = as_tensor(lo, x.dtype), as_tensor(hi, x.dtype)
    inside = apply("mul", apply("ge", flat, lo_t), apply("le", flat, hi_t))
    scaled = apply("div", apply("mul", apply("sub", flat, lo_t), float(bins)), apply("sub", hi_t, lo_t))
    position = apply("clamp", cast(apply("floor", where(inside, scaled, as_tensor(0.0, x.dtype))), int64),
                     min=None, max=float(bins - 1))
    position = where(inside, position, as_tensor(bins, int64))
    ones = apply("broadcast_to", as_tensor(1, int64), shape=tuple(flat.shape))
    counts = apply("scatter_add", ones, position, axis=0, shape=(bins + 1,))
    return cast(narrow(counts, 0, 0, bins), x.dtype)


def _check_range(lo: float, hi: float) -> None:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"histc: range of [{lo}, {hi}] is not finite")


__all__: list[str] = ["searchsorted", "bucketize", "histc"]
TENSOR_METHODS: tuple[str, ...] = ("histc",)  # the names above that are also Tensor methods (bound in methods.py)
