"""MaxPool1d/2d/3d, AvgPool1d/2d/3d, AdaptiveAvgPool1d/2d/3d, AdaptiveMaxPool1d/2d/3d and LPPool1d/2d, as torch.nn's
(arguments, defaults and repr)."""
from __future__ import annotations

from typing import Any, Sequence

from .. import functional as F
from ..module import Module
from .conv import ntuple

Size = int | Sequence[int]


class MaxPool2d(Module):
    """Max over kernel_size windows of the last two dims (with F.<_function>); stride defaults to kernel_size. With
    return_indices, (values, indices) as max_unpool takes them, where `_indices` (not 3-d yet)."""

    _function, _indices = "max_pool2d", True

    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0, dilation: Size = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        if return_indices and not self._indices:
            raise ValueError(f"{type(self).__name__}: return_indices=True is not supported")
        self.kernel_size, self.padding, self.dilation = kernel_size, padding, dilation
        self.stride = stride if stride is not None else kernel_size
        self.return_indices, self.ceil_mode = bool(return_indices), bool(ceil_mode)

    def forward(self, input: Any) -> Any:
        return getattr(F, self._function)(input, self.kernel_size, self.stride, self.padding, self.dilation,
                                          self.ceil_mode, self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """Mean over kernel_size windows of the last two dims (with F.<_function>, which takes a divisor_override when
    `_overridable`); stride defaults to kernel_size."""

    _function, _overridable = "avg_pool2d", False

    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        super().__init__()
        if divisor_override is not None and not self._overridable:
            raise ValueError(f"{type(self).__name__}: divisor_override is not supported")
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = stride if stride is not None else kernel_size
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)
        self.divisor_override = divisor_override

    def forward(self, input: Any) -> Any:
        return getattr(F, self._function)(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                          self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _AdaptivePool(Module):
    """Pooling to `output_size` with F.<_function>."""

    _function = ""

    def __init__(self, output_size: int | Sequence[int | None]) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Any) -> Any:
        return getattr(F, self._function)(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(_AdaptivePool):
    """Average pooling of the last two dims to `output_size` (an int, or a pair whose None keeps a dim)."""

    _function = "adaptive_avg_pool2d"


class MaxPool1d(MaxPool2d):
    """Max over kernel_size windows of the last dim; stride defaults to kernel_size."""

    _function = "max_pool1d"


class MaxPool3d(MaxPool2d):
    """Max over kernel_size windows of the last three dims of (N, C, D, H, W) or (C, D, H, W) input; stride defaults
    to kernel_size."""

    _function, _indices = "max_pool3d", False


class AvgPool3d(AvgPool2d):
    """Mean over kernel_size windows of the last three dims of (N, C, D, H, W) or (C, D, H, W) input; stride defaults
    to kernel_size."""

    _function, _overridable = "avg_pool3d", True


class AvgPool1d(Module):
    """Mean over kernel_size windows of the last dim; stride defaults to kernel_size."""

    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = stride if stride is not None else kernel_size
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)

    def forward(self, input: Any) -> Any:
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        shown = [ntuple(v, 1, name) for v, name in ((self.kernel_size, "kernel_size"), (self.stride, "stride"),
                                                     (self.padding, "padding"))]
        return f"kernel_size={shown[0]}, stride={shown[1]}, padding={shown[2]}"


class AdaptiveAvgPool1d(_AdaptivePool):
    """Average pooling of the last dim to `output_size`."""

    _function = "adaptive_avg_pool1d"


class AdaptiveAvgPool3d(_AdaptivePool):
    """Average pooling of the last three dims to `output_size` (an int, or a triple whose None keeps a dim)."""

    _function = "adaptive_avg_pool3d"


class _AdaptiveMaxPool(_AdaptivePool):
    """Max pooling to `output_size`; the indices of the maxima (return_indices=True) are not supported."""

    def __init__(self, output_size: int | Sequence[int | None], return_indices: bool = False) -> None:
        super().__init__(output_size)
        if return_indices:
            raise ValueError(f"{type(self).__name__}: return_indices=True is not supported; supported: False")
        self.return_indices = False


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    """Max pooling of the last two dims to `output_size` (an int, or a pair whose None keeps a dim)."""

    _function = "adaptive_max_pool2d"


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    """Max pooling of the last dim of (N, C, L) or (C, L) input to `output_size`."""

    _function = "adaptive_max_pool1d"


class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    """Max pooling of the last three dims to `output_size` (an int, or a triple whose None keeps a dim)."""

    _function = "adaptive_max_pool3d"


class _LPPool(Module):
    """Power-average pooling with F.<_function>: (sum of x**norm_type over each window) ** (1 / norm_type); stride
    defaults to kernel_size."""

    _function = ""

    def __init__(self, norm_type: float, kernel_size: Size, stride: Size | None = None,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def forward(self, input: Any) -> Any:
        return getattr(F, self._function)(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPool):
    """Power-average pooling over windows of the last dim."""

    _function = "lp_pool1d"


class LPPool2d(_LPPool):
    """Power-average pooling over windows of the last two dims."""

    _function = "lp_pool2d"


__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
           "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
           "LPPool1d", "LPPool2d"]
