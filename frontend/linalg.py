"""Matrix and vector products with torch's names: mm, mv, dot, vdot, inner, bmm, multi_dot and chain_matmul, the
scaled sums addmm, addmv, addr, addbmm and baddbmm, outer, kron, cross, einsum (einsum.py) and the pairwise
distances cdist, each written with matmul, mul, sum and movement ops (so they trace and compile as those do).

As in torch, mm, mv, dot, vdot, inner, cross, multi_dot, addmv and addbmm take operands of one dtype; outer, addr
and kron promote.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import numpy as np

from braze.ir.errors import DTypeError, ShapeError

from .einsum import einsum
from .dispatch import apply
from .functions import abs, add, clamp, matmul, mul, sqrt, sub, sum
from .movement import broadcast_to, cat, index_select, normalize_dim, permute, reshape, transpose, unsqueeze
from .promotion import SCALARS, as_tensor
from .reductions import _zero_safe, vector_norm
from .tensor import Tensor


def _one_dtype(name: str, *operands: Any) -> list[Tensor]:
    """The operands as tensors, refused unless they share a dtype (torch does not promote these products)."""
    tensors = [as_tensor(o) for o in operands]
    if any(t.dtype != tensors[0].dtype for t in tensors):
        raise DTypeError(f"{name}: expects operands of one dtype, got {', '.join(str(t.dtype) for t in tensors)}")
    return tensors


def _shapes(*tensors: Tensor) -> str:
    return " and ".join(str(tuple(t.shape)) for t in tensors)


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    """The product of two matrices, (n, m) @ (m, p)."""
    a, b = _one_dtype("mm", input, mat2)
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"mm: expects two matrices, got shapes {_shapes(a, b)}")
    if a.shape[1] != b.shape[0]:
        raise ShapeError(f"mm: shapes {_shapes(a, b)} cannot be multiplied ({a.shape[1]} != {b.shape[0]})")
    return matmul(a, b)


def mv(input: Tensor, vec: Tensor) -> Tensor:
    """The product of a matrix and a vector, (n, m) @ (m,)."""
    a, v = _one_dtype("mv", input, vec)
    if a.ndim != 2 or v.ndim != 1:
        raise ShapeError(f"mv: expects a matrix and a vector, got shapes {_shapes(a, v)}")
    if a.shape[1] != v.shape[0]:
        raise ShapeError(f"mv: shapes {_shapes(a, v)} cannot be multiplied ({a.shape[1]} != {v.shape[0]})")
    return matmul(a, v)


def _dot(name: str, input: Tensor, other: Tensor) -> Tensor:
    a, b = _one_dtype(name, input, other)
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"{name}: expects two vectors, got shapes {_shapes(a, b)}")
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"{name}: expects vectors of one length, got shapes {_shapes(a, b)}")
    return matmul(a, b)


def dot(input: Tensor, tensor: Tensor) -> Tensor:
    """The inner product of two vectors of one length, as a 0-d tensor (torch names the second vector `tensor`)."""
    return _dot("dot", input, tensor)


def vdot(input: Tensor, other: Tensor) -> Tensor:
    """dot with the first vector conjugated: dot itself, braze's tensors being real."""
    return _dot("vdot", input, other)


def inner(input: Tensor, other: Tensor) -> Tensor:
    """Sums of products over the last dims: shape input.shape[:-1] + other.shape[:-1] (a product when one is 0-d)."""
    a, b = _one_dtype("inner", input, other)
    if not a.ndim or not b.ndim:
        return mul(a, b)
    k = a.shape[-1]
    if b.shape[-1] != k:
        raise ShapeError(f"inner: the last dims must match, got shapes {_shapes(a, b)}")
    rows = reshape(a, (math.prod(a.shape[:-1]), k))
    cols = transpose(reshape(b, (math.prod(b.shape[:-1]), k)), 0, 1)
    return reshape(matmul(rows, cols), tuple(a.shape[:-1]) + tuple(b.shape[:-1]))


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    """Batched matrix product of (b, n, m) and (b, m, p) tensors."""
    if input.ndim != 3 or mat2.ndim != 3:
        raise ShapeError(f"bmm: expects two rank-3 tensors, got shapes {input.shape} and {mat2.shape}")
    return matmul(input, mat2)


