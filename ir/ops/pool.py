"""2-d pooling over the last two axes of (C,H,W) or (N,C,H,W) inputs, torch semantics, and the backward ops.

max_pool2d pads with -inf and picks the first maximum of each window (row-major in the window), which is where
its gradient goes. Its backward op max_pool2d_grad(g, x) adds g into those positions; max_pool2d_select(v, x)
reads v at them. The two are adjoint in their first operand, so each one's VJP is the other.
avg_pool2d and its backward op avg_pool2d_grad are likewise adjoint. adaptive_avg_pool2d is a product with
averaging matrices on both sides, so its VJP is two matmuls with the transposed matrices.
"""
from __future__ import annotations

import numpy as np

from ..attrs import AttrSpec
from ..errors import ShapeError
from ..registry import defop
from ..row_rules import first_rows
from ..types import TensorType
from ._common import require_float, same_dtype
from ._window import (Pair, check_output, check_padded, crop, dims, needed, pad_spatial, pair, pool_out,
                      scatter_windows, windows)


def _check_input(op: str, shape: tuple[int, ...]) -> None:
    if len(shape) not in (3, 4):
        raise ShapeError(f"{op}: expected a 3-d (C,H,W) or 4-d (N,C,H,W) input, got {dims(shape)}")


def _pool_geometry(op: str, shape, kernel_size, stride, padding, dilation, ceil_mode) -> tuple[Pair, ...]:
    """Checked (kernel, stride, padding, dilation, out) for pooling an input of `shape`."""
    _check_input(op, shape)
    kernel, stride = pair(op, "kernel_size", kernel_size, 1), pair(op, "stride", stride, 1)
    padding, dilation = pair(op, "padding", padding, 0), pair(op, "dilation", dilation, 1)
    if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:
        raise ShapeError(f"{op}: padding {list(padding)} must be at most half of kernel_size {list(kernel)}")
    out = tuple(pool_out(shape[-2 + a], kernel[a], stride[a], padding[a], dilation[a], ceil_mode) for a in range(2))
    check_output(op, shape, out, f"kernel_size {list(kernel)}, stride {list(stride)}, padding {list(padding)}, "
                                 f"dilation {list(dilation)}")
    check_padded(op, shape, padding, needed(out, kernel, stride, dilation))
    return kernel, stride, padding, dilation, out


def _pooled_type(op: str, x: TensorType, out: Pair) -> TensorType:
    require_float(op, x)
    return x.with_shape(x.shape[:-2] + out)


def _check_grad(op: str, g: TensorType, input_shape: tuple[int, ...], out: Pair) -> None:
    """Check the output gradient of a backward op: float, with the pooled shape of the input."""
    require_float(op, g)
    if g.shape != tuple(input_shape[:-2]) + out:
        raise ShapeError(f"{op}: expected a gradient of shape {dims(tuple(input_shape[:-2]) + out)} for input "
                         f"{dims(input_shape)}, got {dims(g.shape)}")


# --- max pooling ------------------------------------------------------------------------------------------

_MAX_ATTRS = (AttrSpec("kernel_size", "ints"), AttrSpec("stride", "ints"), AttrSpec("padding", "ints", (0, 0)),
              AttrSpec("dilation", "ints", (1, 1)), AttrSpec("ceil_mode", "bool", False))


def _argmax_positions(x: np.ndarray, attrs: dict) -> tuple[np.ndarray, tuple[int, int], tuple[int, ...]]:
    """Flat positions in the -inf-padded input plane of each window's first maximum.

    Returns (positions of shape (L, OH*OW) with L the product of the leading axes, padded plane (Hp, Wp),
    output shape).
    """
    kernel, stride, padding, dilation, out = _pool_geometry("max_pool2d", x.shape, **attrs)
    xp = pad_spatial(x, padding, needed(out, kernel, stride, dilation), -np.inf)
    flat = windows(xp, out, kernel, stride, dilation).reshape(*x.shape[:-2], *out, kernel[0] * kernel[1])
    i, j = np.divmod(np.argmax(flat, axis=-1), kernel[1])
    rows = np.arange(out[0])[:, None] * stride[0] + i * dilation[0]
    cols = np.arange(out[1])[None, :] * stride[1] + j * dilation[1]
    plane = xp.shape[-2:]
    return (rows * plane[1] + cols).reshape(-1, out[0] * out[1]), plane, x.shape[:-2] + out


