"""MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool1d/2d, AdaptiveMaxPool1d/2d and LPPool1d/2d, as torch.nn's (arguments,
defaults and repr)."""
from __future__ import annotations

from typing import Any, Sequence

from .. import functional as F
from ..module import Module
from .conv import ntuple

Size = int | Sequence[int]


class MaxPool2d(Module):
    """Max over kernel_size windows of the last two dims; stride defaults to kernel_size."""

    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0, dilation: Size = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        if return_indices:
            raise ValueError("MaxPool2d: return_indices=True is not supported")
        self.kernel_size, self.padding, self.dilation = kernel_size, padding, dilation
        self.stride = stride if stride is not None else kernel_size
        self.return_indices, self.ceil_mode = False, bool(ceil_mode)

    def forward(self, input: Any) -> Any:
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """Mean over kernel_size windows of the last two dims; stride defaults to kernel_size."""

    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        super().__init__()
        if divisor_override is not None:
            raise ValueError("AvgPool2d: divisor_override is not supported")
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = stride if stride is not None else kernel_size
        self.ceil_mode, self.count_include_pad, self.divisor_override = bool(ceil_mode), bool(count_include_pad), None

    def forward(self, input: Any) -> Any:
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

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

    def forward(self, input: Any) -> Any:
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)


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


__all__ = ["MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "LPPool1d", "LPPool2d"]
