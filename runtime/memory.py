"""64-byte-aligned numpy buffers: what the runtime hands to compiled code.

Compiled kernels may use aligned vector loads on buffers the runtime allocates (weights, the arena, scratch,
staged inputs and outputs), so every such buffer starts on a 64-byte boundary (a cache line, and the width of an
AVX-512 register). numpy itself guarantees only 16 bytes: these functions over-allocate a byte block and return a
view that starts at the first aligned address. The view keeps its block alive through `.base`.
"""
from __future__ import annotations

import ctypes
import mmap
import os
from concurrent.futures import ThreadPoolExecutor
from math import prod
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

ALIGNMENT = 64
PARALLEL_BYTES = 8 << 20  # memory work beyond this many bytes per thread is spread over threads
PAGE_BYTES = 4096  # the smallest page size of the platforms braze runs on

T = TypeVar("T")


_char_view, _address_of = ctypes.c_char.from_buffer, ctypes.addressof


def address(array: np.ndarray) -> int:
    """The address of an array's first element: through a ctypes view of it (a fifth of the time of the array
    interface's dict, which a call's outputs pay) when the array is writable, contiguous and not empty, else through
    the array interface."""
    try:
        return _address_of(_char_view(array))
    except (TypeError, ValueError):
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


def aligned_maker(shape: Sequence[int], dtype: np.dtype | type | str, alignment: int = ALIGNMENT
                  ) -> Callable[[], np.ndarray]:
    """A function that returns a fresh aligned_empty(shape, dtype) at each call, for the arrays a compiled call
    returns: the shape, padding and dtype are worked out once, and numpy allocates the block in the dtype itself, so
    that a slice of it is the array (about 1 us a call against aligned_empty's 3.2, which were a third of a 64 x 64
    matmul's call)."""
    shape, dtype = tuple(int(d) for d in shape), np.dtype(dtype)
    count, itemsize = prod(shape), dtype.itemsize
    if count == 0 or alignment % itemsize:
        return lambda: aligned_empty(shape, dtype, alignment)
    padding, mask, empty = alignment // itemsize, alignment - 1, np.empty

    def new() -> np.ndarray:
        block = empty(count + padding, dtype)
        start = (-_address_of(_char_view(block)) & mask) // itemsize  # numpy aligns a block to its dtype
        return block[start:start + count].reshape(shape)
    return new


def aligned_zeros(shape: Sequence[int] | int, dtype: np.dtype | type | str, alignment: int = ALIGNMENT
                  ) -> np.ndarray:
    """A zero-filled C-contiguous array whose data starts on an `alignment`-byte boundary. Its block comes zeroed
    from the allocator (calloc: fresh pages are zero), so a large buffer is not written twice, once here and once by
    whoever fills it."""
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    dtype = np.dtype(dtype)
    block = np.zeros(prod(shape) * dtype.itemsize + alignment, np.uint8)
    return np.ndarray(shape, dtype, buffer=block, offset=-address(block) % alignment)


def aligned_copy(array: np.ndarray, dtype: np.dtype | type | str | None = None, alignment: int = ALIGNMENT
                 ) -> np.ndarray:
    """A C-contiguous, aligned copy of `array` (converted to `dtype` when given)."""
    array = np.asarray(array)
    out = aligned_empty(array.shape, dtype or array.dtype, alignment)
    out[...] = array
    return out


def unchangeable(array: np.ndarray) -> bool:
    """Whether numpy lets no one change the array's values: it is read-only all the way down to the memory it views,
    an ndarray owning its data (read-only too), a bytes object or a file mapped read-only (a large cache entry's:
    braze replaces those files, never writes them in place). The runtime shares such an array instead of copying it
    (numpy's read-only flag on memory it owns is taken as its owner's promise)."""
    held: Any = array
    while True:
        if isinstance(held, np.ndarray):
            if held.flags.writeable:
                return False
            if held.base is None:
                return bool(held.flags.owndata)
            held = held.base
        elif isinstance(held, memoryview):
            if not held.readonly:
                return False
            held = held.obj
        elif isinstance(held, mmap.mmap):
            with memoryview(held) as view:
                return view.readonly
        else:
            return isinstance(held, bytes)


def aligned_block(nbytes: int, alignment: int = ALIGNMENT) -> np.ndarray:
    """A zeroed byte buffer of at least one alignment unit (so even an empty arena has a valid address)."""
    return aligned_zeros(max(int(nbytes), alignment), np.uint8, alignment)


def resident_block(nbytes: int, alignment: int = ALIGNMENT) -> np.ndarray:
    """aligned_block with every page written once now: a fresh block's pages are mapped on first touch, and a
    buffer every call writes (the arena, the scratch area) should not make the first call pay those faults."""
    block = aligned_block(nbytes, alignment)
    block[::PAGE_BYTES] = 0
    return block


def cpu_count() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def map_bytes(function: Callable[[T], Any], items: Sequence[T], sizes: Sequence[int]) -> list[Any]:
    """[function(item) for item in items], on several threads when the items hold sum(sizes) bytes in all, at least
    PARALLEL_BYTES per thread: for work that releases the GIL over large buffers (numpy copies, hashlib, a ctypes
    call of compiled code), such as loading a model's weights. The largest items start first, so that one large
    item taken last does not leave the other threads idle (a ResNet's last three 9 MB weights, in path order)."""
    threads = min(len(items), cpu_count(), sum(sizes) // PARALLEL_BYTES)
    if threads < 2:
        return [function(item) for item in items]
    order = sorted(range(len(items)), key=lambda k: -sizes[k])
    results: list[Any] = [None] * len(items)
    with ThreadPoolExecutor(threads) as pool:
        for k, result in zip(order, pool.map(lambda k: function(items[k]), order)):
            results[k] = result
    return results
