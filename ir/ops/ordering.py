"""Ops along one axis in order: sort (values and the permutation that sorts them) and cumsum (running sums).

sort is stable in both directions, and NaN sorts as the largest value, as torch.sort(stable=True); its gradient
sends each value's cotangent back to the position it came from. cumsum adds in index order, so its float results
round exactly like numpy.cumsum's.
"""
from __future__ import annotations

import numpy as np

from ..attrs import AttrSpec
from ..registry import defop
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
             attrs=(AttrSpec("axis", "int"), AttrSpec("descending", "bool", False)),
             doc="(values sorted along `axis`, their int64 positions in x); stable, NaN largest.")


def _cumsum_infer(x: TensorType, *, axis: int) -> TensorType:
    require_dtype_kind("cumsum", x, ("float", "int"), "the operand")
    normalize_axis("cumsum", axis, x.rank)
    return x


def _cumsum_impl(x: np.ndarray, *, axis: int) -> np.ndarray:
    return np.cumsum(x, axis=axis % max(x.ndim, 1)).reshape(x.shape).astype(x.dtype, copy=False)


def _cumsum_vjp(e, g, out, x, *, axis):
    """Each input reaches every later running sum: the reversed running sum of g, total - cumsum(g) + g."""
    if not x.shape:
        return (g,)
    total = e.sum(g, axes=(axis % len(x.shape),), keepdim=True)
    return (e.add(e.sub(total, e.cumsum(g, axis=axis)), g),)


cumsum = defop("cumsum", ("x",), infer=_cumsum_infer, impl=_cumsum_impl, vjp=_cumsum_vjp,
               attrs=(AttrSpec("axis", "int"),), doc="Running sums along `axis`, added in index order.")
