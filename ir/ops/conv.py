"""2-d convolution (NCHW, grouped, strided, padded, dilated) and its two backward ops.

The reference is im2col: a strided window view of the padded input, reshaped per group into a matrix and
multiplied with the weight matrix (one batched GEMM over groups). conv2d_grad_input is the adjoint in the
input (col2im: the same GEMM transposed, its columns added back into the padded input plane by plane) and
conv2d_grad_weight the adjoint in the weight. The three are one bilinear form B(x, w), so each one's VJP is
one of the others: that keeps second derivatives available without a new op. Both backward ops have kernels of
their own (codegen/conv_grad.py): no decomposition.
"""
from __future__ import annotations

import math

from typing import Sequence

import numpy as np

from ..attrs import AttrSpec
from ..errors import ShapeError
from ..registry import defop
from ..row_rules import batched_rows
from ..types import TensorType, check_bytes
from ._common import require_float, same_dtype
from ._window import (Pair, check_padded, conv_out, crop, dims, needed, pad_spatial, pair, scatter_windows, span,
                      windows)

_GEOMETRY = (AttrSpec("stride", "ints", (1, 1)), AttrSpec("padding", "ints", (0, 0)),
             AttrSpec("dilation", "ints", (1, 1)), AttrSpec("groups", "int", 1))


def _geometry(op: str, stride, padding, dilation, groups) -> tuple[Pair, Pair, Pair, int]:
    if groups < 1:
        raise ShapeError(f"{op}: groups must be positive, got {groups}")
    return pair(op, "stride", stride, 1), pair(op, "padding", padding, 0), pair(op, "dilation", dilation, 1), groups


def conv2d_output_shape(op: str, x: Sequence[int], w: Sequence[int], stride, padding, dilation,
                        groups: int) -> tuple[int, int, int, int]:
    """The (N, C_out, OH, OW) of conv2d for input shape x and weight shape w; ShapeError naming both if invalid."""
    stride, padding, dilation, groups = _geometry(op, stride, padding, dilation, groups)
    if len(x) != 4:
        raise ShapeError(f"{op}: expected a 4-d input (N,C,H,W), got {dims(x)}")
    if len(w) != 4:
        raise ShapeError(f"{op}: expected a 4-d weight (C_out,C_in/groups,kH,kW), got {dims(w)}")
    if min(w[2:]) < 1:
        raise ShapeError(f"{op}: weight {dims(w)} has an empty kernel (kH and kW must be positive)")
    if w[0] % groups:
        raise ShapeError(f"{op}: weight {dims(w)} has {w[0]} output channels, not divisible by groups={groups}")
    if x[1] != w[1] * groups:
        grouped = f" and groups={groups}" if groups > 1 else ""
        raise ShapeError(f"{op}: expected input with {w[1] * groups} channels (weight {dims(w)}{grouped}), "
                         f"got {dims(x)}")
    out = tuple(conv_out(x[2 + a], w[2 + a], stride[a], padding[a], dilation[a]) for a in range(2))
    if min(out) < 1:
        padded = tuple(x[2 + a] + 2 * padding[a] for a in range(2))
        kernel = tuple(span(w[2 + a], dilation[a]) for a in range(2))
        raise ShapeError(f"{op}: padded input size {padded[0]}x{padded[1]} (input {dims(x)}) is smaller than the "
                         f"dilated kernel size {kernel[0]}x{kernel[1]} (weight {dims(w)})")
    check_padded(op, x, padding, needed(out, tuple(w[2:]), stride, dilation))
    check_bytes(f"{op}: the im2col matrix of input {dims(x)} and weight {dims(w)}",
                x[0] * out[0] * out[1] * x[1] * w[2] * w[3] * 8)
    return x[0], w[0], out[0], out[1]


