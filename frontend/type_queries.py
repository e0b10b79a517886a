"""What model code asks about dtypes and tensors: torch.finfo / torch.iinfo (numeric limits, as in masks built
from `torch.finfo(dtype).min`), torch.is_tensor, torch.is_floating_point, torch.numel, and torch.promote_types /
torch.can_cast (defined with the promotion rules).

finfo covers float16 and bfloat16 too: braze computes in neither, but code asks for their limits by name.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from braze.ir.errors import BrazeError
from braze.ir.types import DTYPES, DType, bfloat16, float16, float32, float64

from .promotion import can_cast, promote_types
from .tensor import Tensor

_FLOATS = (float16, bfloat16, float32, float64)
_INTEGERS = tuple(d for d in DTYPES if d.is_integer)


def _names(dtypes: tuple[DType, ...]) -> str:
    return ", ".join(f"braze.{d.numpy_name}" for d in dtypes)


class finfo:  # noqa: N801  (torch's name)
    """The limits of a floating dtype (default float32): bits, eps, max, min, tiny (= smallest_normal),
    resolution and dtype (its name), as torch.finfo gives them."""

    def __init__(self, type: DType | None = None) -> None:
        dtype = float32 if type is None else type
        if not any(dtype is d for d in _FLOATS):
            raise BrazeError(f"finfo: type must be a floating dtype ({_names(_FLOATS)}), got {dtype!r}; use "
                             f"braze.iinfo for integer dtypes")
        # bfloat16 is float32's exponent with 8 significand bits, a format numpy lacks
        info = np.finfo(np.float32 if dtype is bfloat16 else dtype.numpy)
        self.bits = dtype.bits
        self.eps = 2.0 ** -7 if dtype is bfloat16 else float(info.eps)
        self.max = float(np.float32(3.3895313892515355e38)) if dtype is bfloat16 else float(info.max)
        self.min = -self.max
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 0.01 if dtype is bfloat16 else float(info.resolution)
        self.dtype = dtype.numpy_name

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:  # noqa: N801  (torch's name)
    """The limits of an integer dtype: bits, max, min and dtype (its name), as torch.iinfo gives them."""

    def __init__(self, type: DType) -> None:
        if not any(type is d for d in _INTEGERS):
            raise BrazeError(f"iinfo: type must be an integer dtype ({_names(_INTEGERS)}), got {type!r}")
        info = np.iinfo(type.numpy)
        self.bits, self.max, self.min, self.dtype = type.bits, int(info.max), int(info.min), type.numpy_name

    def __repr__(self) -> str:
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"


def is_tensor(obj: Any) -> bool:
    """Whether obj is a braze Tensor or stands for one (a Param, through __braze_tensor__), as torch counts an
    nn.Parameter."""
    return isinstance(obj, Tensor) or hasattr(type(obj), "__braze_tensor__")


def is_floating_point(input: Tensor) -> bool:
    """Whether the tensor's dtype is a floating type."""
    if not is_tensor(input):
        raise BrazeError(f"is_floating_point: argument 'input' must be a Tensor, got {type(input).__name__}")
    return input.dtype.is_float


def numel(input: Tensor) -> int:
    """The number of elements of the tensor."""
    if not is_tensor(input):
        raise BrazeError(f"numel: argument 'input' must be a Tensor, got {type(input).__name__}")
    return input.numel()


__all__ = ["finfo", "iinfo", "is_tensor", "is_floating_point", "numel", "promote_types", "can_cast"]
