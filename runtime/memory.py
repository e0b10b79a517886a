"""64-byte-aligned numpy buffers: what the runtime hands to compiled code.

Compiled kernels may use aligned vector loads on buffers the runtime allocates (weights, the arena, scratch,
staged inputs and outputs), so every such buffer starts on a 64-byte boundary (a cache line, and the width of an
AVX-512 register). numpy itself guarantees only 16 bytes: these functions over-allocate a byte block and return a
view that starts at the first aligned address. The view keeps its block alive through `.base`.
"""
from __future__ import annotations

from math import prod
from typing import Sequence

import numpy as np

ALIGNMENT = 64


def address(array: np.ndarray) -> int:
    """The address of an array's first element."""
    return int(array.__array_interface__["data"][0])


def is_aligned(array: np.ndarray, alignment: int = ALIGNMENT) -> bool:
    """Whether the array's data starts on an `alignment`-byte boundary."""
    return address(array) % alignment == 0


def aligned_empty(shape: Sequence[int] | int, dtype: np.dtype | type | str, alignment: int = ALIGNMENT
                  ) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on an `alignment`-byte boundary."""
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    dtype = np.dtype(dtype)
    nbytes = prod(shape) * dtype.itemsize
    block = np.empty(nbytes + alignment, np.uint8)
    start = -address(block) % alignment
    # np.ndarray over the block, not a slice: numpy moves an empty slice's pointer back to the block's start
    return np.ndarray(shape, dtype, buffer=block, offset=start)


def aligned_zeros(shape: Sequence[int] | int, dtype: np.dtype | type | str, alignment: int = ALIGNMENT
                  ) -> np.ndarray:
    """A zero-filled C-contiguous array whose data starts on an `alignment`-byte boundary."""
    out = aligned_empty(shape, dtype, alignment)
    out[...] = 0
    return out


def aligned_copy(array: np.ndarray, dtype: np.dtype | type | str | None = None, alignment: int = ALIGNMENT
                 ) -> np.ndarray:
    """A C-contiguous, aligned copy of `array` (converted to `dtype` when given)."""
    array = np.asarray(array)
    out = aligned_empty(array.shape, dtype or array.dtype, alignment)
    out[...] = array
    return out


def aligned_block(nbytes: int, alignment: int = ALIGNMENT) -> np.ndarray:
    """A zeroed byte buffer of at least one alignment unit (so even an empty arena has a valid address)."""
    return aligned_zeros(max(int(nbytes), alignment), np.uint8, alignment)
