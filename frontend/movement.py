"""Shape and movement functions (reshape, permute, cat, split, gather, ...) and dim normalization.

torch's argument conventions (negative dims, -1 sizes, split sizes) are resolved here into the normalized
attributes the registered movement and indexing ops take.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from braze.ir.errors import ShapeError

from .dispatch import apply
from .promotion import as_tensor, coerce
from .tensor import Tensor


def normalize_dim(dim: int, ndim: int, extra: int = 0) -> int:
    """A non-negative dim for a tensor of rank `ndim` (+ `extra` for dims of a result, as unsqueeze)."""
    rank = ndim + extra
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise IndexError(f"dimension {dim} is out of range for a tensor of rank {ndim}")
    return dim % rank if rank else 0


def normalize_dims(dim: int | Sequence[int] | None, ndim: int) -> tuple[int, ...] | None:
    """Non-negative dims from an int, a sequence or None (None stays None: every dim)."""
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    return tuple(normalize_dim(int(d), ndim) for d in dims)


def clone(input: Tensor, *, memory_format: Any = None) -> Tensor:
    """A copy of input that stays in the autodiff graph (torch.clone; Tensor.clone)."""
    x = as_tensor(input)
    return x.clone() if memory_format is None else x.clone(memory_format=memory_format)


def reshape(input: Tensor, shape: Sequence[int]) -> Tensor:
    """`input` with a new shape of equal size; one dimension may be -1 (inferred)."""
    return apply("reshape", input, shape=infer_shape(shape, input.numel(), input.shape))


def infer_shape(shape: Sequence[int], size: int, source: tuple[int, ...]) -> tuple[int, ...]:
    """Resolve one -1 in `shape` from the element count."""
    dims = tuple(int(d) for d in shape)
    if dims.count(-1) > 1:
        raise ShapeError(f"reshape: only one dimension can be -1, got {list(dims)}")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"reshape: cannot reshape shape {list(source)} ({size} elements) to {list(dims)}")
        dims = tuple(size // known if d == -1 else d for d in dims)
    return dims


def permute(input: Tensor, dims: Sequence[int]) -> Tensor:
    """The dims of `input` reordered: result dim i is input dim dims[i]."""
    return apply("transpose", input, perm=tuple(normalize_dim(d, input.ndim) for d in dims))


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    """`input` with dims dim0 and dim1 swapped."""
    perm = list(range(input.ndim))
    a, b = normalize_dim(dim0, input.ndim), normalize_dim(dim1, input.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return apply("transpose", input, perm=tuple(perm))


swapaxes = transpose


def t(input: Tensor) -> Tensor:
    """Transpose a matrix (rank <= 2), as torch.t."""
    if input.ndim > 2:
        raise ShapeError(f"t: expects a tensor of rank <= 2, got shape {input.shape}")
    return transpose(input, 0, 1) if input.ndim == 2 else input


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Dims start_dim..end_dim merged into one."""
    if input.ndim == 0:
        return reshape(input, (1,))
    a, b = normalize_dim(start_dim, input.ndim), normalize_dim(end_dim, input.ndim)
    if a > b:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {input.shape}")
    shape = input.shape
    return apply("reshape", input, shape=shape[:a] + (math.prod(shape[a:b + 1]),) + shape[b + 1:])


