"""torch.nn.functional's sampling functions: affine_grid and grid_sample (spatial transformers), max pooling with the
indices of the maxima and its partial inverse max_unpool1d/2d.

Each is a composition of registered ops, so it traces, differentiates and compiles as those do. grid_sample reads
every tap (the 2 per axis of linear interpolation, the nearest one, the 4 per axis of bicubic) with one gather of the
input's flattened planes, zero where the tap falls outside the input, and weighs it by coefficients computed from the
grid: autodiff then gives the gradient of the input (the gathers' scatter_add) and of the grid (the weights'). The pixel
coordinates follow torch's unnormalization, clipping and reflection step by step, with torch's zero gradient where a
clipped coordinate sits on the border.
"""
from __future__ import annotations

import itertools
import math
import warnings
from typing import Sequence

import numpy as np

from braze.ir.errors import DTypeError, ShapeError
from braze.ir.types import float32, int64

from .. import functions as _f
from .. import math_functions as _m
from ..dispatch import apply
from ..pointwise import trunc
from ..promotion import as_tensor
from ..tensor import Tensor
from .functional_spatial import pair_of, single, unfold

__all__ = ["affine_grid", "grid_sample", "max_pool1d_with_indices", "max_pool2d_with_indices", "max_unpool1d",
           "max_unpool2d"]

GRID_SAMPLE_MODES = ("bilinear", "nearest", "bicubic")
GRID_SAMPLE_PADDING_MODES = ("zeros", "border", "reflection")
# torch's cubic convolution constant (Keys' a; OpenCV's choice too)
_CUBIC_A = -0.75


def _aligned(align_corners: bool | None) -> bool:
    """align_corners, with torch's warning and its default False when it is not given."""
    if align_corners is None:
        warnings.warn("Default grid_sample and affine_grid behavior has changed to align_corners=False since 1.3.0. "
                      "Please specify align_corners=True if the old behavior is desired. See the documentation of "
                      "grid_sample for details.", UserWarning, stacklevel=3)
        return False
    return bool(align_corners)


# --- affine_grid -----------------------------------------------------------------------------------------------


def _steps_from_minus_one(n: int, align_corners: bool, dtype: np.dtype) -> np.ndarray:
    """torch's normalized pixel positions along an axis of n pixels: its linspace(-1, 1, n) (halves computed from
    either end), scaled by (n - 1) / n to the pixel centres without align_corners; 0 for a single pixel."""
    if n <= 1:
        return np.zeros(n, dtype)
    one, i = dtype.type(1), np.arange(n).astype(dtype)
    step = dtype.type(2) / dtype.type(n - 1)
    steps = np.where(np.arange(n) < n // 2, -one + step * i, one - step * (dtype.type(n - 1) - i)).astype(dtype)
    return steps if align_corners else (steps * dtype.type(n - 1) / dtype.type(n)).astype(dtype)


def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool | None = None) -> Tensor:
    """The sampling grid (N, H, W, 2) of the affine maps theta (N, 2, 3) over an output of size (N, C, H, W), or
    (N, D, H, W, 3) of theta (N, 3, 4) for (N, C, D, H, W): each output pixel's normalized (x, y[, z], 1) times
    theta^T, as torch."""
    align = _aligned(align_corners)
    theta = as_tensor(theta)
    if not theta.dtype.is_float:
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = tuple(int(s) for s in size)
    if len(size) not in (4, 5):
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {list(size)}.")
    rank = len(size) - 2
    if theta.ndim != 3 or tuple(theta.shape[1:]) != (rank, rank + 1):
        raise ShapeError(f"Expected a batch of {rank}D affine matrices of shape Nx{rank}x{rank + 1} for size "
                         f"{list(size)}. Got {list(theta.shape)}.")
    spatial = size[2:]
    if align and min(spatial) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
                      "align_corners=True. This is not an intended use case of affine_grid. See the documentation "
                      "of affine_grid for details.", UserWarning, stacklevel=2)
    elif min(size) <= 0:
        raise ShapeError(f"Expected non-zero, positive output size. Got {list(size)}")
    if theta.shape[0] != size[0]:
        raise ShapeError(f"affine_grid: theta holds {theta.shape[0]} matrices for a batch of {size[0]} in size "
                         f"{list(size)}")
    dtype = theta.dtype.numpy
    axes = np.meshgrid(*(_steps_from_minus_one(n, align, dtype) for n in spatial), indexing="ij")
    base = np.stack([*reversed(axes), np.ones(spatial, dtype)], -1).reshape(1, -1, rank + 1)
    grid = _f.matmul(Tensor._wrap(base), _f.transpose(theta, 1, 2))
    return _f.reshape(grid, (size[0], *spatial, rank))


