"""Functions that arrange a tensor's elements into new shapes, with torch's names: tile, meshgrid, cartesian_prod,
diag, diag_embed, block_diag, trace (a Tensor method: braze.trace is the tracer), diff, take, take_along_dim, ravel,
atleast_1d/2d/3d, rot90 and vander, the creation functions tril_indices and triu_indices, and Tensor.unfold (a method
only, as torch's).

Each is written with ops the registry already defines, so it traces, differentiates and compiles as those do.
Zeros placed around values (diag, diag_embed, block_diag) come from padding, never from multiplying by 0, so an
inf or NaN stays where it is.
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np

from braze.ir.errors import DTypeError, ShapeError
from braze.ir.types import as_dtype, bool_, int64

from .creation import _leaf
from .dispatch import apply
from .functions import ne, sub
from .functions import sum as sum_of
from .indexing import _index_tensor
from .movement import (_joined, broadcast_to, cat, flip, movedim, narrow, normalize_dim, normalize_dims, repeat,
                       reshape, stack, transpose, unsqueeze)
from .movement import diagonal as _diagonal_of
from .ordering import cumprod
from .promotion import as_tensor, cast, coerce
from .tensor import Tensor


def tile(input: Tensor, dims: int | Sequence[int], *more: int) -> Tensor:
    """The tensor repeated dims[i] times along dim i; fewer dims than the tensor has are padded with leading 1s
    (torch.tile; as a method, the sizes may be given separately)."""
    x = as_tensor(input)
    reps = (int(dims), *more) if isinstance(dims, (int, np.integer)) else tuple(dims)
    return repeat(x, (1,) * (x.ndim - len(reps)) + reps)


def meshgrid(*tensors: Any, indexing: str | None = None) -> tuple[Tensor, ...]:
    """Coordinate grids of 0-D or 1-D tensors (given separately or as one list), each broadcast to the grid's shape;
    indexing 'xy' swaps the first two dims (torch warns when indexing is not given, and then uses 'ij')."""
    ts = [as_tensor(t) for t in (tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
                                 else tensors)]
    if not ts:
        raise ValueError("meshgrid: expects at least one tensor")
    if indexing is None:
        warnings.warn("meshgrid: pass indexing='ij' or 'xy'; torch will require it, and uses 'ij' until then",
                      UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in ts:
        if t.ndim > 1:
            raise ShapeError(f"meshgrid: expects 0-D or 1-D tensors, got shape {tuple(t.shape)}")
        if t.dtype != ts[0].dtype:
            raise DTypeError(f"meshgrid: expects tensors of one dtype, got {ts[0].dtype} and {t.dtype}")
    sizes = [t.numel() for t in ts]
    order = list(range(len(ts)))
    if indexing == "xy" and len(ts) > 1:
        order[0], order[1] = 1, 0
    shape = tuple(sizes[k] for k in order)
    grids = []
    for k, t in enumerate(ts):
        view = [1] * len(ts)
        view[order.index(k)] = sizes[k]
        grids.append(broadcast_to(reshape(t, view), shape))
    return tuple(grids)


def cartesian_prod(*tensors: Tensor) -> Tensor:
    """The rows of every combination of one element from each 1-D tensor, in row-major order (one tensor: itself)."""
    ts = [as_tensor(t) for t in tensors]
    for t in ts:
        if t.ndim != 1:
            raise ShapeError(f"cartesian_prod: expects 1-D tensors, got shape {tuple(t.shape)}")
    if len(ts) == 1:
        return ts[0]
    return stack([reshape(g, (-1,)) for g in meshgrid(*ts, indexing="ij")], 1)


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """Matrices (in dims dim1, dim2 of the result) holding the last dim of `input` on diagonal `offset`, zeros
    elsewhere: each vector followed by a row of zeros and read back as a matrix, so the zeros are padding."""
    x = as_tensor(input)
    d1, d2 = normalize_dim(dim1, x.ndim + 1), normalize_dim(dim2, x.ndim + 1)
    if d1 == d2:
        raise ShapeError(f"diag_embed: dim1 and dim2 must differ, both are {d1}")
    n = x.shape[-1]
    size = n + abs(offset)
    lead = offset if offset >= 0 else -offset * size
    spread = _pad_last(unsqueeze(x, -1), 0, size)
    stream = reshape(spread, tuple(x.shape[:-1]) + (n * (size + 1),))
    stream = _pad_last(stream, lead, max(0, size * size - lead - n * (size + 1)))
    square = reshape(narrow(stream, -1, 0, size * size), tuple(x.shape[:-1]) + (size, size))
    return movedim(square, (-2, -1), (d1, d2))


def _pad_last(x: Tensor, before: int, after: int) -> Tensor:
    """x with `before` and `after` zeros along its last dim."""
    return apply("pad", x, pads=(0, 0) * (x.ndim - 1) + (before, after), value=0.0, mode="constant")


def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D tensor as the square matrix with it on diagonal `diagonal` (zeros elsewhere), or a matrix's diagonal."""
    x = as_tensor(input)
    if x.ndim == 1:
        return diag_embed(x, diagonal)
    if x.ndim == 2:
        return _diagonal_of(x, diagonal)
    raise ShapeError(f"diag: expects a 1-D or 2-D tensor, got shape {tuple(x.shape)}")


