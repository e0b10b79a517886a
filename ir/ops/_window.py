"""Sliding-window geometry shared by convolution and pooling: attribute checks, output sizes, window views.

Spatial ops work on the last two axes (H, W). A window starting at output position o covers the padded input
rows o*stride + i*dilation for i in range(kernel); "padded" coordinates count the leading padding as row 0.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import AttributeSchemaError, ShapeError
from ..types import check_bytes

Pair = tuple[int, int]


def dims(shape: Sequence[int]) -> str:
    """A shape as users read it in messages: (8,3,3,3), (3,), ()."""
    return "(" + ",".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def pair(op: str, name: str, value: Sequence[int], minimum: int) -> Pair:
    """Check a (height, width) attribute: exactly two values, each at least `minimum`."""
    if len(value) != 2:
        raise AttributeSchemaError(f"{op}: attribute '{name}' expects 2 values (height, width), got {list(value)}")
    if any(v < minimum for v in value):
        raise AttributeSchemaError(f"{op}: attribute '{name}' values must be >= {minimum}, got {list(value)}")
    return int(value[0]), int(value[1])


def span(kernel: int, dilation: int) -> int:
    """The extent of a dilated kernel along one axis."""
    return dilation * (kernel - 1) + 1


def conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """Output length of a convolution along one axis (may be <= 0 for a too-small input)."""
    return (size + 2 * pad - span(kernel, dilation)) // stride + 1


def pool_out(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    """Output length of a pooling window along one axis, torch's rule: in ceil mode the last window
    must start inside the input or its leading padding."""
    out = (size + 2 * pad - span(kernel, dilation) + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def needed(out: Pair, kernel: Pair, stride: Pair, dilation: Pair) -> Pair:
    """The padded (H, W) extent that `out` windows reach."""
    return ((out[0] - 1) * stride[0] + span(kernel[0], dilation[0]),
            (out[1] - 1) * stride[1] + span(kernel[1], dilation[1]))


def check_padded(op: str, shape: Sequence[int], padding: Pair, extent: Pair) -> None:
    """Refuse geometry whose padded input (what the reference builds) passes the size limit; counted in 8-byte
    elements, the widest dtype, since geometry is checked from shapes alone."""
    plane = tuple(max(extent[a], shape[-2 + a] + 2 * padding[a]) for a in range(2))
    check_bytes(f"{op}: input {dims(shape)} padded to {dims(tuple(shape[:-2]) + plane)}",
                math.prod(shape[:-2]) * plane[0] * plane[1] * 8)


def pad_spatial(x: np.ndarray, padding: Pair, extent: Pair, value: float) -> np.ndarray:
    """Pad the last two axes by `padding` in front and enough behind to reach `extent` (at least `padding`)."""
    h, w = x.shape[-2:]
    widths = [(0, 0)] * (x.ndim - 2) + [(padding[0], max(extent[0] - h - padding[0], padding[0])),
                                        (padding[1], max(extent[1] - w - padding[1], padding[1]))]
    return np.pad(x, widths, constant_values=np.asarray(value, dtype=x.dtype))


def windows(xp: np.ndarray, out: Pair, kernel: Pair, stride: Pair, dilation: Pair) -> np.ndarray:
    """A read-only view (..., OH, OW, kH, kW) of the windows of a padded input; no copy."""
    view = sliding_window_view(xp, (span(kernel[0], dilation[0]), span(kernel[1], dilation[1])), axis=(-2, -1))
    return view[..., :(out[0] - 1) * stride[0] + 1:stride[0], :(out[1] - 1) * stride[1] + 1:stride[1],
                ::dilation[0], ::dilation[1]]


def scatter_windows(cols: np.ndarray, padded: np.ndarray, stride: Pair, dilation: Pair) -> np.ndarray:
    """Add window values cols (..., OH, OW, kH, kW) into `padded` (the adjoint of `windows`); returns it.

    Loops over the kernel's kH*kW offsets only; each step adds a whole strided plane.
    """
    oh, ow, kh, kw = cols.shape[-4:]
    for i in range(kh):
        r = i * dilation[0]
        for j in range(kw):
            c = j * dilation[1]
            padded[..., r:r + (oh - 1) * stride[0] + 1:stride[0], c:c + (ow - 1) * stride[1] + 1:stride[1]] += \
                cols[..., i, j]
    return padded


def crop(padded: np.ndarray, padding: Pair, size: Pair) -> np.ndarray:
    """The input region (H, W) of a padded array."""
    return padded[..., padding[0]:padding[0] + size[0], padding[1]:padding[1] + size[1]]


def check_output(op: str, shape: Sequence[int], out: Pair, detail: str) -> None:
    if out[0] < 1 or out[1] < 1:
        raise ShapeError(f"{op}: input {dims(shape)} gives output size {out[0]}x{out[1]}, which is too small "
                         f"({detail})")
