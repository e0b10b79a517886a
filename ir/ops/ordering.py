"""Ops along one axis in order: sort (values and the permutation that sorts them), topk (the first k of that
order), cumsum and cumprod (running sums and products).

sort is stable in both directions, and NaN sorts as the largest value, as torch.sort(stable=True); its gradient
sends each value's cotangent back to the position it came from. topk(x, k, largest) is exactly the first k values
and positions of sort(x, descending=largest), ties by the lower position as torch.topk and ONNX TopK break them; an
op of its own so that a kernel finds k of n values without sorting all n. cumsum adds in index order, so its float
results round exactly like numpy.cumsum's; cumprod multiplies in index order likewise. cumprod's gradient is exact at
zeros too (it never divides by x): for each position i it takes the running products with x_i replaced by 1, an
n x n intermediate per line of n elements.
"""
from __future__ import annotations

import numpy as np

from ..attrs import AttrSpec
from ..errors import ShapeError
from ..registry import defop
from ..row_rules import keeps_axis
from ..types import TensorType, int64
from ._common import normalize_axis, require_dtype_kind


def _sort_infer(x: TensorType, *, axis: int, descending: bool) -> tuple[TensorType, TensorType]:
    require_dtype_kind("sort", x, ("float", "int", "uint", "bool"), "the operand")
    normalize_axis("sort", axis, x.rank)
    return x, x.with_dtype(int64)


def _sort_impl(x: np.ndarray, *, axis: int, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    ax = axis % x.ndim
    if descending:  # a stable ascending sort of the reversed axis, reversed: ties keep their order, NaN leads
        n = x.shape[ax]
        order = (n - 1) - np.flip(np.argsort(np.flip(x, ax), axis=ax, kind="stable"), ax)
    else:
        order = np.argsort(x, axis=ax, kind="stable")
    return np.take_along_axis(x, order, ax), order.astype(np.int64)


def _sort_vjp(e, g, out, x, *, axis, descending):
    g_values = g[0]
    if g_values is None or not x.shape:
        return (g_values,)
    return (e.scatter_add(g_values, out[1], axis=axis, shape=tuple(x.shape)),)


sort = defop("sort", ("x",), infer=_sort_infer, impl=_sort_impl, vjp=_sort_vjp, num_results=2,
             attrs=(AttrSpec("axis", "int"), AttrSpec("descending", "bool", False)), rows=keeps_axis("axis"),
             doc="(values sorted along `axis`, their int64 positions in x); stable, NaN largest.")


def _topk_infer(x: TensorType, *, axis: int, k: int, largest: bool) -> tuple[TensorType, TensorType]:
    require_dtype_kind("topk", x, ("float", "int", "uint", "bool"), "the operand")
    if x.rank == 0:
        raise ShapeError(f"topk: the operand must have an axis, got {x}")
    ax = normalize_axis("topk", axis, x.rank)
    if not 0 <= k <= x.shape[ax]:
        raise ShapeError(f"topk: k={k} is out of range for axis {axis} of size {x.shape[ax]}")
    shape = x.shape[:ax] + (k,) + x.shape[ax + 1:]
    return x.with_shape(shape), x.with_shape(shape).with_dtype(int64)


def _topk_impl(x: np.ndarray, *, axis: int, k: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    values, order = _sort_impl(x, axis=axis, descending=largest)
    kept = [slice(None)] * x.ndim
    kept[axis % x.ndim] = slice(0, k)
    return values[tuple(kept)], order[tuple(kept)]


def _topk_vjp(e, g, out, x, *, axis, k, largest):
    """sort's: each kept value's cotangent goes back to its position, the others' positions get 0."""
    return _sort_vjp(e, g, out, x, axis=axis, descending=largest)


topk = defop("topk", ("x",), infer=_topk_infer, impl=_topk_impl, vjp=_topk_vjp, num_results=2,
             attrs=(AttrSpec("axis", "int"), AttrSpec("k", "int"), AttrSpec("largest", "bool", True)),
             rows=keeps_axis("axis"),
             doc="The first k of sort(x, axis, descending=largest): (values, their int64 positions in x).")


def _scan_infer(name: str):
    def infer(x: TensorType, *, axis: int) -> TensorType:
        require_dtype_kind(name, x, ("float", "int"), "the operand")
        normalize_axis(name, axis, x.rank)
        return x
    return infer


def _scan_impl(fn):
    def impl(x: np.ndarray, *, axis: int) -> np.ndarray:
        return fn(x, axis=axis % max(x.ndim, 1)).reshape(x.shape).astype(x.dtype, copy=False)
    return impl


def _cumsum_vjp(e, g, out, x, *, axis):
    """Each input reaches every later running sum: the reversed running sum of g, total - cumsum(g) + g."""
    if not x.shape:
        return (g,)
    total = e.sum(g, axes=(axis % len(x.shape),), keepdim=True)
    return (e.add(e.sub(total, e.cumsum(g, axis=axis)), g),)


cumsum = defop("cumsum", ("x",), infer=_scan_infer("cumsum"), impl=_scan_impl(np.cumsum), vjp=_cumsum_vjp,
               attrs=(AttrSpec("axis", "int"),), rows=keeps_axis("axis"),
               doc="Running sums along `axis`, added in index order.")


def _cumprod_vjp(e, g, out, x, *, axis):
    """dx_i = sum_{j >= i} g_j prod_{k <= j, k != i} x_k, from the running products of x with x_i set to 1."""
    if not x.shape:
        return (g,)
    rank, ax = len(x.shape), axis % len(x.shape)
    n = x.shape[ax]
    perm = tuple(d for d in range(rank) if d != ax) + (ax,)
    back = tuple(int(p) for p in np.argsort(perm))
    lead = tuple(x.shape[d] for d in perm[:-1])
    rows = e.broadcast_to(e.reshape(e.transpose(x, perm=perm), shape=lead + (1, n)), shape=lead + (n, n))
    replaced = e.where(e.constant(np.eye(n, dtype=np.bool_)), e.scalar(1.0, x), rows)
    later = e.constant(np.triu(np.ones((n, n), np.bool_)))  # [i, j]: j >= i
    gt = e.reshape(e.transpose(g, perm=perm), shape=lead + (1, n))
    terms = e.where(later, e.mul(e.cumprod(replaced, axis=-1), gt), e.scalar(0.0, x))
    return (e.transpose(e.sum(terms, axes=(rank,), keepdim=False), perm=back),)


cumprod = defop("cumprod", ("x",), infer=_scan_infer("cumprod"), impl=_scan_impl(np.cumprod), vjp=_cumprod_vjp,
                attrs=(AttrSpec("axis", "int"),), rows=keeps_axis("axis"),
                doc="Running products along `axis`, multiplied in index order.")