# --- grid_sample -----------------------------------------------------------------------------------------------


def _unnormalized(coord: Tensor, size: int, align_corners: bool) -> Tensor:
    """The pixel coordinate of a normalized one: -1 and 1 are the centres of the corner pixels (align_corners) or
    their outer edges, in torch's arithmetic."""
    if align_corners:
        return _f.mul(_f.add(coord, 1.0), (size - 1) / 2)
    return _f.sub(_f.mul(_f.add(coord, 1.0), size / 2), 0.5)


def _clipped(x: Tensor, size: int) -> Tensor:
    """x clamped to [0, size - 1], its gradient zero on the borders too (torch counts them as out of bounds), and a
    NaN (an infinite location reflected) taken as 0, as torch's clipping does."""
    return _f.where(_f.gt(x, 0.0), _f.where(_f.lt(x, size - 1), x, float(size - 1)), 0.0)


def _reflected(x: Tensor, size: int, align_corners: bool) -> Tensor:
    """x reflected about the borders until it lands in the input (the centres of the corner pixels with
    align_corners, their outer edges without), then clipped, in torch's arithmetic."""
    twice_span = 2 * (size - 1) if align_corners else 2 * size
    if twice_span == 0:
        return Tensor._wrap(np.zeros(tuple(x.shape), x.dtype.numpy))
    low = 0.0 if align_corners else -0.5
    distance = _f.abs(_f.sub(x, low))
    extra = _f.sub(distance, _f.mul(trunc(_f.div(distance, twice_span)), twice_span))
    flipped = _f.sub(float(twice_span), extra)
    return _clipped(_f.add(_f.where(_f.gt(extra, flipped), flipped, extra), low), size)


