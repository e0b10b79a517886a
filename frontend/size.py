"""Size: a tensor's shape as torch.Size, a tuple of ints with numel() and torch's repr."""
from __future__ import annotations

import math
from typing import Any


class Size(tuple):
    """The dims of a tensor; equal to the plain tuple of the same ints, and slices of it are Sizes again."""

    __slots__ = ()

    def __new__(cls, sizes: Any = ()) -> Size:
        return super().__new__(cls, (int(s) for s in sizes))

    @staticmethod
    def of(shape: tuple[int, ...]) -> Size:
        """A Size over a shape that already holds ints (numpy's), without converting each dim."""
        return tuple.__new__(Size, shape)

    def numel(self) -> int:
        """The number of elements a tensor of this shape holds."""
        return math.prod(self)

    def __getitem__(self, index: Any) -> Any:
        item = tuple.__getitem__(self, index)
        return Size(item) if isinstance(index, slice) else item

    def __add__(self, other: Any) -> Any:
        return Size(tuple(self) + other) if isinstance(other, tuple) else NotImplemented

    def __repr__(self) -> str:
        return f"braze.Size({list(self)})"
