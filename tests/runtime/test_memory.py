"""runtime/memory.py: aligned buffers and map_bytes, the threaded map that loads and hashes a model's weights."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from braze.runtime import memory
from braze.runtime.memory import PARALLEL_BYTES, address, aligned_maker, aligned_zeros, is_aligned, map_bytes


def test_map_bytes_keeps_the_items_order_and_calls_once_per_item(monkeypatch) -> None:
    monkeypatch.setattr(memory, "cpu_count", lambda: 2)
    sizes = [1, 5 * PARALLEL_BYTES, 3, 2 * PARALLEL_BYTES, 7]  # the large items run first, the results stay in order
    calls, threads = [], set()

    def work(k: int) -> int:
        calls.append(k)
        threads.add(threading.get_ident())
        return k * k

    assert map_bytes(work, list(range(len(sizes))), sizes) == [k * k for k in range(len(sizes))]
    assert sorted(calls) == list(range(len(sizes)))
    assert calls[0] == 1  # the largest started first
    assert threading.get_ident() not in threads  # on the pool's threads


def test_map_bytes_of_little_data_runs_in_the_calling_thread() -> None:
    threads = []
    assert map_bytes(lambda x: threads.append(threading.get_ident()) or x + 1, [1, 2, 3], [10, 10, 10]) == [2, 3, 4]
    assert set(threads) == {threading.get_ident()}


def test_aligned_zeros_is_zero_and_aligned() -> None:
    for n in (0, 1, 63, 1000):
        block = aligned_zeros(n, np.float32)
        assert block.shape == (n,) and is_aligned(block) and not block.any()


@pytest.mark.parametrize("shape, dtype", [((64, 64), np.float32), ((3,), np.float64), ((), np.int64),
                                          ((5, 7), np.complex128), ((9,), np.bool_), ((2, 3), np.int8),
                                          ((0, 4), np.float32)])
def test_aligned_maker_gives_a_new_aligned_writable_array_each_call(shape, dtype) -> None:
    new = aligned_maker(shape, dtype)
    arrays = [new() for _ in range(20)]
    for array in arrays:
        assert array.shape == shape and array.dtype == dtype and is_aligned(array)
        assert array.flags.c_contiguous and array.flags.writeable
    if arrays[0].size:
        arrays[0][...] = 1
        assert not any(np.shares_memory(arrays[0], other) for other in arrays[1:])


def test_address_is_the_array_interfaces_for_every_kind_of_array() -> None:
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    read_only = base.copy()
    read_only.flags.writeable = False
    for array in (base, base[2:], base[:, 1:5], base.T, read_only, np.empty((0, 3)), np.zeros(()),
                  np.frombuffer(b"abcdefgh", np.uint8)):
        assert address(array) == array.__array_interface__["data"][0]
