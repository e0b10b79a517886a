"""torch.nn.functional's 1-d and 3-d convolution and pooling, adaptive max and power-average (LP) pooling, transposed
convolution, padding modes, interpolate and pixel_shuffle, as compositions of registered ops.

The 1-d forms are the 2-d ops on a height-1 plane. Reflect, replicate and circular padding are the pad op's modes
(one pass over the result); nearest interpolation gathers with an index_select per axis; linear, bilinear and
trilinear interpolation multiply by a fixed (out, in) interpolation matrix per axis, so each is a GEMM. A transposed
convolution (without dilation) is one stride-1 conv2d per output phase, the outputs whose positions are alike modulo
the stride: phase r of an axis takes the kernel taps j = r + padding (mod stride), flipped, over a window of the
input, and the phases interleave into the result. That skips the products with the stride - 1 zeros a transposed
convolution inserts between input elements, which a dilated one (below) still computes: conv2d on the input with
those zeros inserted, padded by dilation * (k - 1) - padding. Both flip the kernel and swap its channel axes per
group.

The 3-d forms run the 2-d ops over the depth axis folded into the batch. A 3-d convolution, with the input's depth
moved next to its batch, is one conv2d per depth tap kd: on the strided depth slice that tap reads for every output
depth (step stride_d, from kd * dilation_d) as a batch of N * D_out planes, with weight[:, :, kd]; the kD results
are summed. So there are kD conv2d calls, each a GEMM over the whole batch, and no loop over depths. A transposed
one is one conv_transpose2d per depth tap on all N * D input planes, each tap's planes added at the output depths
they reach (stride_d apart, from kd * dilation_d). 3-d pooling is separable, torch's windows and divisors being
products over the axes: 2-d pooling of each depth slice's (H, W) plane, then of the (D, H_out * W_out) planes of
the results with a (kD, 1) window. For max pooling, the maximum that a window's first row-major maximum over (H, W)
and then over depth picks is the window's first maximum in (D, H, W) order: torch's, where its gradient goes.

unfold gathers each sliding block's taps with strided slices of the padded input, one axis at a time (kh + kw
slices), and fold is its adjoint, a sum of the taps' strided slice_scatters. Neither multiplies by a 0/1 weight, so
they are exact for every value, inf and NaN included.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .. import functions as _f
from ..dispatch import apply
from ..tensor import Tensor

__all__ = ["conv1d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "max_pool1d", "max_pool3d",
           "avg_pool1d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "adaptive_max_pool3d", "lp_pool1d", "lp_pool2d", "interpolate", "pixel_shuffle",
           "pixel_unshuffle", "channel_shuffle", "unfold", "fold"]

PAD_MODES = ("constant", "reflect", "replicate", "circular")
INTERPOLATE_MODES = ("nearest", "linear", "bilinear", "trilinear")


def single(value: int | Sequence[int], name: str, function: str) -> int:
    """An int, or the one int of a 1-sequence."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    values = tuple(int(v) for v in value)
    if len(values) != 1:
        raise ValueError(f"{function}: {name} expects an int or a 1-tuple, got {value!r}")
    return values[0]


_COUNT_NAMES = {2: "a pair", 3: "a triple"}


def tuple_of(value: int | Sequence[int], rank: int, name: str, function: str) -> tuple[int, ...]:
    """An int (or a 1-sequence) repeated `rank` times, or `rank` ints."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * rank
    values = tuple(int(v) for v in value)
    if len(values) == 1:
        return values * rank
    if len(values) != rank:
        raise ValueError(f"{function}: {name} expects an int or {_COUNT_NAMES[rank]} of ints, got {value!r}")
    return values


def pair_of(value: int | Sequence[int], name: str, function: str) -> tuple[int, int]:
    """An int repeated, or a pair."""
    return tuple_of(value, 2, name, function)  # type: ignore[return-value]


def triple_of(value: int | Sequence[int], name: str, function: str) -> tuple[int, int, int]:
    """An int repeated, or a triple."""
    return tuple_of(value, 3, name, function)  # type: ignore[return-value]


def _on_plane(input: Tensor, fn: Any, batch_rank: int = 3) -> Tensor:
    """fn on (N, C, 1, L) for (N, C, L) input (or (C, L), unbatched), the height-1 axis removed afterwards."""
    x = input if input.ndim == batch_rank else _f.unsqueeze(input, 0)
    out = _f.squeeze(fn(_f.unsqueeze(x, 2)), 2)
    return out if input.ndim == batch_rank else _f.squeeze(out, 0)


# --- 1-d convolution and pooling ---------------------------------------------------------------------------


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """1-d cross-correlation of (N, C, L) or (C, L) input with a (C_out, C_in/groups, K) weight."""
    from .functional import conv2d
    pads = padding if isinstance(padding, str) else (0, single(padding, "padding", "conv1d"))
    w = _f.unsqueeze(weight, 2)
    return _on_plane(input, lambda x: conv2d(x, w, bias, (1, single(stride, "stride", "conv1d")), pads,
                                             (1, single(dilation, "dilation", "conv1d")), groups))


def max_pool1d(input: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    """Max over sliding windows of the last dim; stride defaults to kernel_size. With return_indices, also each
    maximum's index along the dim (max_pool1d_with_indices)."""
    from .functional import max_pool2d
    if return_indices:
        from .functional_sampling import max_pool1d_with_indices
        return max_pool1d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)
    k = single(kernel_size, "kernel_size", "max_pool1d")
    s = k if stride is None else single(stride, "stride", "max_pool1d")
    return _on_plane(input, lambda x: max_pool2d(x, (1, k), (1, s), (0, single(padding, "padding", "max_pool1d")),
                                                 (1, single(dilation, "dilation", "max_pool1d")), ceil_mode))