def _take_at(v: np.ndarray, x: np.ndarray, attrs: dict) -> np.ndarray:
    """v (shaped like x) read at the window maxima of x."""
    pos, plane, shape = _argmax_positions(x, attrs)
    padding = pair("max_pool2d", "padding", attrs["padding"], 0)
    vp = np.zeros(v.shape[:-2] + plane, v.dtype)
    vp[..., padding[0]:padding[0] + v.shape[-2], padding[1]:padding[1] + v.shape[-1]] = v
    return np.take_along_axis(vp.reshape(pos.shape[0], plane[0] * plane[1]), pos, axis=1).reshape(shape)


def _max_pool2d_infer(x: TensorType, **attrs) -> TensorType:
    return _pooled_type("max_pool2d", x, _pool_geometry("max_pool2d", x.shape, **attrs)[-1])


max_pool2d = defop(
    "max_pool2d", ("x",), infer=_max_pool2d_infer, impl=lambda x, **attrs: _take_at(x, x, attrs),
    vjp=lambda e, g, out, x, **attrs: (e.max_pool2d_grad(g, x, **attrs),), attrs=_MAX_ATTRS, category="pool",
    rows=first_rows,
    doc="The maximum of each (dilated) window of the -inf-padded input, as torch.nn.functional.max_pool2d.")


def _max_grad_infer(g: TensorType, x: TensorType, **attrs) -> TensorType:
    same_dtype("max_pool2d_grad", g, x)
    _check_grad("max_pool2d_grad", g, x.shape, _pool_geometry("max_pool2d_grad", x.shape, **attrs)[-1])
    return x


def _max_grad_impl(g, x, **attrs):
    pos, plane, _ = _argmax_positions(x, attrs)
    lead = pos.shape[0]
    flat = (np.arange(lead)[:, None] * (plane[0] * plane[1]) + pos).ravel()
    summed = np.bincount(flat, weights=g.ravel(), minlength=lead * plane[0] * plane[1])
    padding = pair("max_pool2d_grad", "padding", attrs["padding"], 0)
    return crop(summed.reshape(x.shape[:-2] + plane), padding, x.shape[-2:]).astype(g.dtype)


max_pool2d_grad = defop(
    "max_pool2d_grad", ("g", "x"), infer=_max_grad_infer, impl=_max_grad_impl,
    vjp=lambda e, ct, out, g, x, **attrs: (e.max_pool2d_select(ct, x, **attrs), None), attrs=_MAX_ATTRS,
    category="pool",
    doc="The gradient of max_pool2d: each output gradient added at its window's first maximum of x.")


def _select_infer(v: TensorType, x: TensorType, **attrs) -> TensorType:
    same_dtype("max_pool2d_select", v, x)
    if v.shape != x.shape:
        raise ShapeError(f"max_pool2d_select: expected values shaped like the input {dims(x.shape)}, "
                         f"got {dims(v.shape)}")
    return _pooled_type("max_pool2d_select", x, _pool_geometry("max_pool2d_select", x.shape, **attrs)[-1])


max_pool2d_select = defop(
    "max_pool2d_select", ("v", "x"), infer=_select_infer, impl=lambda v, x, **attrs: _take_at(v, x, attrs),
    vjp=lambda e, ct, out, v, x, **attrs: (e.max_pool2d_grad(ct, x, **attrs), None), attrs=_MAX_ATTRS,
    category="pool",
    doc="v read at the first maximum of each max_pool2d window of x (the adjoint of max_pool2d_grad in g).")

# --- average pooling --------------------------------------------------------------------------------------

_AVG_ATTRS = (AttrSpec("kernel_size", "ints"), AttrSpec("stride", "ints"), AttrSpec("padding", "ints", (0, 0)),
              AttrSpec("ceil_mode", "bool", False), AttrSpec("count_include_pad", "bool", True))


def _avg_geometry(op: str, shape, kernel_size, stride, padding, ceil_mode, count_include_pad):
    return _pool_geometry(op, shape, kernel_size, stride, padding, (1, 1), ceil_mode)


def _divisor(size: int, kernel: int, stride: int, pad: int, out: int, count_include_pad: bool) -> np.ndarray:
    """Per-window element counts along one axis, torch's rule: padding counts (if asked) but the part of a
    ceil-mode window beyond the trailing padding never does."""
    start = np.arange(out) * stride - pad
    end = np.minimum(start + kernel, size + pad)
    if count_include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


def _divisors(shape, kernel, stride, padding, out, count_include_pad) -> np.ndarray:
    rows, cols = (_divisor(shape[-2 + a], kernel[a], stride[a], padding[a], out[a], count_include_pad)
                  for a in range(2))
    return rows[:, None] * cols[None, :]


def _avg_pool2d_infer(x: TensorType, **attrs) -> TensorType:
    return _pooled_type("avg_pool2d", x, _avg_geometry("avg_pool2d", x.shape, **attrs)[-1])


