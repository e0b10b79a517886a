"""Reductions torch names that braze composes from registered ops: prod, count_nonzero, median and nanmedian,
nansum and nanmean, var_mean and std_mean, aminmax, logcumsumexp, and the norms: torch.norm here, with the
vector_norm and matrix_norm that braze.linalg (torch_linalg.py) exports.

Each is written with ops the registry already defines, so it traces, differentiates and compiles as those do.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from braze.ir.errors import BrazeError, DTypeError, ShapeError
from braze.ir.types import as_dtype, bool_, int64

from .dispatch import apply
from .functions import (MinMax, abs, add, div, eq, gt, logical_and, logical_not, maximum, mean, mul, ne, pow, sqrt,
                        std, sub, sum, var, where)
from .math_functions import _nonzero, isnan
from .movement import movedim, narrow, normalize_dim, normalize_dims, reshape, unsqueeze
from .ordering import sort
from .pointwise import log_add
from .promotion import as_tensor, cast, to_dtype
from .tensor import Tensor

_INF = float("inf")


class AminMax(NamedTuple):
    """The (min, max) pair aminmax returns, as torch.return_types.aminmax."""

    min: Tensor
    max: Tensor


def _all_dims(dim: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """Normalized reduction dims; None and an empty sequence mean every dim, as in torch's norms."""
    dims = normalize_dims(dim, ndim)
    return dims if dims and ndim else tuple(range(ndim))


