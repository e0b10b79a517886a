"""Conv2d, as torch.nn.Conv2d: parameters, default initialization, padding modes and repr."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ... import functions as _f
from ...tensor import Tensor
from .. import functional as F
from ..module import Module
from ._init import fan_in_bound, float_dtype, lazy, uniform

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def pair(value: int | Sequence[int], name: str) -> tuple[int, int]:
    """An int or a pair of ints as a pair (torch's _pair)."""
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    out = tuple(int(v) for v in value)
    if len(out) != 2:
        raise ValueError(f"{name} expects an int or a pair of ints, got {value!r}")
    return out  # type: ignore[return-value]


def _source_indices(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """For each position of a dim padded by (before, after) in `mode`, the input position it copies."""
    if mode in ("reflect", "circular") and max(before, after) > size - (mode == "reflect"):
        raise ValueError(f"Conv2d: {mode} padding of ({before}, {after}) is too large for a dimension of size {size}")
    i = np.arange(-before, size + after)
    if mode == "replicate":
        return np.clip(i, 0, size - 1)
    if mode == "circular":
        return i % size
    return np.where(i < 0, -i, np.where(i >= size, 2 * (size - 1) - i, i))  # reflect: mirror without the edge


def pad_by_mode(input: Any, pads: tuple[tuple[int, int], tuple[int, int]], mode: str) -> Any:
    """Pad the last two dims by ((top, bottom), (left, right)) copying input elements (reflect, replicate,
    circular); done with index_select on the input so the gradient flows back to the copied elements."""
    out = input
    for axis, (before, after) in zip((-2, -1), pads):
        if before or after:
            idx = _source_indices(input.shape[axis], before, after, mode)
            out = _f.index_select(out, out.ndim + axis, Tensor._wrap(idx.astype(np.int64)))
    return out


class Conv2d(Module):
    """2-d convolution over (N, C, H, W) or (C, H, W) input with torch's arguments, names and initialization.

    weight (out_channels, in_channels // groups, kh, kw) ~ U(-b, b) with b = 1/sqrt(fan_in) and fan_in =
    in_channels // groups * kh * kw (torch's kaiming_uniform with a=sqrt(5)); bias ~ U(-b, b).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
                 dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {list(_PADDING_MODES)}, "
                             f"but got padding_mode='{padding_mode}'")
        self.in_channels, self.out_channels, self.groups = int(in_channels), int(out_channels), int(groups)
        self.kernel_size, self.stride = pair(kernel_size, "kernel_size"), pair(stride, "stride")
        self.dilation, self.padding_mode = pair(dilation, "dilation"), padding_mode
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
            if padding == "same" and self.stride != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding: tuple[int, int] | str = padding
        else:
            self.padding = pair(padding, "padding")
        d = float_dtype(dtype, "Conv2d")
        fan_in = self.in_channels // self.groups * math.prod(self.kernel_size)
        bound = fan_in_bound(fan_in)
        shape = (self.out_channels, self.in_channels // self.groups) + self.kernel_size
        self.weight = lazy(shape, uniform(bound), d, device)
        self.register_parameter("bias", lazy((self.out_channels,), uniform(bound), d, device) if bias else None)

    def _mode_pads(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(before, after) per spatial dim for a non-zero padding mode ('same' puts the odd one after)."""
        if self.padding == "valid":
            return (0, 0), (0, 0)
        if self.padding == "same":
            totals = [self.dilation[a] * (self.kernel_size[a] - 1) for a in range(2)]
            return (totals[0] // 2, totals[0] - totals[0] // 2), (totals[1] // 2, totals[1] - totals[1] // 2)
        return (self.padding[0], self.padding[0]), (self.padding[1], self.padding[1])  # type: ignore[index]

    def forward(self, input: Any) -> Any:
        if self.padding_mode == "zeros":
            return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        padded = pad_by_mode(input, self._mode_pads(), self.padding_mode)
        return F.conv2d(padded, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if isinstance(self.padding, str) or self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


__all__ = ["Conv2d"]