def squeeze(input: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """Remove size-1 dims (all of them, or those of `dim`; others in `dim` are left alone, as torch)."""
    dims = range(input.ndim) if dim is None else normalize_dims(dim, input.ndim)
    return apply("squeeze", input, axes=tuple(d for d in dims if input.shape[d] == 1))


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    """`input` with a size-1 dim inserted at `dim`."""
    return apply("unsqueeze", input, axes=(normalize_dim(dim, input.ndim, extra=1),))


def broadcast_to(input: Tensor, size: Sequence[int]) -> Tensor:
    """`input` repeated along size-1 and new leading dims; -1 keeps a dimension, as torch.expand."""
    size = tuple(int(s) for s in size)
    lead = len(size) - input.ndim
    shape = tuple(input.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(size))
    return apply("broadcast_to", input, shape=shape)


def cat(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    """Join tensors along an existing dim; dtypes promote as torch.cat."""
    return apply("concat", *coerce(list(tensors)), axis=dim)


concat = concatenate = cat


def stack(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    """Join equal-shaped tensors along a new dim."""
    return apply("stack", *coerce(list(tensors)), axis=dim)


def _joined(name: str, tensors: Sequence[Any], rank: int) -> list[Tensor]:
    """The tensors (dtypes promoted) with 0-d ones as 1-D and, below `rank` dims, reshaped as torch's atleast_2d
    (1, n) and atleast_3d ((1, n, 1) or (m, n, 1)) reshape them."""
    if not tensors:
        raise ShapeError(f"{name}: expects a non-empty sequence of tensors")
    out = []
    for t in coerce(list(tensors)):
        shape = tuple(t.shape) or (1,)
        if len(shape) < rank:
            shape = ((1,) + shape)[-2:] if rank == 2 else {1: (1, shape[0], 1), 2: shape + (1,)}[len(shape)]
        out.append(reshape(t, shape))
    return out


def hstack(tensors: Sequence[Any]) -> Tensor:
    """Join along dim 1, or along dim 0 when the tensors are 1-D (0-d ones count as 1-D), as torch.hstack."""
    joined = _joined("hstack", tensors, 1)
    return cat(joined, 0 if joined[0].ndim == 1 else 1)


def vstack(tensors: Sequence[Any]) -> Tensor:
    """Join along dim 0, 0-d and 1-D tensors as rows (torch.vstack, row_stack)."""
    return cat(_joined("vstack", tensors, 2), 0)


def dstack(tensors: Sequence[Any]) -> Tensor:
    """Join along dim 2, 1-D tensors as (1, n, 1) and 2-D ones as (m, n, 1) (torch.dstack)."""
    return cat(_joined("dstack", tensors, 3), 2)


row_stack = vstack


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    """The slice [start, start + length) of `input` along `dim`."""
    d = normalize_dim(dim, input.ndim)
    start = start + input.shape[d] if start < 0 else start
    starts = tuple(start if i == d else 0 for i in range(input.ndim))
    stops = tuple(start + length if i == d else n for i, n in enumerate(input.shape))
    return apply("slice", input, starts=starts, stops=stops, steps=(1,) * input.ndim)


def split(tensor: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces of `split_size` along `dim` (the last may be smaller), or of the listed sizes."""
    d = normalize_dim(dim, tensor.ndim)
    n = tensor.shape[d]
    if isinstance(split_size_or_sections, (int, np.integer)):
        step = int(split_size_or_sections)
        sizes = [min(step, n - s) for s in range(0, n, step)] or [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n:
            raise ShapeError(f"split: sizes {sizes} do not add up to dimension {dim} of shape {tensor.shape}")
    starts = np.cumsum([0] + sizes[:-1])
    return tuple(narrow(tensor, d, int(s), size) for s, size in zip(starts, sizes))


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """`chunks` nearly equal pieces along `dim` (the last may be smaller), as torch.chunk."""
    n = input.shape[normalize_dim(dim, input.ndim)]
    return split(input, max(-(-n // chunks), 1), dim)


def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices along `dim`, each without that dim."""
    d = normalize_dim(dim, input.ndim)
    return tuple(apply("squeeze", piece, axes=(d,)) for piece in split(input, 1, d))


def flip(input: Tensor, dims: int | Sequence[int]) -> Tensor:
    """The elements in reverse order along each of `dims`."""
    return apply("flip", input, axes=normalize_dims(dims, input.ndim) or ())


def roll(input: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Elements shifted cyclically by `shifts` along `dims` (of the flattened tensor when dims is None): two
    slices joined in the other order."""
    if dims is None:
        return reshape(roll(reshape(input, (-1,)), shifts, 0), input.shape)
    shifts_, dims_ = (shifts,) if isinstance(shifts, int) else tuple(shifts), normalize_dims(dims, input.ndim)
    if len(shifts_) != len(dims_):
        raise ValueError(f"roll: shifts {shifts} and dims {dims} must have the same length")
    out = input
    for shift, d in zip(shifts_, dims_):
        n = input.shape[d]
        cut = n - shift % n if n else 0
        if cut % max(n, 1):
            out = cat([narrow(out, d, cut, n - cut), narrow(out, d, 0, cut)], d)
    return out


def repeat(input: Tensor, *sizes: Any) -> Tensor:
    """The tensor tiled `sizes[i]` times along dim i (extra leading sizes add dims), as torch.Tensor.repeat."""
    reps = tuple(sizes[0]) if len(sizes) == 1 and not isinstance(sizes[0], (int, np.integer)) else tuple(sizes)
    if len(reps) < input.ndim:
        raise ShapeError(f"repeat: {len(reps)} repeat sizes given for a tensor of rank {input.ndim}")
    shape = (1,) * (len(reps) - input.ndim) + tuple(input.shape)
    spread = apply("reshape", input, shape=tuple(d for n in shape for d in (1, n)))
    tiled = apply("broadcast_to", spread, shape=tuple(d for r, n in zip(reps, shape) for d in (int(r), n)))
    return apply("reshape", tiled, shape=tuple(int(r) * n for r, n in zip(reps, shape)))


def repeat_interleave(input: Tensor, repeats: Any, dim: int | None = None, *,
                      output_size: int | None = None) -> Tensor:
    """Each element (each slice along `dim`) repeated `repeats` times in place; repeats may be a tensor of counts."""
    if dim is None:
        return repeat_interleave(reshape(input, (-1,)), repeats, 0)
    d = normalize_dim(dim, input.ndim)
    if isinstance(repeats, (int, np.integer)) or (isinstance(repeats, Tensor) and repeats.ndim == 0
                                                  and isinstance(repeats._data, np.ndarray)):
        r = int(repeats)
        shape = tuple(input.shape)
        spread = apply("broadcast_to", unsqueeze(input, d + 1), shape=shape[:d + 1] + (r,) + shape[d + 1:])
        return apply("reshape", spread, shape=shape[:d] + (shape[d] * r,) + shape[d + 1:])
    counts = np.asarray(repeats)  # a traced counts tensor raises the TraceError: the result's size is data
    return index_select(input, d, Tensor._wrap(np.repeat(np.arange(input.shape[d]), counts)))


def movedim(input: Tensor, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
    """Dims `source` moved to positions `destination`, the others keeping their order."""
    src, dst = normalize_dims(source, input.ndim), normalize_dims(destination, input.ndim)
    if len(src) != len(dst):
        raise ValueError(f"movedim: source {source} and destination {destination} must have the same length")
    rest = iter(d for d in range(input.ndim) if d not in src)
    placed = dict(zip(dst, src))
    return permute(input, [placed[i] if i in placed else next(rest) for i in range(input.ndim)])


def unflatten(input: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    """Dim `dim` split into `sizes` (one may be -1)."""
    d = normalize_dim(dim, input.ndim)
    inner = infer_shape(sizes, input.shape[d], (input.shape[d],))
    return apply("reshape", input, shape=tuple(input.shape[:d]) + inner + tuple(input.shape[d + 1:]))


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The elements (i, i + offset) of the (dim1, dim2) planes, as a new last dim (torch.diagonal): the two dims
    moved last and merged, then a strided slice of step m + 1 (so it traces, differentiates and compiles as those)."""
    d1, d2 = normalize_dim(dim1, input.ndim), normalize_dim(dim2, input.ndim)
    if d1 == d2:
        raise ShapeError(f"diagonal: dim1 and dim2 must differ, both are {d1}")
    rest = [d for d in range(input.ndim) if d not in (d1, d2)]
    n, m = input.shape[d1], input.shape[d2]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    start = offset if offset >= 0 else -offset * m
    start, stop = (start, start + (length - 1) * (m + 1) + 1) if length else (0, 0)
    flat = reshape(permute(input, rest + [d1, d2]), [input.shape[d] for d in rest] + [n * m])
    lead = [0] * len(rest)
    return apply("slice", flat, starts=tuple(lead + [start]), stops=tuple(flat.shape[:-1]) + (stop,),
                 steps=tuple([1] * len(rest) + [m + 1]))


def _triangle(name: str, input: Tensor, diagonal: int, lower: bool) -> Tensor:
    if input.ndim < 2:
        raise ShapeError(f"{name}: expects a tensor of rank >= 2, got shape {input.shape}")
    rows, cols = input.shape[-2:]
    keep = np.tri(rows, cols, diagonal, dtype=np.bool_) if lower else ~np.tri(rows, cols, diagonal - 1, dtype=np.bool_)
    zero = Tensor._wrap(np.zeros((), input._data.dtype))
    return apply("where", Tensor._wrap(keep), input, zero)


def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims (on and below `diagonal`), zeros above."""
    return _triangle("tril", input, diagonal, lower=True)


def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims (on and above `diagonal`), zeros below."""
    return _triangle("triu", input, diagonal, lower=False)


def gather(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """Values of `input` at `index` along `dim` (torch.gather: index has the result's shape)."""
    return apply("gather", input, index, axis=dim)


def index_select(input: Tensor, dim: int, index: Any) -> Tensor:
    """The entries of `input` at `index` along `dim` (numpy.take on that dim)."""
    return apply("index_select", input, as_tensor(index), axis=dim)


__all__ = ["clone", "reshape", "permute", "transpose", "swapaxes", "t", "flatten", "squeeze", "unsqueeze",
           "broadcast_to", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "row_stack", "narrow",
           "split", "chunk", "unbind", "gather", "index_select", "flip", "roll", "repeat_interleave", "movedim",
           "moveaxis", "unflatten", "tril", "triu", "diagonal"]

moveaxis = movedim
