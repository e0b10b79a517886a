"""Matrix products with torch's names: bmm, addmm, baddbmm, outer and einsum (einsum.py), each written with
matmul, mul, sum and movement ops (so they trace and compile as those do).
"""
from __future__ import annotations

from typing import Any

from braze.ir.errors import ShapeError

from .einsum import einsum
from .functions import add, matmul, mul
from .movement import reshape
from .promotion import as_tensor
from .tensor import Tensor


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    """Batched matrix product of (b, n, m) and (b, m, p) tensors."""
    if input.ndim != 3 or mat2.ndim != 3:
        raise ShapeError(f"bmm: expects two rank-3 tensors, got shapes {input.shape} and {mat2.shape}")
    return matmul(input, mat2)


def addmm(input: Any, mat1: Tensor, mat2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * input + alpha * (mat1 @ mat2) for matrices."""
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise ShapeError(f"addmm: expects two matrices, got shapes {mat1.shape} and {mat2.shape}")
    return _scaled_sum(input, matmul(mat1, mat2), beta, alpha)


def baddbmm(input: Any, batch1: Tensor, batch2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * input + alpha * bmm(batch1, batch2)."""
    return _scaled_sum(input, bmm(batch1, batch2), beta, alpha)


def _scaled_sum(input: Any, product: Tensor, beta: float, alpha: float) -> Tensor:
    scaled = product if alpha == 1 else mul(product, alpha)
    if beta == 0:  # torch ignores input then, NaN and inf included
        return scaled
    return add(input if beta == 1 else mul(as_tensor(input), beta), scaled)


def outer(input: Tensor, vec2: Tensor) -> Tensor:
    """The outer product of two vectors."""
    if input.ndim != 1 or vec2.ndim != 1:
        raise ShapeError(f"outer: expects two vectors, got shapes {input.shape} and {vec2.shape}")
    return mul(reshape(input, (-1, 1)), reshape(vec2, (1, -1)))


ger = outer


__all__ = ["bmm", "addmm", "baddbmm", "outer", "ger", "einsum"]
