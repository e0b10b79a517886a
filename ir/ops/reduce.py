"""Reductions: sum, mean, max, min over several axes, argmax/argmin, and the stable softmax family.

Reductions take `axes` (None reduces every axis) and `keepdim`; the reduced shape follows numpy's
`keepdims` rule. Gradients broadcast the cotangent back over the reduced axes (expand_reduced).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..attrs import AttrSpec
from ..errors import DTypeError, ShapeError
from ..registry import defop
from ..types import TensorType, bool_, int64
from ._common import expand_reduced, normalize_axes, normalize_axis, reduced_shape, require_float

_REDUCE_ATTRS = (AttrSpec("axes", "ints", None, optional=True), AttrSpec("keepdim", "bool", False))
_ARG_ATTRS = (AttrSpec("axis", "int", None, optional=True), AttrSpec("keepdim", "bool", False))


def _axes(name: str, axes: tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    """Normalized reduction axes; a scalar has none to reduce (axis 0 or -1 of a scalar is itself)."""
    norm = normalize_axes(name, axes, rank)
    return norm if rank else ()


def _axes_rule(name: str):
    """The reduces trait of the `axes` reductions."""
    return lambda shape, attrs: _axes(name, attrs["axes"], len(shape))


def _axis_rule(name: str):
    """The reduces trait of the single-`axis` reductions (argmax, argmin: every axis when None)."""
    def rule(shape: tuple[int, ...], attrs: dict[str, Any]) -> tuple[int, ...]:
        axis = attrs["axis"]
        return tuple(range(len(shape))) if axis is None else (normalize_axis(name, axis, len(shape)),)
    return rule


def _reduce_infer(name: str, *, floats_only: bool = False, needs_elements: bool = False):
    def infer(x: TensorType, *, axes: tuple[int, ...] | None, keepdim: bool) -> TensorType:
        if floats_only:
            require_float(name, x)
        if x.dtype == bool_ and name != "sum":
            raise DTypeError(f"{name}: expects a numeric operand, got {x}")
        norm = _axes(name, axes, x.rank)
        if needs_elements and any(x.shape[a] == 0 for a in norm):
            raise ShapeError(f"{name}: cannot reduce an empty axis of shape {x} (axes {list(norm)}); "
                             f"the result has no identity")
        dtype = int64 if x.dtype == bool_ else x.dtype  # counting booleans, as torch
        return TensorType(reduced_shape(x.shape, norm, keepdim), dtype)
    return infer


def _reduce_impl(name: str, fn: Any, *, cast_bool: bool = False):
    def impl(x: np.ndarray, *, axes: tuple[int, ...] | None, keepdim: bool) -> np.ndarray:
        norm = _axes(name, axes, x.ndim)
        dtype = np.int64 if (cast_bool and x.dtype == np.bool_) else x.dtype
        return np.asarray(fn(x, axis=norm, keepdims=keepdim)).astype(dtype, copy=False)
    return impl


def _mean_impl(x: np.ndarray, *, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """Sum divided by count: an empty reduction gives nan quietly instead of numpy's warning."""
    count = int(np.prod([x.shape[a] for a in axis], dtype=np.int64))
    return np.sum(x, axis=axis, keepdims=keepdims) / x.dtype.type(count)


def _sum_vjp(e, g, out, x, *, axes, keepdim):
    return (expand_reduced(e, g, x.shape, _axes("sum", axes, len(x.shape)), keepdim),)


def _mean_vjp(e, g, out, x, *, axes, keepdim):
    norm = _axes("mean", axes, len(x.shape))
    count = int(np.prod([x.shape[a] for a in norm], dtype=np.int64))
    return (expand_reduced(e, e.div(g, float(count)), x.shape, norm, keepdim),)


def _extremum_vjp(name: str):
    def vjp(e, g, out, x, *, axes, keepdim):
        """The gradient goes to every element equal to the extremum, split evenly among ties (torch amax)."""
        if not x.dtype.is_float:
            return (None,)
        norm = _axes(name, axes, len(x.shape))
        hit = e.cast(e.eq(x, expand_reduced(e, out, x.shape, norm, keepdim)), dtype=x.dtype)
        share = e.div(g if keepdim else e.reshape(g, shape=reduced_shape(x.shape, norm, True)),
                      e.sum(hit, axes=norm, keepdim=True))
        return (e.mul(e.broadcast_to(share, shape=tuple(x.shape)), hit),)
    return vjp


sum = defop("sum", ("x",), vjp_reads=(), infer=_reduce_infer("sum"),
            impl=_reduce_impl("sum", np.sum, cast_bool=True), vjp=_sum_vjp,
            attrs=_REDUCE_ATTRS, category="reduction", reduces=_axes_rule("sum"),
            doc="Sum over `axes` (all when None).")
mean = defop("mean", ("x",), vjp_reads=(), infer=_reduce_infer("mean", floats_only=True),
             impl=_reduce_impl("mean", _mean_impl),
             vjp=_mean_vjp, attrs=_REDUCE_ATTRS, category="reduction", reduces=_axes_rule("mean"),
             doc="Arithmetic mean over `axes`.")
