"""torch.nn.functional's group_norm, instance_norm, rms_norm, normalize and local_response_norm, composed from
registered ops.

group_norm and instance_norm reshape (N, C, *) to (N, G, C/G * prod(*)) and normalize each group's row with the
layer_norm op, so they run on its fused row kernel; the per-channel affine is one broadcast multiply-add.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import functions as _f
from ..dispatch import apply
from ..tensor import Tensor
from .param import Param

__all__ = ["group_norm", "instance_norm", "rms_norm", "normalize", "local_response_norm"]


def store_in_place(target: Any, value: Tensor) -> None:
    """Write a new value into `target`: a Param (a layer's buffer or weight) through assign, a tensor in place."""
    if isinstance(target, Param):
        target.assign(value)
    else:
        target.copy_(value)


def _per_channel(t: Tensor, rank: int) -> Tensor:
    return _f.reshape(t, (-1,) + (1,) * (rank - 2))


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    if weight is not None:
        y = _f.mul(y, _per_channel(weight, y.ndim))
    return y if bias is None else _f.add(y, _per_channel(bias, y.ndim))


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalize each sample's channels in num_groups groups (statistics over the group's channels and all
    spatial positions), then scale and shift per channel."""
    if input.ndim < 2:
        raise ValueError(f"group_norm: expected an input of shape (N, C, *), got {input.shape}")
    n, c = input.shape[0], input.shape[1]
    if num_groups <= 0 or c % num_groups:
        raise ValueError(f"group_norm: num_channels ({c}) must be divisible by num_groups ({num_groups})")
    rows = _f.reshape(input, (n, num_groups, -1))
    y = apply("layer_norm", rows, normalized_shape=(rows.shape[-1],), eps=eps)
    return _affine(_f.reshape(y, input.shape), weight, bias)


def instance_norm(input: Tensor, running_mean: Any = None, running_var: Any = None, weight: Tensor | None = None,
                  bias: Tensor | None = None, use_input_stats: bool = True, momentum: float = 0.1,
                  eps: float = 1e-5) -> Tensor:
    """Normalize each sample's channels separately over their spatial positions (input statistics only)."""
    if running_mean is not None or running_var is not None or not use_input_stats:
        raise ValueError("instance_norm: running statistics are not supported; supported: running_mean=None, "
                         "running_var=None, use_input_stats=True (track_running_stats=False)")
    return group_norm(input, input.shape[1], weight, bias, eps)


def rms_norm(input: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """input / sqrt(mean(input**2) + eps) over the trailing normalized_shape dims, times weight; eps=None is
    the input dtype's machine epsilon, as torch."""
    shape = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    if len(shape) > input.ndim or tuple(input.shape[input.ndim - len(shape):]) != shape:
        raise ValueError(f"rms_norm: normalized_shape {list(shape)} does not match the trailing dims of input "
                         f"{input.shape}")
    eps = float(np.finfo(input.dtype.numpy).eps) if eps is None else eps
    axes = tuple(range(input.ndim - len(shape), input.ndim))
    y = _f.mul(input, _f.rsqrt(_f.add(_f.mean(_f.mul(input, input), axes, keepdim=True), eps)))
    return y if weight is None else _f.mul(y, weight)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Any = None) -> Tensor:
    """input / max(||input||_p, eps) along dim."""
    if out is not None:
        raise ValueError("normalize: out= is not supported; supported: out=None")
    if p <= 0:
        raise ValueError(f"normalize: p must be positive, got {p}")
    magnitude = _f.abs(input)
    if p == 2.0:
        norm = _f.sqrt(_f.sum(_f.mul(input, input), dim, keepdim=True))
    elif p == 1.0:
        norm = _f.sum(magnitude, dim, keepdim=True)
    else:
        norm = _f.pow(_f.sum(_f.pow(magnitude, p), dim, keepdim=True), 1.0 / p)
    return _f.div(input, _f.clamp(norm, min=eps))


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> Tensor:
    """input / (k + alpha * mean of squares over `size` neighbouring channels) ** beta, on (N, C, *) input.

    The squares are laid out as a (N, 1, C, positions) plane, zero-padded along C as torch pads them, and averaged by
    a (size, 1) window.
    """
    from .functional import avg_pool2d, pad
    if input.ndim < 3:
        raise ValueError(f"local_response_norm: expected 3D or higher dimensionality input (got {input.ndim} "
                         f"dimensions)")
    if input.numel() == 0:
        return input
    squares = _f.reshape(_f.mul(input, input), (input.shape[0], 1, input.shape[1], -1))
    window = avg_pool2d(pad(squares, (0, 0, size // 2, (size - 1) // 2)), (size, 1), stride=1)
    return _f.div(input, _f.pow(_f.add(_f.mul(_f.reshape(window, input.shape), alpha), k), beta))
