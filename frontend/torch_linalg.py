"""braze.linalg: the torch.linalg functions braze composes from registered ops: vector_norm, matrix_norm and norm
(norms defined in reductions.py), cross, vecdot, matmul, diagonal and multi_dot.

`import braze as torch` then `torch.linalg.vector_norm(x)` reads as it does with torch.
"""
from __future__ import annotations

from typing import Any, Sequence

from braze.ir.errors import DTypeError, ShapeError

from . import linalg as _products
from .functions import matmul, mul, sum
from .linalg import multi_dot
from .movement import diagonal as _diagonal
from .reductions import matrix_norm, vector_norm
from .tensor import Tensor


def norm(input: Tensor, ord: str | float | None = None, dim: int | Sequence[int] | None = None,
         keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """torch.linalg.norm: a matrix norm when ord is a string, or when ord is given with two dims (or none, for a
    matrix); else the vector norm of order ord (2 when None) over `dim` (all dims when None)."""
    dims = None if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
    if dims is not None and len(dims) not in (1, 2):
        raise ShapeError(f"linalg.norm: dim must name 1 or 2 dims, got {dim}")
    if dims is None and ord is not None and input.ndim not in (1, 2):
        raise ShapeError(f"linalg.norm: with ord and without dim the input must be 1-D or 2-D, got shape "
                         f"{tuple(input.shape)}")
    if ord is not None and (isinstance(ord, str) or (dims is None and input.ndim == 2) or len(dims or ()) == 2):
        return matrix_norm(input, ord, (0, 1) if dims is None else dims, keepdim, dtype=dtype)
    return vector_norm(input, 2 if ord is None else ord, dims, keepdim, dtype=dtype)


def cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:
    """The cross product of 3-vectors along `dim` (the last by default), other dims broadcast."""
    return _products.cross(input, other, dim)


def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    """Sums of x * y over `dim` (x and y broadcast and share a dtype): the dot products of their vectors."""
    a, b = _products._one_dtype("linalg.vecdot", x, y)
    if not a.dtype.is_float:
        raise DTypeError(f"linalg.vecdot: expects floating-point tensors, got {a.dtype}")
    return sum(mul(a, b), dim)


def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """The diagonals of the matrices in the last two dims (or dim1, dim2), as torch.diagonal."""
    return _diagonal(A, offset, dim1, dim2)


__all__ = ["vector_norm", "matrix_norm", "norm", "cross", "vecdot", "matmul", "diagonal", "multi_dot"]