def block_diag(*tensors: Any) -> Tensor:
    """The tensors (0-D as 1x1, 1-D as a row) as the blocks of a block-diagonal matrix, dtypes promoted; each block's
    row is the block padded with zeros on both sides."""
    if not tensors:
        return Tensor._wrap(np.zeros((1, 0), np.float32))
    blocks = []
    for k, t in enumerate(coerce(list(tensors))):
        if t.ndim > 2:
            raise ShapeError(f"block_diag: expects tensors of at most 2 dims, tensor {k} has shape {tuple(t.shape)}")
        blocks.append(reshape(t, tuple(t.shape) if t.ndim == 2 else (1, t.numel())))
    width = sum(b.shape[1] for b in blocks)
    left, rows = 0, []
    for b in blocks:
        rows.append(_pad_last(b, left, width - left - b.shape[1]))
        left += b.shape[1]
    return cat(rows, 0)


def trace(input: Tensor) -> Tensor:
    """The sum of a matrix's diagonal (integer matrices sum as int64)."""
    x = as_tensor(input)
    if x.ndim != 2:
        raise ShapeError(f"trace: expects a matrix, got shape {tuple(x.shape)}")
    if x.dtype == bool_:
        raise DTypeError("trace: expects a numeric matrix, got bool")
    return sum_of(_diagonal_of(x))