def multi_dot(tensors: Sequence[Tensor]) -> Tensor:
    """The product of a chain of matrices (the first and last may be vectors) in the order of fewest multiplications,
    chosen as torch.linalg.multi_dot chooses it (so results round alike)."""
    ts = _one_dtype("multi_dot", *tensors)
    if len(ts) < 2:
        raise ShapeError(f"multi_dot: expects at least 2 tensors, got {len(ts)}")
    row, column = ts[0].ndim == 1, ts[-1].ndim == 1
    for k, t in enumerate(ts):
        if t.ndim != 2 and not (t.ndim == 1 and k in (0, len(ts) - 1)):
            raise ShapeError(f"multi_dot: tensor {k} has shape {tuple(t.shape)}; the first and last must be 1-D or "
                             f"2-D and the others 2-D")
    ts[0] = reshape(ts[0], (1, -1)) if row else ts[0]
    ts[-1] = reshape(ts[-1], (-1, 1)) if column else ts[-1]
    for k in range(len(ts) - 1):
        if ts[k].shape[1] != ts[k + 1].shape[0]:
            raise ShapeError(f"multi_dot: tensors {k} and {k + 1} of shapes {_shapes(ts[k], ts[k + 1])} cannot be "
                             f"multiplied")
    out = _chain(ts)
    return reshape(out, tuple(out.shape)[int(row):out.ndim - int(column)])


def _chain(ts: list[Tensor]) -> Tensor:
    """The chain's product in torch's order: for three, (AB)C unless A(BC) costs less; for more, the first cheapest
    split of the classic dynamic program."""
    if len(ts) == 2:
        return matmul(ts[0], ts[1])
    sizes = [ts[0].shape[0]] + [t.shape[1] for t in ts]
    if len(ts) == 3:
        a, b, c, d = sizes
        if a * c * (b + d) > b * d * (a + c):
            return matmul(ts[0], matmul(ts[1], ts[2]))
        return matmul(matmul(ts[0], ts[1]), ts[2])
    n = len(ts)
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = -1
            for k in range(i, j):
                q = cost[i][k] + cost[k + 1][j] + sizes[i] * sizes[k + 1] * sizes[j + 1]
                if cost[i][j] < 0 or q < cost[i][j]:
                    cost[i][j], split[i][j] = q, k

    def product(i: int, j: int) -> Tensor:
        return ts[i] if i == j else matmul(product(i, split[i][j]), product(split[i][j] + 1, j))
    return product(0, n - 1)


def chain_matmul(*matrices: Tensor) -> Tensor:
    """The product of a chain of matrices (torch's older form of multi_dot, matrices only)."""
    for k, m in enumerate(matrices):
        if as_tensor(m).ndim != 2:
            raise ShapeError(f"chain_matmul: expects matrices, tensor {k} has shape {tuple(as_tensor(m).shape)}")
    if len(matrices) == 1:
        return as_tensor(matrices[0]).clone()
    return multi_dot(matrices)


