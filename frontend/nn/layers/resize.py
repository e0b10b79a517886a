"""Padding, resizing and rearranging layers: ZeroPad2d, ConstantPad2d, ReflectionPad2d, ReplicationPad2d, Upsample,
PixelShuffle, PixelUnshuffle, ChannelShuffle, Unfold and Fold, as torch.nn's."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import functional as F
from ..module import Module


def _four(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """(left, right, top, bottom) from an int or a 4-tuple."""
    if isinstance(padding, (int, np.integer)):
        return (int(padding),) * 4  # type: ignore[return-value]
    values = tuple(int(p) for p in padding)
    if len(values) != 4:
        raise ValueError(f"padding expects an int or (left, right, top, bottom), got {padding!r}")
    return values  # type: ignore[return-value]


class _Pad2d(Module):
    """Pad the last two dims by (left, right, top, bottom) in one of F.pad's modes."""

    _mode = "constant"

    def __init__(self, padding: int | Sequence[int]) -> None:
        super().__init__()
        self.padding = _four(padding)
        self.value = 0.0

    def forward(self, input: Any) -> Any:
        return F.pad(input, self.padding, self._mode, self.value if self._mode == "constant" else None)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ConstantPad2d(_Pad2d):
    """Pad with `value`."""

    def __init__(self, padding: int | Sequence[int], value: float) -> None:
        super().__init__(padding)
        self.value = float(value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ZeroPad2d(_Pad2d):
    """Pad with zeros."""


class ReflectionPad2d(_Pad2d):
    """Pad with the input mirrored about its edge elements."""

    _mode = "reflect"


class ReplicationPad2d(_Pad2d):
    """Pad by repeating the edge elements."""

    _mode = "replicate"


class Upsample(Module):
    """F.interpolate with the module's size or scale_factor, mode and align_corners."""

    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: bool | None = None, recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        if mode not in F.INTERPOLATE_MODES:
            raise ValueError(f"Upsample: mode={mode!r} is not supported; supported: "
                             f"{', '.join(repr(m) for m in F.INTERPOLATE_MODES)}")
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input: Any) -> Any:
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self) -> str:
        shown = f"size={self.size}" if self.size is not None else f"scale_factor={float(self.scale_factor)}"
        return f"{shown}, mode={self.mode!r}"


class PixelShuffle(Module):
    """(*, C * r**2, H, W) to (*, C, H * r, W * r)."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = int(upscale_factor)

    def forward(self, input: Any) -> Any:
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H * r, W * r) to (*, C * r**2, H, W), the inverse of PixelShuffle."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = int(downscale_factor)

    def forward(self, input: Any) -> Any:
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class ChannelShuffle(Module):
    """Interleave the channels of `groups` groups: (N, C, *) keeps its shape."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = int(groups)

    def forward(self, input: Any) -> Any:
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"


class Unfold(Module):
    """F.unfold: the sliding blocks of (N, C, H, W) input as columns (N, C * kh * kw, L)."""

    def __init__(self, kernel_size: int | Sequence[int], dilation: int | Sequence[int] = 1,
                 padding: int | Sequence[int] = 0, stride: int | Sequence[int] = 1) -> None:
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input: Any) -> Any:
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, "
                f"stride={self.stride}")


class Fold(Module):
    """F.fold: columns (N, C * kh * kw, L) summed into (N, C, *output_size), overlaps added."""

    def __init__(self, output_size: int | Sequence[int], kernel_size: int | Sequence[int],
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                 stride: int | Sequence[int] = 1) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input: Any) -> Any:
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


__all__ = ["ZeroPad2d", "ConstantPad2d", "ReflectionPad2d", "ReplicationPad2d", "Upsample", "PixelShuffle",
           "PixelUnshuffle", "ChannelShuffle", "Unfold", "Fold"]