def _squeezed(out: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    return out if keepdim else apply("squeeze", out, axes=axes)


def _reduced_count(x: Tensor, axes: tuple[int, ...]) -> int:
    return math.prod(x.shape[a] for a in axes) if x.ndim else 1


# --- products ---------------------------------------------------------------------------------------------


def prod(input: Tensor, dim: int | None = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """Product of all elements, or along `dim`; integer and bool tensors multiply as int64, an empty product is 1.
    Multiplied as a balanced tree of elementwise products, so the gradient is exact at zeros and needs no n x n
    intermediate (cumprod's gradient builds one per line)."""
    x = as_tensor(input)
    if dtype is not None:
        x = to_dtype(x, dtype)
    elif not x.dtype.is_float:
        x = cast(x, int64)
    if dim is None:
        out = _product_of_last(reshape(x, (-1,)))
        return reshape(out, (1,) * x.ndim) if keepdim else out
    d = normalize_dim(dim, x.ndim)
    if not x.ndim:
        return _product_of_last(reshape(x, (1,)))
    out = _product_of_last(movedim(x, d, -1))
    return unsqueeze(out, d) if keepdim else out


def _product_of_last(x: Tensor) -> Tensor:
    """The product along the last dim: halves multiplied pairwise, an odd length first padded with a 1."""
    while x.shape[-1] != 1:
        n = x.shape[-1]
        if n % 2 or not n:
            x = apply("pad", x, pads=(0, 0) * (x.ndim - 1) + (0, 1), value=1.0, mode="constant")
            n += 1
        if n > 1:
            x = mul(narrow(x, -1, 0, n // 2), narrow(x, -1, n // 2, n // 2))
    return apply("squeeze", x, axes=(x.ndim - 1,))


# --- counts and NaN-ignoring sums -------------------------------------------------------------------------


def count_nonzero(input: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """The number of nonzero elements over `dim` (all dims when None), as int64."""
    x = as_tensor(input)
    return apply("sum", _nonzero(x), axes=normalize_dims(dim, x.ndim), keepdim=False)


def nansum(input: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
           dtype: Any = None) -> Tensor:
    """sum with NaN counted as zero (their gradient is zero, as torch's)."""
    x = as_tensor(input)
    if x.dtype.is_float:
        x = where(isnan(x), 0.0, x)
    return sum(x, dim, keepdim, dtype=dtype)


def nanmean(input: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
            dtype: Any = None) -> Tensor:
    """The mean of the elements that are not NaN (NaN when there are none), of a floating-point tensor."""
    x = as_tensor(input)
    if not x.dtype.is_float:
        raise DTypeError(f"nanmean: expects a floating-point tensor, got {x.dtype}")
    return div(nansum(x, dim, keepdim, dtype=dtype), sum(logical_not(isnan(x)), dim, keepdim))


def var_mean(input: Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
             keepdim: bool = False, *, correction: int | None = None) -> tuple[Tensor, Tensor]:
    """(var, mean) with var's arguments; `var_mean(x, False)` passes unbiased, as torch's overload."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return var(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


def std_mean(input: Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
             keepdim: bool = False, *, correction: int | None = None) -> tuple[Tensor, Tensor]:
    """(std, mean) with std's arguments; `std_mean(x, False)` passes unbiased, as torch's overload."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return std(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


# --- order statistics -------------------------------------------------------------------------------------


def aminmax(input: Tensor, *, dim: int | None = None, keepdim: bool = False) -> AminMax:
    """(amin, amax) over `dim` (all dims when None) as a named pair; bool tensors give bools, as torch."""
    x = as_tensor(input)
    axes = tuple(range(x.ndim)) if dim is None else (normalize_dim(dim, x.ndim),)
    if x.ndim and not _reduced_count(x, axes):
        raise ShapeError(f"aminmax: cannot reduce an empty dimension of shape {tuple(x.shape)}: min and max have "
                         f"no identity")
    work = cast(x, int64) if x.dtype == bool_ else x
    low, high = (cast(apply(op, work, axes=axes, keepdim=keepdim), x.dtype) for op in ("min", "max"))
    return AminMax(low, high)


def median(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor | MinMax:
    """The lower median of all elements (NaN if one is NaN), or (values, indices) along `dim` as torch.median."""
    return _median("median", input, dim, keepdim, ignore_nan=False)


def nanmedian(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor | MinMax:
    """median of the elements that are not NaN (NaN, at the first position, when all are)."""
    return _median("nanmedian", input, dim, keepdim, ignore_nan=True)


def _median(name: str, input: Tensor, dim: int | None, keepdim: bool, ignore_nan: bool) -> Tensor | MinMax:
    x = as_tensor(input)
    if x.dtype == bool_:
        raise DTypeError(f"{name}: expects a numeric tensor, got bool")
    if dim is not None:
        return _median_along(name, x, normalize_dim(dim, x.ndim), keepdim, ignore_nan)
    flat = reshape(x, (-1,))
    if not flat.numel():
        if not x.dtype.is_float:
            raise IndexError(f"{name}: the median of an empty integer tensor is undefined")
        return add(apply("sum", flat, axes=None, keepdim=False), float("nan"))
    value = _median_along(name, flat.detach(), 0, False, ignore_nan).values
    if not x.dtype.is_float:
        return value
    # the value again as a reduction of the elements equal to it, so that its gradient is shared among them as
    # torch's: their max (exact), or for a NaN median the mean of the NaN elements
    shared = apply("max", where(eq(flat, value), flat, -_INF), axes=None, keepdim=False)
    nan = logical_and(isnan(flat), isnan(value))
    nan_shared = div(sum(where(nan, flat, 0.0)), maximum(sum(nan), 1))
    return where(isnan(value), nan_shared, shared)


def _median_along(name: str, x: Tensor, d: int, keepdim: bool, ignore_nan: bool) -> MinMax:
    """(values, indices) of the lower median along dim d: the sorted line's middle element, located with gather
    since NaN (sorted last) moves it; torch.median answers NaN and the first NaN's index then."""
    if not x.ndim:
        return MinMax(*sort(x, 0))
    n = x.shape[d]
    if not n:
        raise IndexError(f"{name}: cannot reduce dimension {d} of shape {tuple(x.shape)}: it is empty")
    values, indices = sort(x, d)
    if not x.dtype.is_float:
        out = [narrow(t, d, (n - 1) // 2, 1) for t in (values, indices)]
    else:
        missing = sum(isnan(x), d, keepdim=True)
        if ignore_nan:
            position = div(maximum(sub(n - 1, missing), 0), 2, rounding_mode="floor")
        else:
            position = where(gt(missing, 0), sub(n, missing), (n - 1) // 2)
        out = [apply("gather", t, position, axis=d) for t in (values, indices)]
    return MinMax(*(_squeezed(t, (d,), keepdim) for t in out))


# --- running log-sum-exp ----------------------------------------------------------------------------------


def logcumsumexp(input: Tensor, dim: int) -> Tensor:
    """log(cumsum(exp(input))) along `dim`, as a log2(n)-step scan of pairwise logaddexp: each prefix is shifted by
    its own maximum, so small leading values are not lost beside a later large one."""
    x = as_tensor(input)
    if not x.dtype.is_float:
        raise DTypeError(f"logcumsumexp: expects a floating-point tensor, got {x.dtype}")
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if n < 2:
        return x.clone()
    shift = 1
    while shift < n:
        pads = [0] * (2 * x.ndim)
        pads[2 * d] = shift
        earlier = apply("pad", narrow(x, d, 0, n - shift), pads=tuple(pads), value=-_INF, mode="constant")
        x = log_add(x, earlier)
        shift *= 2
    return x


# --- norms ------------------------------------------------------------------------------------------------


def _norm_operand(name: str, input: Any, dtype: Any) -> Tensor:
    """A floating-point input (torch refuses integer tensors, even with a dtype), cast to dtype when given."""
    x = as_tensor(input)
    if not x.dtype.is_float:
        raise DTypeError(f"{name}: expects a floating-point tensor, got {x.dtype}; convert it first (x.float())")
    if dtype is None:
        return x
    target = as_dtype(dtype)
    if not target.is_float:
        raise DTypeError(f"{name}: dtype must be a floating-point dtype, got {target}")
    return cast(x, target)


def _zero_safe(fn: Any, t: Tensor) -> Tensor:
    """fn(t) whose gradient is 0 where t is 0, where sqrt's and pow's own derivatives are inf or NaN (torch's norms
    give 0 there); the value there is fn(0) itself."""
    zero = eq(t, 0.0)
    return where(zero, fn(t.detach()), fn(where(zero, 1.0, t)))


def vector_norm(x: Tensor, ord: float = 2, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
                dtype: Any = None) -> Tensor:
    """torch.linalg.vector_norm: (sum |x|^ord)^(1/ord) over `dim` (all dims when None), with ord inf/-inf the
    largest/smallest |x| and ord 0 the count of nonzeros. Computed as written, as torch's: |x|^ord overflows to inf
    where torch's does (|x| > 1.8e19 for ord 2 in float32). Scaling by a power of two near max |x| avoided that at
    2.6x the time of the plain norm (4096 x 256 rows compiled: 414 against 153 us, torch 164)."""
    if isinstance(ord, str):
        raise TypeError(f"linalg.vector_norm: ord must be a number, got {ord!r} (use linalg.matrix_norm for "
                        f"'fro' and 'nuc')")
    x = _norm_operand("linalg.vector_norm", x, dtype)
    p = float(ord)
    axes = _all_dims(dim, x.ndim)
    if (p < 0 or p == _INF) and not _reduced_count(x, axes):
        raise ShapeError(f"linalg.vector_norm: cannot compute the {ord} norm over an empty dimension of shape "
                         f"{tuple(x.shape)}: it has no identity")
    if p == 0:
        return cast(apply("sum", ne(x, 0.0), axes=axes, keepdim=keepdim), x.dtype)
    a = abs(x)
    if p in (_INF, -_INF):
        return apply("max" if p > 0 else "min", a, axes=axes, keepdim=keepdim)
    if p == 1:
        return apply("sum", a, axes=axes, keepdim=keepdim)
    terms = mul(a, a) if p == 2 else _zero_safe(lambda t: pow(t, p), a)
    total = apply("sum", terms, axes=axes, keepdim=keepdim)
    return _zero_safe(sqrt, total) if p == 2 else _zero_safe(lambda t: pow(t, 1.0 / p), total)


def matrix_norm(input: Tensor, ord: str | float = "fro", dim: Sequence[int] = (-2, -1), keepdim: bool = False, *,
                dtype: Any = None) -> Tensor:
    """torch.linalg.matrix_norm over the matrices of dims `dim`: 'fro', or the max/min absolute row sum (ord inf,
    -inf) or column sum (1, -1); 'nuc', 2 and -2 need singular values, which braze does not compute."""
    A = _norm_operand("linalg.matrix_norm", input, dtype)
    if A.ndim < 2:
        raise ShapeError(f"linalg.matrix_norm: the input must have at least 2 dimensions, got shape {tuple(A.shape)}")
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    if len(dims) != 2:
        raise ShapeError(f"linalg.matrix_norm: dim must be a pair of dims, got {dim}")
    rows, cols = normalize_dims(dims, A.ndim)
    if rows == cols:
        raise ShapeError(f"linalg.matrix_norm: the two dims must differ, got {dim}")
    if ord == "fro":
        return vector_norm(A, 2, (rows, cols), keepdim)
    if ord in ("nuc", 2, -2):
        raise BrazeError(f"linalg.matrix_norm: ord={ord!r} needs the singular values (an SVD), which braze does not "
                         f"compute; supported: 'fro', inf, -inf, 1, -1")
    if isinstance(ord, str) or ord not in (_INF, -_INF, 1, -1):
        raise ValueError(f"linalg.matrix_norm: ord={ord!r} is not supported; supported: 'fro', inf, -inf, 1, -1")
    summed, picked = (cols, rows) if ord in (_INF, -_INF) else (rows, cols)
    sums = apply("sum", abs(A), axes=(summed,), keepdim=True)
    if not A.shape[rows] * A.shape[cols]:  # torch gives 0 for an empty matrix
        out = apply("sum", sums, axes=(picked,), keepdim=True)
    else:
        out = apply("max" if ord > 0 else "min", sums, axes=(picked,), keepdim=True)
    return _squeezed(out, (rows, cols), keepdim)


def norm(input: Tensor, p: str | float | None = "fro", dim: int | Sequence[int] | None = None,
         keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """torch.norm: the vector norm of order p ('fro' is 2) over `dim`; other strings, and 'fro' over more than two
    dims, go to matrix_norm as in torch (so 'nuc' raises there)."""
    if isinstance(p, str):
        if p == "fro" and (dim is None or isinstance(dim, (int, np.integer)) or len(dim) <= 2):
            return vector_norm(input, 2, dim, keepdim, dtype=dtype)
        return matrix_norm(input, p, tuple(range(input.ndim)) if dim is None else dim, keepdim, dtype=dtype)
    return vector_norm(input, 2 if p is None else p, dim, keepdim, dtype=dtype)


__all__ = ["prod", "count_nonzero", "nansum", "nanmean", "var_mean", "std_mean", "aminmax", "median", "nanmedian",
           "logcumsumexp", "norm"]
TENSOR_METHODS: tuple[str, ...] = ("prod", "count_nonzero", "nansum", "nanmean", "aminmax", "median", "nanmedian",
                                   "logcumsumexp", "norm")