def addmm(input: Any, mat1: Tensor, mat2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * input + alpha * (mat1 @ mat2) for matrices."""
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise ShapeError(f"addmm: expects two matrices, got shapes {mat1.shape} and {mat2.shape}")
    return _scaled_sum("addmm", input, matmul(mat1, mat2), beta, alpha)


def addmv(input: Tensor, mat: Tensor, vec: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * input + alpha * (mat @ vec)."""
    _one_dtype("addmv", input, mat, vec)
    return _scaled_sum("addmv", input, mv(mat, vec), beta, alpha)


def addr(input: Tensor, vec1: Tensor, vec2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * input + alpha * outer(vec1, vec2)."""
    return _scaled_sum("addr", input, outer(vec1, vec2), beta, alpha)


def addbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * input + alpha * the sum over the batch of batch1[i] @ batch2[i]: one (n, b*m) @ (b*m, p) product."""
    _one_dtype("addbmm", input, batch1, batch2)
    if batch1.ndim != 3 or batch2.ndim != 3:
        raise ShapeError(f"addbmm: expects two rank-3 tensors, got shapes {_shapes(batch1, batch2)}")
    (b, n, m), (b2, m2, p) = batch1.shape, batch2.shape
    if b != b2 or m != m2:
        raise ShapeError(f"addbmm: batches of shapes {_shapes(batch1, batch2)} cannot be multiplied")
    product = matmul(reshape(permute(batch1, (1, 0, 2)), (n, b * m)), reshape(batch2, (b * m, p)))
    return _scaled_sum("addbmm", input, product, beta, alpha)


def baddbmm(input: Any, batch1: Tensor, batch2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * input + alpha * bmm(batch1, batch2)."""
    return _scaled_sum("baddbmm", input, bmm(batch1, batch2), beta, alpha)


def _scaled_sum(name: str, input: Any, product: Tensor, beta: float, alpha: float) -> Tensor:
    shape = () if isinstance(input, SCALARS) else tuple(as_tensor(input).shape)
    try:
        fits = np.broadcast_shapes(shape, tuple(product.shape)) == tuple(product.shape)
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(f"{name}: input of shape {shape} does not broadcast to the product's shape "
                         f"{tuple(product.shape)}")
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


def kron(input: Tensor, other: Tensor) -> Tensor:
    """The Kronecker product: every element of input times the whole of other, as blocks (ranks aligned by leading
    1s); one broadcast product, so each element is a single exact multiplication."""
    a, b = as_tensor(input), as_tensor(other)
    rank = max(a.ndim, b.ndim)
    sa, sb = (1,) * (rank - a.ndim) + tuple(a.shape), (1,) * (rank - b.ndim) + tuple(b.shape)
    spread_a = reshape(a, tuple(d for n in sa for d in (n, 1)))
    spread_b = reshape(b, tuple(d for n in sb for d in (1, n)))
    return reshape(mul(spread_a, spread_b), tuple(m * n for m, n in zip(sa, sb)))


def cross(input: Tensor, other: Tensor, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along `dim` (when None, torch's deprecated default: the first dim of size 3),
    other dims broadcast; a1*b2 - a2*b1 and its rotations, as torch computes them."""
    a, b = _one_dtype("cross", input, other)
    if dim is None:
        warnings.warn("cross: calling it without dim is deprecated in torch (it takes the first dim of size 3); "
                      "pass dim, or use braze.linalg.cross", UserWarning, stacklevel=2)
        dim = next((d for d, n in enumerate(a.shape) if n == 3), None)
        if dim is None:
            raise ShapeError(f"cross: no dim of size 3 in shape {tuple(a.shape)}")
    if a.ndim != b.ndim:
        raise ShapeError(f"cross: expects tensors of one rank, got shapes {_shapes(a, b)}")
    d = normalize_dim(dim, a.ndim)
    if not a.ndim or a.shape[d] != 3 or b.shape[d] != 3:
        raise ShapeError(f"cross: dim {dim} must have size 3 in both, got shapes {_shapes(a, b)}")
    try:
        np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    except ValueError:
        raise ShapeError(f"cross: shapes {_shapes(a, b)} do not broadcast") from None
    nxt, last = [1, 2, 0], [2, 0, 1]
    return sub(mul(index_select(a, d, nxt), index_select(b, d, last)),
               mul(index_select(a, d, last), index_select(b, d, nxt)))


_CDIST_MODES = {None: 0, "use_mm_for_euclid_dist_if_necessary": 0, "use_mm_for_euclid_dist": 1,
                "donot_use_mm_for_euclid_dist": 2}
_CDIST_MM_ROWS = 25  # the default mode takes the product form when either operand has more rows, as torch's


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str | None = "use_mm_for_euclid_dist_if_necessary"
          ) -> Tensor:
    """The p-norm distances between the rows of x1 (..., P, M) and of x2 (..., R, M), batch dims broadcast: shape
    (..., P, R). For p = 2 torch's choice of form: sqrt(max(|a|^2 + |b|^2 - 2 a.b, 0)) from one product of extended
    rows (fast; cancels for close rows) when compute_mode asks for it or, by default, when P or R exceeds 25, else
    the norm of the differences; gradients as torch's (0 at zero distance, every tied coordinate for p = inf)."""
    a, b = _one_dtype("cdist", x1, x2)
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(f"cdist: expects tensors of at least 2 dims, got shapes {_shapes(a, b)}")
    if a.shape[-1] != b.shape[-1]:
        raise ShapeError(f"cdist: x1 and x2 must have the same number of columns, got shapes {_shapes(a, b)}")
    if not a.dtype.is_float:
        raise DTypeError(f"cdist: expects floating-point tensors, got {a.dtype}")
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"cdist: {compute_mode!r} is not a valid value for compute_mode; use one of "
                         f"{', '.join(repr(m) for m in _CDIST_MODES if m)}")
    p = float(p)
    if not p >= 0:
        raise ValueError(f"cdist: p must be non-negative, got {p}")
    try:
        batch = tuple(np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])))
    except ValueError:
        raise ShapeError(f"cdist: the batch dims of shapes {_shapes(a, b)} do not broadcast") from None
    (rows, m), cols = a.shape[-2:], b.shape[-2]
    a, b = broadcast_to(a, batch + (rows, m)), broadcast_to(b, batch + (cols, m))
    if not m:
        return apply("broadcast_to", Tensor._wrap(np.zeros((), a.dtype.numpy)), shape=batch + (rows, cols))
    mode = _CDIST_MODES[compute_mode]
    if p == 2 and (mode == 1 or (mode == 0 and max(rows, cols) > _CDIST_MM_ROWS)):
        return _euclidean_by_product(a, b)
    diff = sub(unsqueeze(a, -2), unsqueeze(b, -3))
    if p == math.inf:
        size = abs(diff)
        top = apply("max", size.detach(), axes=(diff.ndim - 1,), keepdim=True)
        tied = apply("cast", apply("eq", size.detach(), top), dtype=a.dtype)
        return add(reshape(top, tuple(top.shape[:-1])), sum(mul(sub(size, size.detach()), tied), -1))
    return vector_norm(diff, p, -1)


def _euclidean_by_product(a: Tensor, b: Tensor) -> Tensor:
    """cdist's product form, torch's: [-2a, |a|^2, 1] . [b, 1, |b|^2] in one matmul, clamped at 0, square-rooted with
    a zero gradient at 0."""
    ones_a, ones_b = (apply("broadcast_to", Tensor._wrap(np.ones((), t.dtype.numpy)), shape=tuple(t.shape[:-1]) + (1,))
                      for t in (a, b))
    rows = cat([mul(a, -2.0), sum(mul(a, a), -1, keepdim=True), ones_a], -1)
    cols = cat([b, ones_b, sum(mul(b, b), -1, keepdim=True)], -1)
    return _zero_safe(sqrt, clamp(matmul(rows, transpose(cols, -2, -1)), min=0.0))


__all__ = ["mm", "mv", "dot", "vdot", "inner", "bmm", "chain_matmul", "addmm", "addmv", "addr", "addbmm", "baddbmm",
           "outer", "ger", "kron", "cross", "einsum", "cdist"]
TENSOR_METHODS: tuple[str, ...] = ("mm", "mv", "dot", "vdot", "kron", "cross", "addmv", "addr", "addbmm")
