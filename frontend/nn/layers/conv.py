"""Conv1d/2d/3d and ConvTranspose1d/2d/3d, as torch.nn's: parameters, default initialization, padding modes and
repr."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .. import functional as F
from ..module import Module
from ._init import fan_in_bound, float_dtype, lazy, uniform

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def ntuple(value: int | Sequence[int], rank: int, name: str) -> tuple[int, ...]:
    """An int repeated `rank` times, or a tuple of `rank` ints (torch's _single/_pair)."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * rank
    out = tuple(int(v) for v in value)
    if len(out) != rank:
        raise ValueError(f"{name} expects an int or {rank} ints, got {value!r}")
    return out


class _ConvNd(Module):
    """What the convolutions share: argument checks, the weight and bias with torch's initialization, repr.

    weight ~ U(-b, b) with b = 1/sqrt(fan_in), fan_in = weight.shape[1] * prod(kernel_size) (torch's
    kaiming_uniform with a=sqrt(5)); bias ~ U(-b, b).
    """

    _rank = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int], padding: int | Sequence[int] | str, dilation: int | Sequence[int],
                 groups: int, bias: bool, padding_mode: str, device: Any, dtype: Any) -> None:
        super().__init__()
        name, rank = type(self).__name__, self._rank
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
        self.kernel_size, self.stride = ntuple(kernel_size, rank, "kernel_size"), ntuple(stride, rank, "stride")
        self.dilation, self.padding_mode = ntuple(dilation, rank, "dilation"), padding_mode
        if isinstance(padding, str):
            if padding not in ("same", "valid") or self._transposed:
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
            if padding == "same" and self.stride != (1,) * rank:
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding: tuple[int, ...] | str = padding
        else:
            self.padding = ntuple(padding, rank, "padding")
        d = float_dtype(dtype, name)
        channels = (self.in_channels, self.out_channels // self.groups) if self._transposed else \
            (self.out_channels, self.in_channels // self.groups)
        bound = fan_in_bound(channels[1] * math.prod(self.kernel_size))
        self.weight = lazy(channels + self.kernel_size, uniform(bound), d, device)
        self.register_parameter("bias", lazy((self.out_channels,), uniform(bound), d, device) if bias else None)

    def extra_repr(self) -> str:
        ones, zeros = (1,) * self._rank, (0,) * self._rank
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if isinstance(self.padding, str) or self.padding != zeros:
            s += f", padding={self.padding}"
        if self.dilation != ones:
            s += f", dilation={self.dilation}"
        if getattr(self, "output_padding", zeros) != zeros:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    """A convolution whose padding may copy input elements (reflect, replicate, circular) instead of zeros."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
                 dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)

    def _mode_pads(self) -> list[int]:
        """F.pad's (before, after) pairs, last dim first, for a non-zero padding mode ('same': odd one after)."""
        if self.padding == "valid":
            return [0] * (2 * self._rank)
        pads: list[int] = []
        for a in reversed(range(self._rank)):
            if self.padding == "same":
                total = self.dilation[a] * (self.kernel_size[a] - 1)
                pads += [total // 2, total - total // 2]
            else:
                pads += [self.padding[a]] * 2  # type: ignore[index]
        return pads

    def forward(self, input: Any) -> Any:
        conv = getattr(F, f"conv{self._rank}d")
        if self.padding_mode != "zeros":
            input = F.pad(input, self._mode_pads(), self.padding_mode)
        padding = self.padding if self.padding_mode == "zeros" else 0
        return conv(input, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class Conv1d(_Conv):
    """1-d convolution over (N, C, L) or (C, L) input; weight (out_channels, in_channels // groups, k)."""

    _rank = 1


class Conv2d(_Conv):
    """2-d convolution over (N, C, H, W) or (C, H, W) input; weight (out_channels, in_channels // groups, kh, kw)."""


class Conv3d(_Conv):
    """3-d convolution over (N, C, D, H, W) or (C, D, H, W) input; weight (out_channels, in_channels // groups, kd, kh,
    kw)."""

    _rank = 3


class _ConvTranspose(_ConvNd):
    """A transposed convolution (the adjoint of the convolution in its input); weight
    (in_channels, out_channels // groups, *kernel_size). Only zeros padding, as torch."""

    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                 output_padding: int | Sequence[int] = 0, groups: int = 1, bias: bool = True,
                 dilation: int | Sequence[int] = 1, padding_mode: str = "zeros", device: Any = None,
                 dtype: Any = None) -> None:
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)
        self.output_padding = ntuple(output_padding, self._rank, "output_padding")

    def forward(self, input: Any, output_size: Any = None) -> Any:
        if output_size is not None:
            raise ValueError(f"{type(self).__name__}.forward: output_size is not supported; supported: None "
                             f"(set output_padding instead)")
        fn = getattr(F, f"conv_transpose{self._rank}d")
        return fn(input, self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups,
                  self.dilation)


class ConvTranspose1d(_ConvTranspose):
    """Transposed 1-d convolution over (N, C, L) or (C, L) input."""

    _rank = 1


class ConvTranspose2d(_ConvTranspose):
    """Transposed 2-d convolution over (N, C, H, W) or (C, H, W) input."""


class ConvTranspose3d(_ConvTranspose):
    """Transposed 3-d convolution over (N, C, D, H, W) or (C, D, H, W) input."""

    _rank = 3


__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]