def _padded(x: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    """A pixel coordinate brought into the input as padding_mode says (zeros leaves it: its taps read 0 outside)."""
    if padding_mode == "border":
        return _clipped(x, size)
    if padding_mode == "reflection":
        return _reflected(x, size, align_corners)
    return x


def _cubic_weights(t: Tensor) -> list[Tensor]:
    """The cubic convolution weights of the 4 taps at offsets -1, 0, 1, 2 from floor(x), for t = x - floor(x)."""
    a = _CUBIC_A

    def near(d: Tensor) -> Tensor:
        return _f.add(_f.mul(_f.mul(_f.sub(_f.mul(d, a + 2), a + 3), d), d), 1.0)

    def far(d: Tensor) -> Tensor:
        return _f.sub(_f.mul(_f.add(_f.mul(_f.sub(_f.mul(d, a), 5 * a), d), 8 * a), d), 4 * a)

    rest = _f.sub(1.0, t)
    return [far(_f.add(t, 1.0)), near(t), near(rest), far(_f.add(rest, 1.0))]


Tap = tuple[Tensor, Tensor]  # an integral pixel coordinate and its weight


def _axis_taps(coord: Tensor, size: int, mode: str, padding_mode: str, align_corners: bool) -> list[Tap]:
    """The pixels one axis of the grid reads, and their interpolation weights, as torch's grid sampler; the nearest
    pixel's weight is 1 with a zero gradient, as torch gives the grid of nearest sampling a zero gradient."""
    x = _unnormalized(coord, size, align_corners)
    if mode == "bicubic":
        start = _m.floor(x)
        taps = [start if k == 0 else _f.add(start, float(k)) for k in (-1, 0, 1, 2)]
        weights = _cubic_weights(_f.sub(x, start))
        return [(_padded(p, size, padding_mode, align_corners), w) for p, w in zip(taps, weights)]
    x = _padded(x, size, padding_mode, align_corners)
    if mode == "nearest":
        pixel = _m.round(x)
        return [(pixel, _f.add(_f.mul(_f.where(_m.isfinite(pixel), pixel, 0.0), 0.0), 1.0))]
    start = _m.floor(x)
    east = _f.sub(x, start)
    return [(start, _f.sub(1.0, east)), (_f.add(start, 1.0), east)]


def _read(planes: Tensor, pixels: Sequence[Tensor], sizes: Sequence[int]) -> Tensor:
    """The values of planes (N, C, prod(sizes)) at integral pixel coordinates (N, *out), one per spatial axis,
    as (N, C, prod(out)): one gather, and 0 where a coordinate is outside the input (the gather reads pixel 0
    there). Flat, so that a compiled graph's corner gathers and their weighted sum are one kernel."""
    inside = None
    for p, size in zip(pixels, sizes):
        within = _f.logical_and(_f.ge(p, 0.0), _f.le(p, size - 1))
        inside = within if inside is None else _f.logical_and(inside, within)
    flat = None
    for p, size in zip(pixels, sizes):
        index = _f.to_dtype(_f.where(inside, p, 0.0), int64)
        flat = index if flat is None else _f.add(_f.mul(flat, size), index)
    n, c, out = planes.shape[0], planes.shape[1], tuple(pixels[0].shape[1:])
    flat = _f.broadcast_to(_f.reshape(flat, (n, 1, -1)), (n, c, math.prod(out)))
    return _f.where(_f.reshape(inside, (n, 1, -1)), _f.gather(planes, 2, flat), 0.0)


def _check_grid_sample(input: Tensor, grid: Tensor, mode: str, padding_mode: str) -> None:
    """torch's argument checks of grid_sample, with its wording."""
    if mode not in GRID_SAMPLE_MODES:
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but "
                         f"got: '{mode}'")
    if padding_mode not in GRID_SAMPLE_PADDING_MODES:
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    sizes = f"input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}"
    if input.ndim not in (4, 5) or grid.ndim != input.ndim:
        raise ShapeError(f"grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, but got "
                         f"{sizes}")
    if grid.shape[0] != input.shape[0]:
        raise ShapeError(f"grid_sampler(): expected grid and input to have same batch size, but got {sizes}")
    if grid.shape[-1] != input.ndim - 2:
        raise ShapeError(f"grid_sampler(): expected grid to have size {input.ndim - 2} in last dimension, but got "
                         f"grid with sizes {list(grid.shape)}")
    for axis in range(2, input.ndim):
        if input.shape[axis] == 0:
            raise ShapeError(f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                             f"sizes {list(input.shape)} with dimension {axis} being empty")
    if mode == "bicubic" and input.ndim != 4:
        raise ShapeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if not input.dtype.is_float or grid.dtype != input.dtype:
        raise DTypeError(f"grid_sampler(): expected input and grid to have the same floating-point dtype, but input "
                         f"has dtype {input.dtype} and grid has dtype {grid.dtype}")


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Tensor:
    """input (N, C, H, W) sampled at the normalized locations grid (N, H_out, W_out, 2) (x, then y, in [-1, 1]) into
    (N, C, H_out, W_out); 5-D input and grid sample volumes (bilinear meaning trilinear). mode is 'bilinear',
    'nearest' or 'bicubic' (4-D), padding_mode how locations outside the input read: 'zeros', 'border' or
    'reflection', all as torch."""
    input, grid = as_tensor(input), as_tensor(grid)
    _check_grid_sample(input, grid, mode, padding_mode)
    align = _aligned(align_corners)
    sizes = tuple(input.shape[2:])
    coords = _f.unbind(grid, -1)[::-1]  # the grid lists x (the last axis) first
    taps = [_axis_taps(coord, size, mode, padding_mode, align) for coord, size in zip(coords, sizes)]
    n = input.shape[0]
    planes = _f.reshape(input, (n, input.shape[1], -1))
    out = None
    for corner in itertools.product(*taps):
        weight = corner[0][1]
        for _, w in corner[1:]:
            weight = _f.mul(weight, w)
        value = _f.mul(_read(planes, [pixel for pixel, _ in corner], sizes), _f.reshape(weight, (n, 1, -1)))
        out = value if out is None else _f.add(out, value)
    return _f.reshape(out, (n, input.shape[1], *grid.shape[1:-1]))


# --- max pooling with indices, max unpooling -------------------------------------------------------------------