def avg_pool1d(input: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Mean over sliding windows of the last dim; stride defaults to kernel_size."""
    from .functional import avg_pool2d
    k = single(kernel_size, "kernel_size", "avg_pool1d")
    s = k if stride is None else single(stride, "stride", "avg_pool1d")
    return _on_plane(input, lambda x: avg_pool2d(x, (1, k), (1, s), (0, single(padding, "padding", "avg_pool1d")),
                                                 ceil_mode, count_include_pad))


def adaptive_avg_pool1d(input: Tensor, output_size: int | Sequence[int]) -> Tensor:
    """Average pooling of the last dim to output_size."""
    size = single(output_size, "output_size", "adaptive_avg_pool1d")
    return _on_plane(input, lambda x: apply("adaptive_avg_pool2d", x, output_size=(1, size)))


def _bins(n_in: int, n_out: int) -> list[tuple[int, int]]:
    """torch's adaptive pooling windows: [floor(i * in / out), ceil((i + 1) * in / out))."""
    return [((i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)) for i in range(n_out)]


def _adaptive_max(x: Tensor, axis: int, n_out: int) -> Tensor:
    """The maxima over torch's n_out adaptive windows along `axis`, each a max_pool2d of a (window, rest) plane: its
    gradient goes to the window's first maximum, so reducing the last axis first gives torch's (see the module doc)."""
    from .functional import max_pool2d
    lead, rest = tuple(x.shape[:axis]), tuple(x.shape[axis:][1:])
    planes = [max_pool2d(_f.reshape(_f.narrow(x, axis, a, b - a), (1, math.prod(lead), b - a, math.prod(rest))),
                         (b - a, 1)) for a, b in _bins(x.shape[axis], n_out)]
    return _f.reshape(_f.cat(planes, 2), lead + (n_out,) + rest)


def adaptive_max_pool2d(input: Tensor, output_size: int | Sequence[int | None],
                        return_indices: bool = False) -> Tensor:
    """Max pooling of the last two dims to output_size (a None entry keeps that dim), torch's windows."""
    if return_indices:
        raise ValueError("adaptive_max_pool2d: return_indices=True is not supported; supported: False")
    size = (output_size, output_size) if isinstance(output_size, (int, np.integer)) else tuple(output_size)
    h, w = input.shape[-2:]
    oh, ow = (h if size[0] is None else int(size[0])), (w if size[1] is None else int(size[1]))
    return _adaptive_max(_adaptive_max(input, -1, ow), -2, oh)


def adaptive_max_pool1d(input: Tensor, output_size: int | Sequence[int], return_indices: bool = False) -> Tensor:
    """Max pooling of the last dim of (N, C, L) or (C, L) input to output_size, torch's windows."""
    if return_indices:
        raise ValueError("adaptive_max_pool1d: return_indices=True is not supported; supported: False")
    if input.ndim not in (2, 3):
        raise ValueError(f"adaptive_max_pool1d: expected 2 to 3 dimensions, but got a {input.ndim}-dimensional "
                         f"tensor")
    return _adaptive_max(input, -1, single(output_size, "output_size", "adaptive_max_pool1d"))


def _lp_pool(input: Tensor, norm_type: float, kernel_size: Any, stride: Any, ceil_mode: bool, max_pool: Any,
             avg_pool: Any, taps: int) -> Tensor:
    """torch's power-average pooling: (sum of x**p over each window) ** (1/p), the sum being the window mean
    times the kernel's `taps`; p = +-inf is the max of |x| (the min for -inf)."""
    if norm_type == math.inf:
        return max_pool(_f.abs(input), kernel_size, stride, 0, 1, ceil_mode)
    if norm_type == -math.inf:
        return _f.neg(max_pool(_f.neg(_f.abs(input)), kernel_size, stride, 0, 1, ceil_mode))
    out = avg_pool(_f.pow(input, norm_type), kernel_size, stride, 0, ceil_mode)
    return _f.pow(_f.mul(_f.mul(_f.sign(out), _f.relu(_f.abs(out))), taps), 1.0 / norm_type)


def lp_pool1d(input: Tensor, norm_type: float, kernel_size: int | Sequence[int],
              stride: int | Sequence[int] | None = None, ceil_mode: bool = False) -> Tensor:
    """Power-average pooling over windows of the last dim: (sum of x**norm_type) ** (1 / norm_type)."""
    taps = single(kernel_size, "kernel_size", "lp_pool1d")
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, max_pool1d, avg_pool1d, taps)