def diff(input: Tensor, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Tensor:
    """The n-th forward difference along `dim` (x[i + 1] - x[i], or != for bool), after joining prepend and append
    there."""
    x = as_tensor(input)
    if not x.ndim:
        raise ShapeError("diff: expects a tensor of at least one dimension, got a 0-d tensor")
    if n < 0:
        raise ValueError(f"diff: the order n must be non-negative, got {n}")
    d = normalize_dim(dim, x.ndim)
    parts = [as_tensor(p) if p is not None else None for p in (prepend, x, append)]
    parts = [p for p in parts if p is not None]
    for p in parts:
        if p.ndim != x.ndim:
            raise ShapeError(f"diff: prepend and append must have the input's {x.ndim} dims, got shape "
                             f"{tuple(p.shape)}")
    x = cat(parts, d) if len(parts) > 1 else x
    for _ in range(n):
        m = x.shape[d]
        if not m:
            break
        later, earlier = narrow(x, d, 1, m - 1), narrow(x, d, 0, m - 1)
        x = ne(later, earlier) if x.dtype == bool_ else sub(later, earlier)
    return x


def take(input: Tensor, index: Any) -> Tensor:
    """Elements of the flattened input at `index` (negative entries count from the end), in index's shape."""
    flat = reshape(as_tensor(input), (-1,))
    return apply("index_select", flat, _index_tensor(index, flat.shape[0]), axis=0)


def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    """Values at `indices` along `dim` (of the flattened tensors when None), the other dims broadcast
    (numpy.take_along_axis); negative indices count from the end."""
    x, idx = as_tensor(input), as_tensor(indices)
    if not idx.dtype.is_integer:
        raise DTypeError(f"take_along_dim: indices must be an integer tensor, got {idx.dtype}")
    if dim is None:
        flat = reshape(x, (-1,))
        return apply("gather", flat, _index_tensor(reshape(idx, (-1,)), flat.shape[0]), axis=0)
    if x.ndim != idx.ndim:
        raise ShapeError(f"take_along_dim: input and indices must have the same number of dims, got shapes "
                         f"{tuple(x.shape)} and {tuple(idx.shape)}")
    d = normalize_dim(dim, x.ndim)
    others = [k for k in range(x.ndim) if k != d]
    try:
        common = list(np.broadcast_shapes(tuple(x.shape[k] for k in others), tuple(idx.shape[k] for k in others)))
    except ValueError:
        raise ShapeError(f"take_along_dim: shapes {tuple(x.shape)} and {tuple(idx.shape)} do not broadcast outside "
                         f"dim {dim}") from None
    x = broadcast_to(x, common[:d] + [x.shape[d]] + common[d:])
    idx = broadcast_to(idx, common[:d] + [idx.shape[d]] + common[d:])
    return apply("gather", x, _index_tensor(idx, x.shape[d]), axis=d)


def ravel(input: Tensor) -> Tensor:
    """The elements as a 1-D tensor, in row-major order."""
    return reshape(as_tensor(input), (-1,))


def _at_least(name: str, rank: int, tensors: tuple[Any, ...]) -> Tensor | tuple[Tensor, ...]:
    """Each tensor reshaped to at least `rank` dims as torch's atleast_{rank}d; one tensor gives one tensor."""
    single = len(tensors) == 1 and not isinstance(tensors[0], (list, tuple))
    ts = tensors[0] if len(tensors) == 1 and not single else tensors
    out = tuple(_joined(name, [t], rank)[0] for t in ts)
    return out[0] if single else out


def atleast_1d(*tensors: Any) -> Tensor | tuple[Tensor, ...]:
    """0-d tensors as 1-D (shape (1,)); others unchanged."""
    return _at_least("atleast_1d", 1, tensors)


def atleast_2d(*tensors: Any) -> Tensor | tuple[Tensor, ...]:
    """0-d tensors as (1, 1) and 1-D ones as rows (1, n); others unchanged."""
    return _at_least("atleast_2d", 2, tensors)


def atleast_3d(*tensors: Any) -> Tensor | tuple[Tensor, ...]:
    """0-d tensors as (1, 1, 1), 1-D ones as (1, n, 1) and matrices as (m, n, 1); others unchanged."""
    return _at_least("atleast_3d", 3, tensors)


def rot90(input: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
    """The tensor rotated by k quarter turns in the plane of `dims`, from the first dim towards the second."""
    x = as_tensor(input)
    if len(dims) != 2:
        raise ShapeError(f"rot90: dims must name two dims, got {tuple(dims)}")
    if x.ndim < 2:
        raise ShapeError(f"rot90: expects a tensor of at least 2 dims, got shape {tuple(x.shape)}")
    a, b = normalize_dims(dims, x.ndim)
    if a == b:
        raise ShapeError(f"rot90: the two dims must differ, got {tuple(dims)}")
    turns = k % 4
    if turns == 1:
        return transpose(flip(x, (b,)), a, b)
    if turns == 2:
        return flip(x, (a, b))
    if turns == 3:
        return transpose(flip(x, (a,)), a, b)
    return x.clone()


def vander(x: Tensor, N: int | None = None, increasing: bool = False) -> Tensor:
    """The Vandermonde matrix of a vector: columns x**(N-1), ..., x, 1 (reversed when increasing), as running
    products (torch's cumprod form); integer and bool vectors give int64."""
    v = as_tensor(x)
    if v.ndim != 1:
        raise ShapeError(f"vander: expects a 1-D tensor, got shape {tuple(v.shape)}")
    n = v.shape[0] if N is None else int(N)
    if n < 0:
        raise ValueError(f"vander: N must be non-negative, got {n}")
    v = v if v.dtype.is_float else cast(v, int64)
    column = unsqueeze(v, 1)
    if not n:
        return narrow(column, 1, 0, 0)
    powers = broadcast_to(column, (v.shape[0], n - 1))
    powers = cumprod(powers, 1) if n > 1 else powers
    out = apply("pad", powers, pads=(0, 0, 1, 0), value=1.0, mode="constant")
    return out if increasing else flip(out, (1,))


def unfold(input: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """The windows of `size` elements, `step` apart, along `dimension`, as a new last dim (torch's Tensor.unfold).

    Built from whichever is fewer: one strided slice per position within a window, or one slice per window.
    """
    x = as_tensor(input)
    d = normalize_dim(dimension, x.ndim)
    length = x.shape[d] if x.ndim else 1
    if size < 0:
        raise ShapeError(f"unfold: size is {size} but must be >= 0")
    if size > length:
        raise ShapeError(f"unfold: maximum size for tensor at dimension {d} is {length} but size is {size}")
    if step <= 0:
        raise ShapeError(f"unfold: step is {step} but must be > 0")
    if not x.ndim:  # a 0-d tensor is one window of its one element, or an empty one
        return narrow(reshape(x, (1,)), 0, 0, size)
    count = (length - size) // step + 1
    if 0 < size <= count:
        shape = x.shape
        starts = [tuple(j if a == d else 0 for a in range(x.ndim)) for j in range(size)]
        stops = [tuple(j + (count - 1) * step + 1 if a == d else n for a, n in enumerate(shape)) for j in range(size)]
        steps = tuple(step if a == d else 1 for a in range(x.ndim))
        return stack([apply("slice", x, starts=a, stops=b, steps=steps) for a, b in zip(starts, stops)], -1)
    return stack([movedim(narrow(x, d, i * step, size), d, -1) for i in range(count)], d)


def _triangle_indices(name: str, lower: bool, row: int, col: int, offset: int, dtype: Any, device: Any) -> Tensor:
    d = as_dtype(dtype)
    if not d.is_integer:
        raise DTypeError(f"{name}: dtype must be an integer dtype, got {d}")
    found = np.tril_indices(row, offset, col) if lower else np.triu_indices(row, offset, col)
    return _leaf(np.stack(found).astype(d.numpy).reshape(2, -1), False, device)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype: Any = int64, device: Any = None,
                 layout: Any = None) -> Tensor:
    """The (2, count) coordinates of a row x col matrix's lower triangle (on and below diagonal `offset`), in
    row-major order."""
    return _triangle_indices("tril_indices", True, row, col, offset, dtype, device)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype: Any = int64, device: Any = None,
                 layout: Any = None) -> Tensor:
    """The (2, count) coordinates of a row x col matrix's upper triangle (on and above diagonal `offset`), in
    row-major order."""
    return _triangle_indices("triu_indices", False, row, col, offset, dtype, device)


__all__ = ["tile", "meshgrid", "cartesian_prod", "diag", "diag_embed", "block_diag", "diff", "take", "take_along_dim",
           "ravel", "atleast_1d", "atleast_2d", "atleast_3d", "rot90", "vander", "tril_indices", "triu_indices"]
TENSOR_METHODS: tuple[str, ...] = ("tile", "diag", "diag_embed", "trace", "diff", "take", "take_along_dim", "ravel",
                                   "rot90", "unfold")