def _pooled_length(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """torch's pooling output length: windows starting in the padded input, with ceil_mode the last partial one
    too unless it starts in the right padding."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    return out - 1 if ceil_mode and (out - 1) * s >= n + p else out


def max_pool2d_with_indices(input: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                            padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                            ceil_mode: bool = False, return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """(max_pool2d of (N, C, H, W) or (C, H, W) input, int64 flat index h * W + w of each maximum in its plane), as
    torch: the first maximum of a window in row-major order, or its last NaN.

    The windows are unfolded from the input padded with -inf and each tap ranked: 2 + k / taps for a NaN at tap k,
    1 for a tap inside the input equal to the window's maximum, else 0; argmax takes the first of the highest rank,
    so a window of -inf values points at its first pixel of the input, as torch's does.
    """
    if input.ndim == 3:
        values, indices = max_pool2d_with_indices(_f.unsqueeze(input, 0), kernel_size, stride, padding, dilation,
                                                  ceil_mode)
        return _f.squeeze(values, 0), _f.squeeze(indices, 0)
    if input.ndim != 4:
        raise ShapeError(f"max_pool2d: expected 3D or 4D (batch mode) input, got shape {list(input.shape)}")
    kernel = pair_of(kernel_size, "kernel_size", "max_pool2d")
    strides = kernel if stride is None else pair_of(stride, "stride", "max_pool2d")
    pads, dilations = pair_of(padding, "padding", "max_pool2d"), pair_of(dilation, "dilation", "max_pool2d")
    if any(2 * p > k for p, k in zip(pads, kernel)):
        raise ValueError(f"max_pool2d: pad should be at most half of effective kernel size, but got pad={list(pads)} "
                         f"and kernel_size={list(kernel)}")
    n, c, h, w = input.shape
    lengths = [_pooled_length(size, k, s, p, d, ceil_mode)
               for size, k, s, p, d in zip((h, w), kernel, strides, pads, dilations)]
    if min(lengths) <= 0:
        raise ShapeError(f"max_pool2d: the output size {lengths} of input {list(input.shape)} is too small")
    ends = [(o - 1) * s + d * (k - 1) + 1 - size - p
            for o, s, d, k, size, p in zip(lengths, strides, dilations, kernel, (h, w), pads)]
    padded = apply("pad", input, pads=(0, 0, 0, 0, pads[0], max(ends[0], 0), pads[1], max(ends[1], 0)),
                   value=-math.inf)
    taps, blocks = kernel[0] * kernel[1], lengths[0] * lengths[1]
    windows = _f.reshape(unfold(padded, kernel, dilations, 0, strides), (n, c, taps, blocks))
    rows = (np.arange(lengths[0]) * strides[0] - pads[0])[:, None, None, None] + \
        (np.arange(kernel[0]) * dilations[0])[None, None, :, None]
    cols = (np.arange(lengths[1]) * strides[1] - pads[1])[None, :, None, None] + \
        (np.arange(kernel[1]) * dilations[1])[None, None, None, :]
    rows, cols = np.broadcast_arrays(rows, cols)  # (out_h, out_w, k_h, k_w)
    inside = ((rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)).reshape(blocks, taps).T
    flat = (rows * w + cols).reshape(blocks, taps).T.astype(np.int64)
    nan_rank = Tensor._wrap((2.0 + np.arange(taps, dtype=np.float32) / taps)[:, None])
    at_max = _f.to_dtype(_f.eq(windows, _f.amax(windows, 2, keepdim=True)), float32)
    rank = _f.where(_m.isnan(windows), nan_rank, at_max)
    if not inside.all():
        rank = _f.mul(rank, Tensor._wrap(inside.astype(np.float32)))
    tap = _f.argmax(rank, 2, keepdim=True)
    values = _f.reshape(_f.gather(windows, 2, tap), (n, c, *lengths))
    offsets = _f.reshape(Tensor._wrap(flat), (1, 1, taps, blocks))
    indices = _f.gather(_f.broadcast_to(offsets, (n, c, taps, blocks)), 2, tap)
    return values, _f.reshape(indices, (n, c, *lengths))


def max_pool1d_with_indices(input: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                            padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1,
                            ceil_mode: bool = False, return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """(max_pool1d of (N, C, L) or (C, L) input, int64 index of each maximum along L): max_pool2d_with_indices of
    the height-1 plane."""
    if input.ndim not in (2, 3):
        raise ShapeError(f"max_pool1d: expected 2D or 3D (batch mode) input, got shape {list(input.shape)}")
    k = single(kernel_size, "kernel_size", "max_pool1d")
    s = k if stride is None else single(stride, "stride", "max_pool1d")
    values, indices = max_pool2d_with_indices(_f.unsqueeze(input, -2), (1, k), (1, s),
                                              (0, single(padding, "padding", "max_pool1d")),
                                              (1, single(dilation, "dilation", "max_pool1d")), ceil_mode)
    return _f.squeeze(values, -2), _f.squeeze(indices, -2)


def _unpooled_size(function: str, input: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...],
                   padding: tuple[int, ...], output_size: Sequence[int] | None) -> tuple[int, ...]:
    """torch's max_unpool output size: (in - 1) * stride + kernel - 2 * padding per axis, or output_size (its
    trailing spatial entries) when within a stride of that."""
    rank = len(kernel)
    default = tuple((input.shape[-rank + a] - 1) * stride[a] + kernel[a] - 2 * padding[a] for a in range(rank))
    if output_size is None:
        size = default
    else:
        given = output_size[2:] if len(output_size) == rank + 2 else output_size
        if len(given) != rank:
            raise ValueError(f"output_size should be a sequence containing {rank} or {rank + 2} elements, but it has "
                             f"a length of '{len(given)}'")
        size = tuple(int(s) for s in given)
        for a in range(rank):
            low, high = default[a] - stride[a], default[a] + stride[a]
            if not low < size[a] < high:
                raise ValueError(f'invalid output_size "{given}" (dim {a} must be between {low} and {high})')
    for a, s in enumerate(size):
        if s < 0:
            raise ValueError(f"{function}: output_size must contain non-negative spatial dimensions, but got "
                             f"output_size[{a}]={s}")
    return size


def _max_unpool(function: str, input: Tensor, indices: Tensor, size: tuple[int, ...]) -> Tensor:
    """Zeros of the spatial `size` per plane with each input value written at its flat index in the plane (one
    scatter: of repeated indices the last write wins, as torch's CPU kernel)."""
    input, indices = as_tensor(input), as_tensor(indices)
    rank = len(size)
    if input.ndim not in (rank + 1, rank + 2):
        raise ShapeError(f"{function}: expected {rank + 1}D or {rank + 2}D (batch mode) input, got shape "
                         f"{list(input.shape)}")
    if tuple(indices.shape) != tuple(input.shape):
        raise ShapeError(f"{function}: Expected shape of indices to be same as that of the input tensor "
                         f"({list(input.shape)}) but got indices tensor with shape: {list(indices.shape)}")
    if not indices.dtype.is_integer:
        raise DTypeError(f"{function}: elements in indices should be type int64 but got: {indices.dtype}")
    lead = tuple(input.shape[:-rank])
    base = Tensor._wrap(np.zeros(lead + (math.prod(size),), input.dtype.numpy))
    flat = apply("scatter", base, _f.reshape(_f.to_dtype(indices, int64), lead + (-1,)),
                 _f.reshape(input, lead + (-1,)), axis=len(lead))
    return _f.reshape(flat, lead + size)


def max_unpool1d(input: Tensor, indices: Tensor, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
                 output_size: Sequence[int] | None = None) -> Tensor:
    """The partial inverse of max_pool1d: (N, C, L) or (C, L) values put back at the positions `indices` gives
    (max_pool1d_with_indices), zeros elsewhere."""
    kernel = (single(kernel_size, "kernel_size", "max_unpool1d"),)
    strides = kernel if stride is None else (single(stride, "stride", "max_unpool1d"),)
    pads = (single(padding, "padding", "max_unpool1d"),)
    size = _unpooled_size("max_unpool1d", input, kernel, strides, pads, output_size)
    return _max_unpool("max_unpool1d", input, indices, size)


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
                 output_size: Sequence[int] | None = None) -> Tensor:
    """The partial inverse of max_pool2d: (N, C, H, W) or (C, H, W) values put back at the flat plane positions
    `indices` gives (max_pool2d_with_indices), zeros elsewhere."""
    kernel = pair_of(kernel_size, "kernel_size", "max_unpool2d")
    strides = kernel if stride is None else pair_of(stride, "stride", "max_unpool2d")
    pads = pair_of(padding, "padding", "max_unpool2d")
    size = _unpooled_size("max_unpool2d", input, kernel, strides, pads, output_size)
    return _max_unpool("max_unpool2d", input, indices, size)