def _im2col(x: np.ndarray, kernel: Pair, out: Pair, stride: Pair, padding: Pair, dilation: Pair,
            groups: int) -> np.ndarray:
    """Input windows as one matrix per group: (G, N*OH*OW, C_in/G*kH*kW)."""
    n, c = x.shape[:2]
    xp = pad_spatial(x, padding, needed(out, kernel, stride, dilation), 0.0)
    cols = windows(xp, out, kernel, stride, dilation)  # (N, C, OH, OW, kH, kW)
    cols = cols.reshape(n, groups, c // groups, *out, *kernel).transpose(1, 0, 3, 4, 2, 5, 6)
    return cols.reshape(groups, n * out[0] * out[1], (c // groups) * kernel[0] * kernel[1])


def _out_to_mat(y: np.ndarray, groups: int) -> np.ndarray:
    """(N, C_out, OH, OW) -> (G, N*OH*OW, C_out/G), the layout the GEMMs produce and consume."""
    n, co, oh, ow = y.shape
    return y.reshape(n, groups, co // groups, oh, ow).transpose(1, 0, 3, 4, 2).reshape(groups, n * oh * ow,
                                                                                       co // groups)


def _mat_to_out(m: np.ndarray, n: int, out: Pair) -> np.ndarray:
    groups, _, cog = m.shape
    return m.reshape(groups, n, *out, cog).transpose(1, 0, 4, 2, 3).reshape(n, groups * cog, *out)


def _weight_mat(w: np.ndarray, groups: int) -> np.ndarray:
    """(C_out, C_in/G, kH, kW) -> (G, C_out/G, C_in/G*kH*kW)."""
    return w.reshape(groups, w.shape[0] // groups, math.prod(w.shape[1:]))  # not -1: w may have no elements


# --- conv2d -----------------------------------------------------------------------------------------------


def _conv2d_infer(x: TensorType, w: TensorType, b: TensorType | None = None, *, stride, padding, dilation,
                  groups) -> TensorType:
    dtype = same_dtype("conv2d", *(t for t in (x, w, b) if t is not None))
    require_float("conv2d", x)
    shape = conv2d_output_shape("conv2d", x.shape, w.shape, stride, padding, dilation, groups)
    if b is not None and b.shape != (w.shape[0],):
        raise ShapeError(f"conv2d: expected bias of shape ({w.shape[0]},) for weight {dims(w.shape)}, "
                         f"got {dims(b.shape)}")
    return TensorType(shape, dtype)


def _conv2d_impl(x, w, b=None, *, stride, padding, dilation, groups):
    n, _, oh, ow = conv2d_output_shape("conv2d", x.shape, w.shape, stride, padding, dilation, groups)
    cols = _im2col(x, w.shape[2:], (oh, ow), stride, padding, dilation, groups)
    y = _mat_to_out(cols @ _weight_mat(w, groups).transpose(0, 2, 1), n, (oh, ow))
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return y


def _conv2d_vjp(e, g, out, x, w, b=None, *, stride, padding, dilation, groups):
    geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    dx = e.conv2d_grad_input(g, w, input_shape=tuple(x.shape), **geometry)
    dw = e.conv2d_grad_weight(x, g, weight_shape=tuple(w.shape), **geometry)
    if b is None:
        return dx, dw
    return dx, dw, e.sum(g, axes=(0, 2, 3), keepdim=False)


def _conv2d_work(node) -> int:
    """Multiply-adds: every result element sums C_in/groups * kH * kW products."""
    w = node.inputs[1]
    return node.out.type.size * (w.type.size // max(w.shape[0], 1))


def _grad_work(node) -> int:
    """Multiply-adds: the forward conv's, every output-gradient element meeting C_in/groups * kH * kW weights."""
    g = node.inputs[1] if node.op == "conv2d_grad_weight" else node.inputs[0]
    w = node.out if node.op == "conv2d_grad_weight" else node.inputs[1]
    return g.type.size * (w.type.size // max(w.shape[0], 1))


conv2d = defop(
    "conv2d", ("x", "w", "b?"), infer=_conv2d_infer, impl=_conv2d_impl, vjp=_conv2d_vjp, attrs=_GEOMETRY,
    category="conv", anchor="conv", work=_conv2d_work, rows=batched_rows(4),
    doc="Cross-correlation of an NCHW input with a (C_out, C_in/groups, kH, kW) weight plus an optional bias, "
        "as torch.nn.functional.conv2d.")

# --- backward ops -----------------------------------------------------------------------------------------


def _grad_input_infer(g: TensorType, w: TensorType, *, input_shape, stride, padding, dilation,
                      groups) -> TensorType:
    dtype = same_dtype("conv2d_grad_input", g, w)
    require_float("conv2d_grad_input", g)
    expect = conv2d_output_shape("conv2d_grad_input", input_shape, w.shape, stride, padding, dilation, groups)
    if g.shape != expect:
        raise ShapeError(f"conv2d_grad_input: expected an output gradient of shape {dims(expect)} for input "
                         f"{dims(input_shape)} and weight {dims(w.shape)}, got {dims(g.shape)}")
    return TensorType(input_shape, dtype)


def _grad_input_impl(g, w, *, input_shape, stride, padding, dilation, groups):
    stride, padding, dilation, groups = _geometry("conv2d_grad_input", stride, padding, dilation, groups)
    n, c, h, wd = input_shape
    out, kernel = g.shape[2:], w.shape[2:]
    cols = _out_to_mat(g, groups) @ _weight_mat(w, groups)  # (G, N*OH*OW, C/G*kH*kW)
    cols = cols.reshape(groups, n, *out, c // groups, *kernel).transpose(1, 0, 4, 2, 3, 5, 6)
    cols = cols.reshape(n, c, *out, *kernel)
    extent = needed(out, kernel, stride, dilation)
    padded = np.zeros((n, c, max(extent[0], h + 2 * padding[0]), max(extent[1], wd + 2 * padding[1])), g.dtype)
    return crop(scatter_windows(cols, padded, stride, dilation), padding, (h, wd)).copy()


def _grad_input_vjp(e, ct, out, g, w, *, input_shape, stride, padding, dilation, groups):
    geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    return (e.conv2d(ct, w, **geometry),
            e.conv2d_grad_weight(ct, g, weight_shape=tuple(w.shape), **geometry))


conv2d_grad_input = defop(
    "conv2d_grad_input", ("g", "w"), infer=_grad_input_infer, impl=_grad_input_impl, vjp=_grad_input_vjp,
    attrs=(AttrSpec("input_shape", "shape"),) + _GEOMETRY, category="conv", work=_grad_work,
    doc="The gradient of conv2d with respect to its input, for output gradient g and weight w.")


def _grad_weight_infer(x: TensorType, g: TensorType, *, weight_shape, stride, padding, dilation,
                       groups) -> TensorType:
    dtype = same_dtype("conv2d_grad_weight", x, g)
    require_float("conv2d_grad_weight", x)
    expect = conv2d_output_shape("conv2d_grad_weight", x.shape, weight_shape, stride, padding, dilation, groups)
    if g.shape != expect:
        raise ShapeError(f"conv2d_grad_weight: expected an output gradient of shape {dims(expect)} for input "
                         f"{dims(x.shape)} and weight {dims(weight_shape)}, got {dims(g.shape)}")
    return TensorType(weight_shape, dtype)


def _grad_weight_impl(x, g, *, weight_shape, stride, padding, dilation, groups):
    stride, padding, dilation, groups = _geometry("conv2d_grad_weight", stride, padding, dilation, groups)
    cols = _im2col(x, weight_shape[2:], g.shape[2:], stride, padding, dilation, groups)
    dw = _out_to_mat(g, groups).transpose(0, 2, 1) @ cols  # (G, C_out/G, C_in/G*kH*kW)
    return dw.reshape(weight_shape)


def _grad_weight_vjp(e, ct, out, x, g, *, weight_shape, stride, padding, dilation, groups):
    geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    return (e.conv2d_grad_input(g, ct, input_shape=tuple(x.shape), **geometry),
            e.conv2d(x, ct, **geometry))


# --- the weight gradient in image slices -------------------------------------------------------------------------

# The weight gradient sums over every image and output position, so its GEMM has a long K and few result panels to
# share out among threads (one, for a first layer's 3-channel input). Cut into a fixed number of image slices, each
# slice's partial gradient is a GEMM of its own (the threads take slices and panels), and a sum over the slices, in
# slice order, adds them: the result is the same for any thread count. A slice keeps at least SLICE_STEPS of K (images
# times positions) so its packing and the partials' extra sum stay small beside its arithmetic.
MAX_SLICES = 8
SLICE_STEPS = 1024


def grad_weight_slices(batch: int, positions: int) -> int:
    """The image slices a weight gradient of `batch` images of `positions` output positions is cut into: the
    largest divisor of the batch up to MAX_SLICES whose slices keep SLICE_STEPS steps each (1: not cut)."""
    return max((s for s in range(1, MAX_SLICES + 1) if batch % s == 0 and (batch // s) * positions >= SLICE_STEPS),
               default=1)


def _slices_check(x: Sequence[int], slices: int) -> None:
    if slices < 1 or x[0] % slices:
        raise ShapeError(f"conv2d_grad_weight_slices: {slices} slices do not divide the batch of input {dims(x)}")


def _slices_infer(x: TensorType, g: TensorType, *, weight_shape, slices, stride, padding, dilation,
                  groups) -> TensorType:
    whole = _grad_weight_infer(x, g, weight_shape=weight_shape, stride=stride, padding=padding, dilation=dilation,
                               groups=groups)
    _slices_check(x.shape, slices)
    return TensorType((slices,) + tuple(weight_shape), whole.dtype)


def _slices_impl(x, g, *, weight_shape, slices, **geometry):
    _slices_check(x.shape, slices)
    per = x.shape[0] // slices
    parts = [_grad_weight_impl(x[s * per:(s + 1) * per], g[s * per:(s + 1) * per], weight_shape=weight_shape,
                               **geometry) for s in range(slices)]
    return np.stack(parts).astype(x.dtype, copy=False)


def _slices_vjp(e, ct, out, x, g, *, weight_shape, slices, **geometry):
    """Slice s is conv2d_grad_weight of its images, so its images' gradients are that op's VJP with ct[s]."""
    per, rank = x.shape[0] // slices, len(x.shape)
    dx, dg = [], []
    for s in range(slices):
        take = dict(starts=(s * per,) + (0,) * (rank - 1), stops=(s * per + per,) + tuple(x.shape[1:]),
                    steps=(1,) * rank)
        xs = e.slice(x, **take)
        gs = e.slice(g, **dict(take, stops=(s * per + per,) + tuple(g.shape[1:])))
        cts = e.reshape(e.slice(ct, starts=(s,) + (0,) * 4, stops=(s + 1,) + tuple(weight_shape), steps=(1,) * 5),
                        shape=tuple(weight_shape))
        dxs, dgs = _grad_weight_vjp(e, cts, None, xs, gs, weight_shape=weight_shape, **geometry)
        dx.append(dxs)
        dg.append(dgs)
    return (dx[0], dg[0]) if slices == 1 else (e.concat(*dx, axis=0), e.concat(*dg, axis=0))


def _slices_work(node) -> int:
    g, w = node.inputs[1], node.out
    return g.type.size * (w.type.size // max(w.shape[0] * w.shape[1], 1))


conv2d_grad_weight_slices = defop(
    "conv2d_grad_weight_slices", ("x", "g"), infer=_slices_infer, impl=_slices_impl, vjp=_slices_vjp,
    attrs=(AttrSpec("weight_shape", "shape"), AttrSpec("slices", "int")) + _GEOMETRY, category="conv",
    work=_slices_work,
    doc="conv2d_grad_weight of each of `slices` equal runs of the batch's images, stacked: (slices, *weight_shape); "
        "their sum over axis 0 is the whole batch's weight gradient.")


def _grad_weight_decomposition(e, x, g, *, weight_shape, stride, padding, dilation, groups):
    """The weight gradient as its image slices' partial gradients summed (the section comment above), where the
    batch is cut at all."""
    slices = grad_weight_slices(x.shape[0], math.prod(g.shape[2:]))
    if slices == 1 or math.prod(weight_shape) == 0:
        return None
    partial = e.conv2d_grad_weight_slices(x, g, weight_shape=tuple(weight_shape), slices=slices, stride=stride,
                                          padding=padding, dilation=dilation, groups=groups)
    return e.sum(partial, axes=(0,), keepdim=False)


conv2d_grad_weight = defop(
    "conv2d_grad_weight", ("x", "g"), infer=_grad_weight_infer, impl=_grad_weight_impl, vjp=_grad_weight_vjp,
    attrs=(AttrSpec("weight_shape", "shape"),) + _GEOMETRY, category="conv", work=_grad_work,
    decomposition=_grad_weight_decomposition,
    doc="The gradient of conv2d with respect to its weight, for input x and output gradient g.")