def _avg_pool2d_impl(x, **attrs):
    kernel, stride, padding, dilation, out = _avg_geometry("avg_pool2d", x.shape, **attrs)
    xp = pad_spatial(x, padding, needed(out, kernel, stride, dilation), 0.0)
    sums = windows(xp, out, kernel, stride, dilation).sum(axis=(-2, -1))
    div = _divisors(x.shape, kernel, stride, padding, out, attrs["count_include_pad"])
    return (sums / div).astype(x.dtype)


def _avg_pool2d_vjp(e, g, out, x, **attrs):
    return (e.avg_pool2d_grad(g, input_shape=tuple(x.shape), **attrs),)


avg_pool2d = defop(
    "avg_pool2d", ("x",), infer=_avg_pool2d_infer, impl=_avg_pool2d_impl, vjp=_avg_pool2d_vjp, attrs=_AVG_ATTRS,
    category="pool", rows=first_rows,
    doc="The mean of each window of the zero-padded input, as torch.nn.functional.avg_pool2d.")


def _avg_grad_infer(g: TensorType, *, input_shape, **attrs) -> TensorType:
    _check_grad("avg_pool2d_grad", g, input_shape, _avg_geometry("avg_pool2d_grad", input_shape, **attrs)[-1])
    return g.with_shape(input_shape)


def _avg_grad_impl(g, *, input_shape, **attrs):
    kernel, stride, padding, dilation, out = _avg_geometry("avg_pool2d_grad", input_shape, **attrs)
    share = g / _divisors(input_shape, kernel, stride, padding, out, attrs["count_include_pad"])
    extent = needed(out, kernel, stride, dilation)
    plane = (max(extent[0], input_shape[-2] + 2 * padding[0]), max(extent[1], input_shape[-1] + 2 * padding[1]))
    padded = np.zeros(tuple(input_shape[:-2]) + plane, g.dtype)
    cols = np.broadcast_to(share[..., None, None], share.shape + kernel)
    return crop(scatter_windows(cols, padded, stride, dilation), padding, input_shape[-2:]).copy()


def _avg_grad_vjp(e, ct, out, g, *, input_shape, **attrs):
    return (e.avg_pool2d(ct, **attrs),)


avg_pool2d_grad = defop(
    "avg_pool2d_grad", ("g",), infer=_avg_grad_infer, impl=_avg_grad_impl, vjp=_avg_grad_vjp,
    attrs=(AttrSpec("input_shape", "shape"),) + _AVG_ATTRS, category="pool",
    doc="The gradient of avg_pool2d: each output gradient spread evenly over its window.")

# --- adaptive average pooling -----------------------------------------------------------------------------


def adaptive_matrix(size: int, out: int, dtype: np.dtype) -> np.ndarray:
    """(out, size) averaging matrix: row i averages [floor(i*size/out), ceil((i+1)*size/out)), torch's bins."""
    i = np.arange(out)
    start, end = (i * size) // out, ((i + 1) * size + out - 1) // out
    k = np.arange(size)
    inside = (k[None, :] >= start[:, None]) & (k[None, :] < end[:, None])
    return (inside / (end - start)[:, None]).astype(dtype)


def _adaptive_infer(x: TensorType, *, output_size) -> TensorType:
    _check_input("adaptive_avg_pool2d", x.shape)
    out = pair("adaptive_avg_pool2d", "output_size", output_size, 1)
    if min(x.shape[-2:]) < 1:
        raise ShapeError(f"adaptive_avg_pool2d: input {dims(x.shape)} has an empty spatial dimension")
    return _pooled_type("adaptive_avg_pool2d", x, out)


def _adaptive_impl(x, *, output_size):
    rows = adaptive_matrix(x.shape[-2], output_size[0], x.dtype)
    cols = adaptive_matrix(x.shape[-1], output_size[1], x.dtype)
    return rows @ x @ cols.T


def _adaptive_vjp(e, g, out, x, *, output_size):
    dtype = x.dtype.numpy
    rows_t = e.constant(adaptive_matrix(x.shape[-2], output_size[0], dtype).T.copy())
    cols = e.constant(adaptive_matrix(x.shape[-1], output_size[1], dtype))
    return (e.matmul(e.matmul(rows_t, g), cols),)


adaptive_avg_pool2d = defop(
    "adaptive_avg_pool2d", ("x",), infer=_adaptive_infer, impl=_adaptive_impl, vjp=_adaptive_vjp,
    attrs=(AttrSpec("output_size", "ints"),), category="pool", rows=first_rows,
    doc="Average pooling to a fixed output size with torch's adaptive bins.")
