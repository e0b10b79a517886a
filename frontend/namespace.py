"""torch's dtype and memory-format names in the braze namespace (`braze.long`, `braze.float`, `braze.half`, ...).

The aliases are the braze DTypes under torch's spellings, so `x.dtype == braze.long` holds for an int64 tensor.
float16/half/bfloat16 name storage types only: using one as a tensor dtype raises a DTypeError saying so. This
module defines names and the memory-format check (`int`, `float` and `bool` shadow the builtins here, so nothing below
them may use those builtins).
"""
from __future__ import annotations

from braze.ir.errors import BrazeError
from braze.ir.types import bfloat16, bool_, float16, float32, float64, int8, int32, int64, uint8


class MemoryFormat:
    """A torch memory format name; braze tensors are always contiguous, so only preserve and contiguous apply."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"braze.{self.name}"


preserve_format = MemoryFormat("preserve_format")
contiguous_format = MemoryFormat("contiguous_format")
channels_last = MemoryFormat("channels_last")
SUPPORTED_MEMORY_FORMATS = (preserve_format, contiguous_format)


def check_memory_format(function: str, memory_format: object) -> None:
    """Raise a BrazeError naming `function` unless memory_format is one braze's contiguous tensors can honour."""
    if not any(memory_format is f for f in SUPPORTED_MEMORY_FORMATS):
        raise BrazeError(f"{function}(): memory_format={memory_format!r} is not supported; braze tensors are "
                         f"contiguous, so memory_format must be braze.preserve_format or braze.contiguous_format")

long, int, double, half = int64, int32, float64, float16
float = float32
bool = bool_

__all__ = ["long", "int", "float", "double", "half", "bool", "uint8", "int8", "int32", "int64", "float16", "float32",
           "float64", "bfloat16", "MemoryFormat", "preserve_format", "contiguous_format", "channels_last"]