def lp_pool2d(input: Tensor, norm_type: float, kernel_size: int | Sequence[int],
              stride: int | Sequence[int] | None = None, ceil_mode: bool = False) -> Tensor:
    """Power-average pooling over windows of the last two dims: (sum of x**norm_type) ** (1 / norm_type)."""
    from .functional import avg_pool2d, max_pool2d
    kh, kw = pair_of(kernel_size, "kernel_size", "lp_pool2d")
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, max_pool2d, avg_pool2d, kh * kw)


# --- transposed convolution --------------------------------------------------------------------------------


def _dilate(x: Tensor, axis: int, stride: int) -> Tensor:
    """x with stride - 1 zeros inserted between neighbours along axis."""
    if stride == 1 or x.shape[axis] == 0:
        return x
    n = x.shape[axis]
    spread = _f.unsqueeze(x, axis + 1)
    zeros = _f.mul(_f.narrow(spread, axis, 0, 1), 0.0)
    zeros = _f.broadcast_to(zeros, tuple(n if a == axis else (stride - 1 if a == axis + 1 else d)
                                         for a, d in enumerate(spread.shape)))
    woven = _f.reshape(_f.cat([spread, zeros], axis + 1), tuple(x.shape[:axis]) + (n * stride,) + tuple(
        x.shape[axis + 1:]))
    return _f.narrow(woven, axis, 0, (n - 1) * stride + 1)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0, groups: int = 1,
                     dilation: int | Sequence[int] = 1) -> Tensor:
    """The adjoint of conv2d in its input, for a (C_in, C_out/groups, kH, kW) weight, as torch."""
    from .functional import conv2d, pad
    fn = "conv_transpose2d"
    s, p = pair_of(stride, "stride", fn), pair_of(padding, "padding", fn)
    op, d = pair_of(output_padding, "output_padding", fn), pair_of(dilation, "dilation", fn)
    if any(o >= max(si, di) for o, si, di in zip(op, s, d)):
        raise ValueError(f"{fn}: output_padding {op} must be smaller than either stride {s} or dilation {d}")
    if weight.ndim != 4 or weight.shape[0] % groups:
        raise ValueError(f"{fn}: expected a (C_in, C_out/groups, kH, kW) weight with C_in divisible by "
                         f"groups={groups}, got {weight.shape}")
    batched = input if input.ndim == 4 else _f.unsqueeze(input, 0)
    c_in, c_out_g, k = weight.shape[0], weight.shape[1], tuple(weight.shape[2:])
    w = _f.reshape(weight, (groups, c_in // groups, c_out_g) + k)
    w = _f.reshape(_f.transpose(w, 1, 2), (groups * c_out_g, c_in // groups) + k)
    if d == (1, 1) and all(ki >= si for ki, si in zip(k, s)):  # every phase has a tap
        out = _phases_transposed(batched, w, bias, s, p, op, groups)
    else:
        x = _dilate(_dilate(batched, 2, s[0]), 3, s[1])
        edges = [d[a] * (k[a] - 1) - p[a] for a in range(2)]
        x = pad(x, (edges[1], edges[1] + op[1], edges[0], edges[0] + op[0]))
        out = conv2d(x, _taps(_taps(w, 2, range(k[0] - 1, -1, -1)), 3, range(k[1] - 1, -1, -1)), bias, 1, 0, d,
                     groups)
    return out if input.ndim == 4 else _f.squeeze(out, 0)


def _taps(w: Tensor, axis: int, taps: Sequence[int]) -> Tensor:
    """The kernel taps listed, in that order, along a spatial axis of a weight."""
    return apply("index_select", w, Tensor._wrap(np.asarray(taps, dtype=np.int64)), axis=axis)


def _phase(n: int, k: int, s: int, p: int, op: int, r: int) -> tuple[range, int, int]:
    """Phase r of one axis of a transposed convolution without dilation: the kernel taps it uses, flipped, where its
    input window starts and how many outputs it has, ceil(length / s) for every phase (the last ones overhang)."""
    length = (n - 1) * s - 2 * p + k + op
    first = (r + p) % s
    taps = range(first + (k - 1 - first) // s * s, first - 1, -s)
    return taps, (r + p) // s - (len(taps) - 1), -(-length // s)


def _phases_transposed(x: Tensor, w: Tensor, bias: Tensor | None, s: tuple[int, int], p: tuple[int, int],
                       op: tuple[int, int], groups: int) -> Tensor:
    """conv_transpose2d without dilation as one conv2d per output phase (see the module doc): output (q s + r) of
    an axis sums input (q + start + t) times tap taps[t]. `w` has its channel axes swapped per group already."""
    from .functional import conv2d, pad
    n, k = x.shape[2:], w.shape[2:]
    rows = []
    for rh in range(s[0]):
        row = []
        for rw in range(s[1]):
            (th, sh, qh), (tw, sw, qw) = (_phase(n[a], k[a], s[a], p[a], op[a], r) for a, r in ((0, rh), (1, rw)))
            window = pad(x, (-sw, sw + qw + len(tw) - 1 - n[1], -sh, sh + qh + len(th) - 1 - n[0]))
            row.append(conv2d(window, _taps(_taps(w, 2, th), 3, tw), bias, 1, 0, 1, groups))
        rows.append(_f.stack(row, -1))
    woven = _f.stack(rows, 3)  # (N, C, Qh, s_h, Qw, s_w)
    shape = woven.shape
    out = _f.reshape(woven, (shape[0], shape[1], shape[2] * s[0], shape[4] * s[1]))
    lengths = [(n[a] - 1) * s[a] - 2 * p[a] + k[a] + op[a] for a in range(2)]
    return pad(out, (0, lengths[1] - out.shape[3], 0, lengths[0] - out.shape[2]))


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0, groups: int = 1,
                     dilation: int | Sequence[int] = 1) -> Tensor:
    """conv_transpose2d on a height-1 plane, for a (C_in, C_out/groups, K) weight."""
    fn = "conv_transpose1d"
    w = _f.unsqueeze(weight, 2)
    return _on_plane(input, lambda x: conv_transpose2d(
        x, w, bias, (1, single(stride, "stride", fn)), (0, single(padding, "padding", fn)),
        (0, single(output_padding, "output_padding", fn)), groups, (1, single(dilation, "dilation", fn))))


# --- padding by index ----------------------------------------------------------------------------------------


# torch's padding modes by the pad op's names for them (numpy's)
PAD_OP_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def pad_indexed(input: Tensor, natural: Sequence[int], mode: str) -> Tensor:
    """reflect/replicate/circular padding; natural lists (before, after) per axis, first axis first. Reflect pads
    by less than the dim's size and circular by at most it (one mirror image, one wrap, as torch); replicate repeats
    the edge element any number of times."""
    for axis in range(input.ndim):
        before, after = natural[2 * axis], natural[2 * axis + 1]
        if not before and not after:
            continue
        n = input.shape[axis]
        limit = n - 1 if mode == "reflect" else n if mode == "circular" else math.inf
        if n == 0 or max(before, after) > limit or min(before, after) < 0:
            raise ValueError(f"pad: mode={mode!r} needs padding ({before}, {after}) within [0, {limit}] for "
                             f"dimension {axis} of size {n} (input {input.shape})")
    if not any(natural):
        return input
    return apply("pad", input, pads=tuple(natural), value=0.0, mode=PAD_OP_MODES[mode])


# --- interpolate -------------------------------------------------------------------------------------------


def _output_sizes(input: Tensor, size: Any, scale_factor: Any, spatial: int) -> tuple[list[int], list[float | None]]:
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: exactly one of size or scale_factor must be given")
    if size is not None:
        sizes = [int(size)] * spatial if isinstance(size, (int, np.integer)) else [int(v) for v in size]
        scales: list[float | None] = [None] * spatial
    else:
        scales = [float(scale_factor)] * spatial if isinstance(scale_factor, (int, float)) else \
            [float(v) for v in scale_factor]
        sizes = [int(math.floor(input.shape[2 + a] * scales[a])) for a in range(spatial)]
    if len(sizes) != spatial or len(scales) != spatial:
        raise ValueError(f"interpolate: expected {spatial} output sizes for input {input.shape}, got {size!r} "
                         f"{scale_factor!r}")
    return sizes, scales


def _source_scale(n_in: int, n_out: int, scale: float | None, align_corners: bool) -> float:
    """torch's ratio from output to input coordinates (a given scale_factor is used as given)."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale is not None else n_in / n_out


def _linear_matrix(n_in: int, n_out: int, scale: float | None, align_corners: bool) -> np.ndarray:
    """The (n_out, n_in) matrix of linear interpolation along one axis, with torch's coordinates."""
    ratio = _source_scale(n_in, n_out, scale, align_corners)
    out = np.arange(n_out, dtype=np.float64)
    src = out * ratio if align_corners else np.maximum((out + 0.5) * ratio - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    matrix = np.zeros((n_out, n_in))
    np.add.at(matrix, (np.arange(n_out), lo), 1.0 - frac)
    np.add.at(matrix, (np.arange(n_out), hi), frac)
    return matrix


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize the spatial dims (all after N, C): nearest, or linear (3-d input) / bilinear (4-d) / trilinear (5-d)."""
    if mode not in INTERPOLATE_MODES:
        raise ValueError(f"interpolate: mode={mode!r} is not supported; supported: "
                         f"{', '.join(repr(m) for m in INTERPOLATE_MODES)}")
    if antialias:
        raise ValueError("interpolate: antialias=True is not supported; supported: False")
    spatial = input.ndim - 2
    wanted = {"linear": 1, "bilinear": 2, "trilinear": 3}.get(mode)
    if spatial < 1 or (wanted is not None and spatial != wanted):
        raise ValueError(f"interpolate: mode={mode!r} expects a {(wanted or 1) + 2}-d input, got {input.shape}")
    if mode == "nearest" and align_corners is not None:
        raise ValueError("interpolate: align_corners only has an effect with mode='linear', 'bilinear' or "
                         "'trilinear'")
    sizes, scales = _output_sizes(input, size, scale_factor, spatial)
    if recompute_scale_factor:  # the scale is recomputed from the sizes, as torch
        scales = [None] * spatial
    out = input
    for a in range(spatial):
        axis, n_in = 2 + a, input.shape[2 + a]
        if mode == "nearest":
            ratio = 1.0 / scales[a] if scales[a] is not None else n_in / sizes[a]
            index = np.minimum(np.floor(np.arange(sizes[a]) * ratio).astype(np.int64), n_in - 1)
            out = apply("index_select", out, Tensor._wrap(index), axis=axis)
        else:
            matrix = _linear_matrix(n_in, sizes[a], scales[a], bool(align_corners))
            moved = _f.transpose(out, axis, -1)
            mixed = _f.matmul(moved, Tensor._wrap(matrix.T.astype(input.dtype.numpy)))
            out = _f.transpose(mixed, axis, -1)
    return out


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C * r**2, H, W) to (*, C, H * r, W * r), as torch."""
    r = int(upscale_factor)
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise ValueError(f"pixel_shuffle: expected the channel dim ({c}) to be divisible by the square of "
                         f"upscale_factor ({r * r})")
    k = len(lead)
    x = _f.reshape(input, tuple(lead) + (c // (r * r), r, r, h, w))
    x = _f.permute(x, list(range(k)) + [k, k + 3, k + 1, k + 4, k + 2])
    return _f.reshape(x, tuple(lead) + (c // (r * r), h * r, w * r))


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H * r, W * r) to (*, C * r**2, H, W), the inverse of pixel_shuffle, as torch."""
    r = int(downscale_factor)
    if input.ndim < 3:
        raise ValueError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                         f"{input.ndim} dimension(s)")
    if r <= 0:
        raise ValueError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *lead, c, h, w = input.shape
    for name, axis, size in (("height", -2, h), ("width", -1, w)):
        if size % r:
            raise ValueError(f"pixel_unshuffle expects {name} to be divisible by downscale_factor, but "
                             f"input.size({axis})={size} is not divisible by {r}")
    k = len(lead)
    x = _f.reshape(input, tuple(lead) + (c, h // r, r, w // r, r))
    x = _f.permute(x, list(range(k)) + [k, k + 2, k + 4, k + 1, k + 3])
    return _f.reshape(x, tuple(lead) + (c * r * r, h // r, w // r))


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """Channels (dim 1) as a (groups, C / groups) grid, transposed: (N, C, *) keeps its shape, as torch."""
    g = int(groups)
    if input.ndim < 3:
        raise ValueError(f"channel_shuffle expects input with > 2 dims, but got input with sizes "
                         f"{list(input.shape)}")
    if g <= 0:
        raise ValueError(f"Number of groups to divide channels in must be positive. Value of groups:{g}")
    n, c, *rest = input.shape
    if c % g:
        raise ValueError(f"Number of channels must be divisible by groups. Got {c} channels and {g} groups.")
    x = _f.reshape(input, (n, g, c // g) + tuple(rest))
    return _f.reshape(_f.transpose(x, 1, 2), tuple(input.shape))


# --- sliding blocks: unfold and fold ------------------------------------------------------------------------


Window = tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]
Slices = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def _window(function: str, kernel_size: Any, dilation: Any, padding: Any, stride: Any) -> Window:
    """(kernel_size, dilation, padding, stride) as pairs, checked as torch checks them."""
    k, d = pair_of(kernel_size, "kernel_size", function), pair_of(dilation, "dilation", function)
    p, s = pair_of(padding, "padding", function), pair_of(stride, "stride", function)
    for name, pair, least in (("kernel", k, 1), ("dilation", d, 1), ("stride", s, 1), ("padding", p, 0)):
        if min(pair) < least:
            relation = "greater than zero" if least else "non-negative"
            raise ValueError(f"{function}: {name} should be {relation}, but got {name}_height: {pair[0]} "
                             f"{name}_width: {pair[1]}")
    return k, d, p, s


def _blocks(function: str, size: Sequence[int], window: Window) -> tuple[int, int]:
    """How many sliding blocks fit along the height and the width of a plane of `size`; at least one each."""
    k, d, p, s = window
    oh, ow = ((size[a] + 2 * p[a] - d[a] * (k[a] - 1) - 1) // s[a] + 1 for a in range(2))
    if min(oh, ow) < 1:
        raise ValueError(f"{function}: given spatial size {tuple(size)}, kernel_size={k}, dilation={d}, "
                         f"padding={p}, stride={s}, the array of sliding blocks would be {(oh, ow)}, but its "
                         f"components must be at least one")
    return oh, ow


def _tap_slices(shape: Sequence[int], axis: int, k: int, d: int, s: int, count: int) -> list[Slices]:
    """The slice op's (starts, stops, steps) of each of the k taps along `axis`: count positions, s apart."""
    out = []
    for i in range(k):
        starts, stops, steps = [0] * len(shape), list(shape), [1] * len(shape)
        starts[axis], stops[axis], steps[axis] = i * d, i * d + (count - 1) * s + 1, s
        out.append((tuple(starts), tuple(stops), tuple(steps)))
    return out


def _scatter_taps(taps: Sequence[Tensor], shape: tuple[int, ...], axis: int, k: int, d: int, s: int,
                  count: int) -> Tensor:
    """The sum of the k taps, each written into zeros of `shape` at its strided positions along `axis`."""
    total = None
    for tap, (a, b, c) in zip(taps, _tap_slices(shape, axis, k, d, s, count)):
        placed = apply("slice_scatter", tap, shape=shape, starts=a, stops=b, steps=c)
        total = placed if total is None else _f.add(total, placed)
    return total


def unfold(input: Tensor, kernel_size: int | Sequence[int], dilation: int | Sequence[int] = 1,
           padding: int | Sequence[int] = 0, stride: int | Sequence[int] = 1) -> Tensor:
    """The sliding blocks of (N, C, H, W) or unbatched (C, H, W) input as columns: (N, C * kh * kw, L), channel
    order (c, kh, kw) and blocks in row-major order, as torch (im2col)."""
    from .functional import pad
    window = _window("unfold", kernel_size, dilation, padding, stride)
    if input.ndim not in (3, 4) or 0 in input.shape[-3:]:
        raise ValueError(f"unfold: expected a 3-d or 4-d (batch mode) input with possibly 0 batch size and other "
                         f"non-zero dims, got {list(input.shape)}")
    x = input if input.ndim == 4 else _f.unsqueeze(input, 0)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = window
    oh, ow = _blocks("unfold", x.shape[2:], window)
    if ph or pw:
        x = pad(x, (pw, pw, ph, ph))
    rows = _f.stack([apply("slice", x, starts=a, stops=b, steps=c)
                     for a, b, c in _tap_slices(x.shape, 2, kh, dh, sh, oh)], 2)
    taps = _f.stack([apply("slice", rows, starts=a, stops=b, steps=c)
                     for a, b, c in _tap_slices(rows.shape, 4, kw, dw, sw, ow)], 3)
    out = _f.reshape(taps, (x.shape[0], x.shape[1] * kh * kw, oh * ow))
    return out if input.ndim == 4 else _f.squeeze(out, 0)


def fold(input: Tensor, output_size: int | Sequence[int], kernel_size: int | Sequence[int],
         dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
         stride: int | Sequence[int] = 1) -> Tensor:
    """Columns (N, C * kh * kw, L) or unbatched (C * kh * kw, L) summed into (N, C, H, W) at their sliding blocks'
    places, overlaps added: unfold's adjoint (col2im), as torch."""
    from .functional import pad
    window = _window("fold", kernel_size, dilation, padding, stride)
    size = pair_of(output_size, "output_size", "fold")
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = window
    if input.ndim not in (2, 3) or 0 in input.shape[-2:]:
        raise ValueError(f"fold: expected a 2-d or 3-d (batch mode) input with possibly 0 batch size and non-zero "
                         f"dims, got {list(input.shape)}")
    x = input if input.ndim == 3 else _f.unsqueeze(input, 0)
    n, rows, length = x.shape
    if rows % (kh * kw):
        raise ValueError(f"fold: expected size of input's dimension {input.ndim - 2} to be divisible by the product "
                         f"of kernel_size, but got input.size({input.ndim - 2})={rows} and kernel_size={(kh, kw)}")
    oh, ow = _blocks("fold", size, window)
    if length != oh * ow:
        raise ValueError(f"fold: given output_size={size}, kernel_size={(kh, kw)}, dilation={(dh, dw)}, "
                         f"padding={(ph, pw)}, stride={(sh, sw)}, expected size of input's dimension "
                         f"{input.ndim - 1} to match the calculated number of sliding blocks {oh} * {ow} = "
                         f"{oh * ow}, but got input.size({input.ndim - 1})={length}")
    c, padded = rows // (kh * kw), (size[0] + 2 * ph, size[1] + 2 * pw)
    taps = _f.reshape(x, (n, c, kh, kw, oh, ow))
    rows_placed = _scatter_taps(_f.unbind(taps, 3), (n, c, kh, oh, padded[1]), 4, kw, dw, sw, ow)
    out = _scatter_taps(_f.unbind(rows_placed, 2), (n, c) + padded, 2, kh, dh, sh, oh)
    if ph or pw:
        out = pad(out, (-pw, -pw, -ph, -ph))
    return out if input.ndim == 3 else _f.squeeze(out, 0)


# --- 3-d convolution and pooling ---------------------------------------------------------------------------


def _volume(input: Tensor, function: str) -> Tensor:
    """(N, C, D, H, W) input as given, unbatched (C, D, H, W) input as a batch of one; other ranks raise."""
    if input.ndim not in (4, 5):
        raise ValueError(f"{function}: expected a 4-d (C, D, H, W) or 5-d (N, C, D, H, W) input, got {input.shape}")
    return input if input.ndim == 5 else _f.unsqueeze(input, 0)


def _conv3d_pads(padding: int | Sequence[int] | str, kernel: Sequence[int], stride: tuple[int, ...],
                 dilation: tuple[int, ...]) -> list[tuple[int, int]]:
    """(before, after) padding of depth, height and width; 'same' puts an odd one after, as torch."""
    if not isinstance(padding, str):
        return [(p, p) for p in triple_of(padding, "padding", "conv3d")]
    if padding not in ("valid", "same"):
        raise ValueError(f"conv3d: padding must be 'valid', 'same' or ints, got {padding!r}")
    if padding == "same" and stride != (1, 1, 1):
        raise ValueError("conv3d: padding='same' is not supported for strided convolutions (as torch)")
    totals = [d * (k - 1) if padding == "same" else 0 for d, k in zip(dilation, kernel)]
    return [(t // 2, t - t // 2) for t in totals]


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """3-d cross-correlation of (N, C, D, H, W) or (C, D, H, W) input with a (C_out, C_in/groups, kD, kH, kW) weight,
    as one conv2d per depth tap on the depth slices it reads, folded into the batch (see the module doc)."""
    from .functional import conv2d, pad
    fn = "conv3d"
    s, d = triple_of(stride, "stride", fn), triple_of(dilation, "dilation", fn)
    if weight.ndim != 5:
        raise ValueError(f"{fn}: expected a 5-d (C_out, C_in/groups, kD, kH, kW) weight, got {weight.shape}")
    (bd, ad), (bh, ah), (bw, aw) = _conv3d_pads(padding, weight.shape[2:], s, d)
    x = _f.transpose(_volume(input, fn), 1, 2)
    if bd or ad or ah > bh or aw > bw:
        x = pad(x, (0, aw - bw, 0, ah - bh, 0, 0, bd, ad))
    n, depth, kd = x.shape[0], x.shape[1], weight.shape[2]
    out_d = (depth - d[0] * (kd - 1) - 1) // s[0] + 1
    if out_d < 1:
        raise ValueError(f"{fn}: the kernel's depth extent {d[0] * (kd - 1) + 1} exceeds the padded input depth "
                         f"{depth}")
    total = None
    for tap, (w, (a, b, c)) in enumerate(zip(_f.unbind(weight, 2), _tap_slices(x.shape, 1, kd, d[0], s[0], out_d))):
        planes = _f.reshape(apply("slice", x, starts=a, stops=b, steps=c), (n * out_d,) + tuple(x.shape[2:]))
        y = conv2d(planes, w, bias if tap == 0 else None, s[1:], (bh, bw), d[1:], groups)
        total = y if total is None else _f.add(total, y)
    out = _f.transpose(_f.reshape(total, (n, out_d) + tuple(total.shape[1:])), 1, 2)
    return out if input.ndim == 5 else _f.squeeze(out, 0)


def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                     padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0, groups: int = 1,
                     dilation: int | Sequence[int] = 1) -> Tensor:
    """The adjoint of conv3d in its input, for a (C_in, C_out/groups, kD, kH, kW) weight, as torch: one
    conv_transpose2d per depth tap on the input's depth slices folded into the batch (see the module doc)."""
    fn = "conv_transpose3d"
    s, p = triple_of(stride, "stride", fn), triple_of(padding, "padding", fn)
    op, d = triple_of(output_padding, "output_padding", fn), triple_of(dilation, "dilation", fn)
    if any(o >= max(si, di) for o, si, di in zip(op, s, d)):
        raise ValueError(f"{fn}: output_padding {op} must be smaller than either stride {s} or dilation {d}")
    if weight.ndim != 5:
        raise ValueError(f"{fn}: expected a 5-d (C_in, C_out/groups, kD, kH, kW) weight, got {weight.shape}")
    x = _f.transpose(_volume(input, fn), 1, 2)
    n, depth, kd = x.shape[0], x.shape[1], weight.shape[2]
    planes = _f.reshape(x, (n * depth,) + tuple(x.shape[2:]))
    taps = [conv_transpose2d(planes, w, None, s[1:], p[1:], op[1:], groups, d[1:]) for w in _f.unbind(weight, 2)]
    taps = [_f.reshape(t, (n, depth) + tuple(t.shape[1:])) for t in taps]
    full = (depth - 1) * s[0] + d[0] * (kd - 1) + 1 + op[0]
    if full - 2 * p[0] < 1:
        raise ValueError(f"{fn}: padding {p} leaves no output depth of the {full} the kernel reaches")
    placed = _scatter_taps(taps, (n, full) + tuple(taps[0].shape[2:]), 1, kd, d[0], s[0], depth)
    out = _f.transpose(_f.narrow(placed, 1, p[0], full - 2 * p[0]), 1, 2)
    if bias is not None:
        out = _f.add(out, _f.reshape(bias, (-1, 1, 1, 1)))
    return out if input.ndim == 5 else _f.squeeze(out, 0)


def _pool_volume(input: Tensor, function: str, plane: Any, depth: Any) -> Tensor:
    """A separable pooling of the last three dims as two 2-d ones: `plane` on every depth slice's (H, W) plane, then
    `depth` on a (D, Ho * Wo) plane with a (kD, 1) window; the leading dims are folded into the channels."""
    _volume(input, function)
    lead, (d, h, w) = tuple(input.shape[:-3]), input.shape[-3:]
    rows = math.prod(lead)
    planes = plane(_f.reshape(input, (1, rows * d, h, w)))
    oh, ow = planes.shape[-2:]
    out = depth(_f.reshape(planes, (1, rows, d, oh * ow)))
    return _f.reshape(out, lead + (out.shape[2], oh, ow))


def max_pool3d(input: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    """Max over sliding windows of the last three dims; stride defaults to kernel_size. Each depth slice's window
    maxima first, then theirs over depth: the first maximum in the window's row-major order, as torch."""
    from .functional import max_pool2d
    fn = "max_pool3d"
    if return_indices:
        raise ValueError(f"{fn}: return_indices=True is not supported; supported: False")
    k = triple_of(kernel_size, "kernel_size", fn)
    s = k if stride is None else triple_of(stride, "stride", fn)
    p, d = triple_of(padding, "padding", fn), triple_of(dilation, "dilation", fn)
    return _pool_volume(input, fn, lambda x: max_pool2d(x, k[1:], s[1:], p[1:], d[1:], ceil_mode),
                        lambda x: max_pool2d(x, (k[0], 1), (s[0], 1), (p[0], 0), (d[0], 1), ceil_mode))


def _inside(n: int, count: int, k: int, s: int, p: int) -> np.ndarray:
    """How many of each of `count` windows' taps fall inside an axis of n elements (not in its padding)."""
    starts = np.arange(count) * s - p
    return np.minimum(starts + k, n) - np.maximum(starts, 0)


def avg_pool3d(input: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """Mean over sliding windows of the last three dims; stride defaults to kernel_size. torch's divisor is a product
    over the axes, so the mean is each depth slice's window means averaged over depth; with divisor_override, the
    window sum (the mean of the inside taps times their count) over that divisor."""
    from .functional import avg_pool2d
    fn = "avg_pool3d"
    if divisor_override is not None and int(divisor_override) == 0:
        raise ValueError(f"{fn}: divisor_override must be non-zero")
    k = triple_of(kernel_size, "kernel_size", fn)
    s = k if stride is None else triple_of(stride, "stride", fn)
    p = triple_of(padding, "padding", fn)
    include = count_include_pad and divisor_override is None
    out = _pool_volume(input, fn, lambda x: avg_pool2d(x, k[1:], s[1:], p[1:], ceil_mode, include),
                       lambda x: avg_pool2d(x, (k[0], 1), (s[0], 1), (p[0], 0), ceil_mode, include))
    if divisor_override is None:
        return out
    counts = np.ones(())
    for a in range(3):
        counts = np.multiply.outer(counts, _inside(input.shape[a - 3], out.shape[a - 3], k[a], s[a], p[a]))
    return _f.mul(out, Tensor._wrap((counts / int(divisor_override)).astype(input.dtype.numpy)))


def _volume_size(input: Tensor, output_size: int | Sequence[int | None], function: str) -> tuple[int, ...]:
    """An adaptive pooling's output depth, height and width; a None entry keeps that input dim."""
    size = (output_size,) * 3 if isinstance(output_size, (int, np.integer)) else tuple(output_size)
    if len(size) != 3:
        raise ValueError(f"{function}: output_size expects an int or a triple, got {output_size!r}")
    _volume(input, function)
    return tuple(input.shape[a - 3] if v is None else int(v) for a, v in enumerate(size))


def adaptive_avg_pool3d(input: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    """Average pooling of the last three dims to output_size (a None entry keeps that dim): torch's windows are a
    product over the axes, so each depth slice's (H, W) means, then their means over depth."""
    od, oh, ow = _volume_size(input, output_size, "adaptive_avg_pool3d")
    return _pool_volume(input, "adaptive_avg_pool3d", lambda x: apply("adaptive_avg_pool2d", x, output_size=(oh, ow)),
                        lambda x: apply("adaptive_avg_pool2d", x, output_size=(od, x.shape[-1])))


def adaptive_max_pool3d(input: Tensor, output_size: int | Sequence[int | None],
                        return_indices: bool = False) -> Tensor:
    """Max pooling of the last three dims to output_size (a None entry keeps that dim), torch's windows: one
    max_pool3d when they tile each dim evenly, else maxima per window and dim."""
    if return_indices:
        raise ValueError("adaptive_max_pool3d: return_indices=True is not supported; supported: False")
    size = _volume_size(input, output_size, "adaptive_max_pool3d")
    if all(o > 0 and n % o == 0 for n, o in zip(input.shape[-3:], size)):
        return max_pool3d(input, tuple(n // o for n, o in zip(input.shape[-3:], size)))
    return _adaptive_max(_adaptive_max(_adaptive_max(input, -1, size[2]), -2, size[1]), -3, size[0])
