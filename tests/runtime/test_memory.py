"""runtime/memory.py: aligned buffers and map_bytes, the threaded map that loads and hashes a model's weights."""
from __future__ import annotations

import threading

import numpy as np

from braze.runtime import memory
from braze.runtime.memory import PARALLEL_BYTES, aligned_zeros, is_aligned, map_bytes


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
