"""Layers over F's sampling functions (functional_sampling.py), as torch.nn's: MaxUnpool1d and MaxUnpool2d."""
from __future__ import annotations

from typing import Any, Sequence

from .. import functional as F
from ..module import Module
from .conv import ntuple

Size = int | Sequence[int]


class _MaxUnpool(Module):
    """The partial inverse of max pooling over `_rank` trailing dims: values put back at the indices the pooling
    returned; kernel_size, stride and padding kept as tuples, as torch."""

    _rank = 0

    def __init__(self, kernel_size: Size, stride: Size | None = None, padding: Size = 0) -> None:
        super().__init__()
        self.kernel_size = ntuple(kernel_size, self._rank, "kernel_size")
        self.stride = ntuple(stride if stride is not None else kernel_size, self._rank, "stride")
        self.padding = ntuple(padding, self._rank, "padding")

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpool):
    """The partial inverse of MaxPool1d: (N, C, L) values at the indices it returned, zeros elsewhere."""

    _rank = 1

    def forward(self, input: Any, indices: Any, output_size: Sequence[int] | None = None) -> Any:
        return F.max_unpool1d(input, indices, self.kernel_size, self.stride, self.padding, output_size)


class MaxUnpool2d(_MaxUnpool):
    """The partial inverse of MaxPool2d: (N, C, H, W) values at the indices it returned, zeros elsewhere."""

    _rank = 2

    def forward(self, input: Any, indices: Any, output_size: Sequence[int] | None = None) -> Any:
        return F.max_unpool2d(input, indices, self.kernel_size, self.stride, self.padding, output_size)


__all__ = ["MaxUnpool1d", "MaxUnpool2d"]
