"""Padding, resizing and rearranging layers: the 1-d, 2-d and 3-d Zero, Constant, Reflection, Replication and
Circular padding layers, Upsample and its UpsamplingNearest2d and UpsamplingBilinear2d forms, PixelShuffle,
PixelUnshuffle, ChannelShuffle, Unfold and Fold, as torch.nn's."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import functional as F
from ..module import Module


def _sides(padding: int | Sequence[int], count: int, name: str) -> tuple[int, ...]:
    """`count` padding amounts ((left, right) of the last dim, then (top, bottom), ...) from an int or a tuple."""
    if isinstance(padding, (int, np.integer)):
        return (int(padding),) * count
    values = tuple(int(p) for p in padding)
    if len(values) != count:
        raise ValueError(f"{name}: padding expects an int or {count} values, got {padding!r}")
    return values


class _Pad(Module):
    """Pad the last `_dims` dims by `padding` in F.pad's `_mode`, one that repeats the input's own values: the
    padded dims come with a channel dim and an optional batch dim, as torch requires."""

    _mode = ""
    _dims = 1

    def __init__(self, padding: int | Sequence[int]) -> None:
        super().__init__()
        self.padding = _sides(padding, 2 * self._dims, type(self).__name__)

    def forward(self, input: Any) -> Any:
        if input.ndim not in (self._dims + 1, self._dims + 2):
            raise ValueError(f"expected {self._dims + 1}D or {self._dims + 2}D input (got {input.ndim}D input)")
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPad(_Pad):
    """Pad with `value` (kept as given, as torch shows it), inputs of any rank that has the padded dims."""

    def __init__(self, padding: int | Sequence[int], value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Any) -> Any:
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class _Zeros:
    """The zero-padding form of a constant padding layer: value 0.0, and only the padding in its repr."""

    def __init__(self, padding: int | Sequence[int]) -> None:
        super().__init__(padding, 0.0)  # type: ignore[call-arg]

    extra_repr = _Pad.extra_repr


class ConstantPad1d(_ConstantPad):
    """Pad the last dim by (left, right) with `value`."""


class ConstantPad2d(_ConstantPad):
    """Pad the last two dims by (left, right, top, bottom) with `value`."""

    _dims = 2


class ConstantPad3d(_ConstantPad):
    """Pad the last three dims by (left, right, top, bottom, front, back) with `value`."""

    _dims = 3


class ZeroPad1d(_Zeros, ConstantPad1d):
    """Pad the last dim by (left, right) with zeros."""


class ZeroPad2d(_Zeros, ConstantPad2d):
    """Pad the last two dims by (left, right, top, bottom) with zeros."""


class ZeroPad3d(_Zeros, ConstantPad3d):
    """Pad the last three dims by (left, right, top, bottom, front, back) with zeros."""


class _ReflectionPad(_Pad):
    """Pad with the input mirrored about its edge elements."""

    _mode = "reflect"


class ReflectionPad1d(_ReflectionPad):
    """Reflection padding of the last dim by (left, right)."""


class ReflectionPad2d(_ReflectionPad):
    """Reflection padding of the last two dims by (left, right, top, bottom)."""

    _dims = 2


class ReflectionPad3d(_ReflectionPad):
    """Reflection padding of the last three dims by (left, right, top, bottom, front, back)."""

    _dims = 3


class _ReplicationPad(_Pad):
    """Pad by repeating the edge elements."""

    _mode = "replicate"


class ReplicationPad1d(_ReplicationPad):
    """Replication padding of the last dim by (left, right)."""


class ReplicationPad2d(_ReplicationPad):
    """Replication padding of the last two dims by (left, right, top, bottom)."""

    _dims = 2


class ReplicationPad3d(_ReplicationPad):
    """Replication padding of the last three dims by (left, right, top, bottom, front, back)."""

    _dims = 3


class _CircularPad(_Pad):
    """Pad with the input wrapped around: the elements of the other end."""

    _mode = "circular"


class CircularPad1d(_CircularPad):
    """Circular padding of the last dim by (left, right)."""


class CircularPad2d(_CircularPad):
    """Circular padding of the last two dims by (left, right, top, bottom)."""

    _dims = 2


class CircularPad3d(_CircularPad):
    """Circular padding of the last three dims by (left, right, top, bottom, front, back)."""

    _dims = 3


class Upsample(Module):
    """F.interpolate with the module's size or scale_factor (kept as floats, as torch), mode and align_corners."""

    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: bool | None = None, recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        if mode not in F.INTERPOLATE_MODES:
            raise ValueError(f"{type(self).__name__}: mode={mode!r} is not supported; supported: "
                             f"{', '.join(repr(m) for m in F.INTERPOLATE_MODES)}")
        self.name, self.size, self.mode = type(self).__name__, size, mode
        if isinstance(scale_factor, tuple):
            self.scale_factor: Any = tuple(float(factor) for factor in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input: Any) -> Any:
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self) -> str:
        shown = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return f"{shown}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """Nearest-neighbour upsampling of (N, C, H, W) input to `size` or by `scale_factor`."""

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear upsampling of (N, C, H, W) input to `size` or by `scale_factor`, with aligned corners (as torch's
    layer, unlike F.interpolate's default)."""

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


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


__all__ = ["ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ReflectionPad1d",
           "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d",
           "CircularPad1d", "CircularPad2d", "CircularPad3d", "Upsample", "UpsamplingNearest2d",
           "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle", "ChannelShuffle", "Unfold", "Fold"]