max = defop("max", ("x",), infer=_reduce_infer("max", needs_elements=True), impl=_reduce_impl("max", np.max),
            vjp=_extremum_vjp("max"), attrs=_REDUCE_ATTRS, category="reduction", reduces=_axes_rule("max"),
            doc="Largest element over `axes`; the gradient is shared evenly among ties.")
min = defop("min", ("x",), infer=_reduce_infer("min", needs_elements=True), impl=_reduce_impl("min", np.min),
            vjp=_extremum_vjp("min"), attrs=_REDUCE_ATTRS, category="reduction", reduces=_axes_rule("min"),
            doc="Smallest element over `axes`; the gradient is shared evenly among ties.")


# --- argmax / argmin --------------------------------------------------------------------------------------


def _arg_infer(name: str):
    def infer(x: TensorType, *, axis: int | None, keepdim: bool) -> TensorType:
        if x.dtype == bool_:
            raise DTypeError(f"{name}: expects a numeric operand, got {x}")
        if axis is None:
            if x.size == 0:
                raise ShapeError(f"{name}: operand of shape {x} has no elements")
            return TensorType((1,) * x.rank if keepdim else (), int64)
        ax = normalize_axis(name, axis, x.rank)
        if x.rank and x.shape[ax] == 0:
            raise ShapeError(f"{name}: cannot reduce the empty axis {axis} of shape {x}")
        return TensorType(reduced_shape(x.shape, (ax,) if x.rank else (), keepdim), int64)
    return infer


def _arg_impl(fn: Any):
    def impl(x: np.ndarray, *, axis: int | None, keepdim: bool) -> np.ndarray:
        if axis is None or x.ndim == 0:
            flat = np.asarray(fn(x.reshape(-1)), dtype=np.int64)
            return flat.reshape((1,) * x.ndim) if keepdim else flat
        return np.asarray(fn(x, axis=axis, keepdims=keepdim), dtype=np.int64)
    return impl


argmax = defop("argmax", ("x",), infer=_arg_infer("argmax"), impl=_arg_impl(np.argmax), attrs=_ARG_ATTRS,
               category="reduction", reduces=_axis_rule("argmax"),
               doc="Index of the first largest element along `axis` (flattened when None).")
argmin = defop("argmin", ("x",), infer=_arg_infer("argmin"), impl=_arg_impl(np.argmin), attrs=_ARG_ATTRS,
               category="reduction", reduces=_axis_rule("argmin"),
               doc="Index of the first smallest element along `axis` (flattened when None).")


# --- softmax family ---------------------------------------------------------------------------------------


def _softmax_axes(name: str, rank: int, axis: int) -> tuple[int, ...]:
    """The normalized softmax axis as a reduction tuple; a scalar normalizes over no axis."""
    ax = normalize_axis(name, axis, rank)
    return (ax,) if rank else ()


def _softmax_rule(name: str):
    return lambda shape, attrs: _softmax_axes(name, len(shape), attrs["axis"])


def _softmax_infer(name: str):
    def infer(x: TensorType, *, axis: int) -> TensorType:
        require_float(name, x)
        _softmax_axes(name, x.rank, axis)
        return x
    return infer


def _shifted(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """x minus its maximum along `axes`, so exp never overflows; empty tensors pass through."""
    if x.size == 0:
        return x
    return x - np.max(x, axis=axes, keepdims=True)


def _softmax_impl(x: np.ndarray, *, axis: int) -> np.ndarray:
    axes = _softmax_axes("softmax", x.ndim, axis)
    z = np.exp(_shifted(x, axes))
    return (z / np.sum(z, axis=axes, keepdims=True)).astype(x.dtype, copy=False)


def _log_softmax_impl(x: np.ndarray, *, axis: int) -> np.ndarray:
    axes = _softmax_axes("log_softmax", x.ndim, axis)
    z = _shifted(x, axes)
    return (z - np.log(np.sum(np.exp(z), axis=axes, keepdims=True))).astype(x.dtype, copy=False)


def _softmax_vjp(e, g, out, x, *, axis):
    axes = _softmax_axes("softmax", len(x.shape), axis)
    dot = e.sum(e.mul(g, out), axes=axes, keepdim=True)
    return (e.mul(out, e.sub(g, dot)),)


def _log_softmax_vjp(e, g, out, x, *, axis):
    axes = _softmax_axes("log_softmax", len(x.shape), axis)
    return (e.sub(g, e.mul(e.exp(out), e.sum(g, axes=axes, keepdim=True))),)


softmax = defop("softmax", ("x",), infer=_softmax_infer("softmax"), impl=_softmax_impl, vjp=_softmax_vjp,
                attrs=(AttrSpec("axis", "int", -1),), category="reduction", reduces=_softmax_rule("softmax"),
                doc="exp(x) normalized to sum 1 along `axis`, computed with the maximum subtracted.")
log_softmax = defop("log_softmax", ("x",), infer=_softmax_infer("log_softmax"), impl=_log_softmax_impl,
                    vjp=_log_softmax_vjp, attrs=(AttrSpec("axis", "int", -1),), category="reduction",
                    reduces=_softmax_rule("log_softmax"),
                    doc="log(softmax(x)) along `axis`, computed stably as (x - max) - log(sum(exp(x - max))).")
