"""Test support: compile GEMM/conv kernels and call them on numpy arrays after checking every buffer's size."""
from __future__ import annotations

import ctypes
import hashlib
import threading
from typing import Callable, Sequence

import numpy as np

from braze.codegen import compile_ir, host_target
from braze.codegen.abi import CALLS, SHARE_AREA, SHARE_OFFSET

KERNEL_ARGS = (ctypes.c_void_p,) * 4 + (ctypes.c_int64,) * 2 + (ctypes.c_void_p,) * 2


def aligned(shape: Sequence[int] | int, fill: np.ndarray | None = None) -> np.ndarray:
    """A float32 array whose data starts on a 64-byte boundary (what the runtime guarantees for its buffers)."""
    count = int(np.prod(shape))
    raw = np.zeros(count + 16, np.float32)
    start = (-raw.ctypes.data % 64) // 4
    out = raw[start:start + count].reshape(shape)
    if fill is not None:
        out[...] = fill
    return out


def unique_name(prefix: str, *parts: object) -> str:
    """A symbol name derived from what the kernel computes (exported names are unique per process)."""
    digest = hashlib.sha256(repr(parts).encode()).hexdigest()[:12]
    return f"{prefix}_{digest}"


def build(prefix: str, key: tuple, emit: Callable[..., object]) -> tuple[object, str]:
    """Emit a module with emit(module, name) and compile it; returns (library, name)."""
    name = unique_name(prefix, *key)
    module = host_target().new_module(name)
    emit(module, name)
    return compile_ir(module, use_cache=False), name


def kernel(library, name: str, n_extra: int) -> Callable:
    """The ctypes function of a threaded kernel with `n_extra` extra pointer arguments."""
    return library.cfunc(name, None, *KERNEL_ARGS, *([ctypes.c_void_p] * n_extra))


def require(array: np.ndarray, elements: int | None, label: str) -> int:
    """The data address of a float32 array holding at least `elements` elements; raises otherwise."""
    if array.dtype != np.float32:
        raise TypeError(f"{label}: expected float32, got {array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{label}: expected a C-contiguous buffer")
    if elements is not None and array.size < elements:
        raise ValueError(f"{label}: {array.size} elements, the kernel reads up to {elements}")
    return array.ctypes.data


def run_threads(fn: Callable, pointers: Sequence[int], extras: Sequence[int], scratch_bytes: int,
                nthreads: int, *, claims: bool = True, concurrent: bool = False, shared_bytes: int = 0,
                calls: int = 0) -> None:
    """Call the kernel for tid 0..nthreads-1, each with its own scratch area and all with one block of claim words
    and share words beside a shared area of `shared_bytes` (null pointers without `claims`), and a count of `calls`
    ended: one after another, or at once on Python threads (a ctypes call releases the GIL), so that the threads
    claim their work from each other."""
    scratch = [aligned(max(scratch_bytes // 4, 1)) for _ in range(nthreads)]
    words = aligned(16)
    share_words = aligned(16).view(np.uint64)
    area = aligned(max(shared_bytes // 4, 1))
    share_words[(SHARE_AREA - SHARE_OFFSET) // 8] = area.ctypes.data
    share_words[(CALLS - SHARE_OFFSET) // 8] = calls
    claim, share = (words.ctypes.data, share_words.ctypes.data) if claims else (None, None)

    def call(tid: int) -> None:
        fn(*pointers, scratch[tid].ctypes.data, tid, nthreads, claim, share, *extras)
    if not concurrent:
        for tid in range(nthreads):
            call(tid)
    else:
        at_once(call, nthreads)
    assert not words.any(), "the last thread to leave a claimed loop zeroes the claim words"
    assert not share_words[:(SHARE_AREA - SHARE_OFFSET) // 8].any(), "the share words are zeroed as the threads leave"


def at_once(call: Callable[[int], None], nthreads: int) -> None:
    """call(tid) for tid 1..nthreads-1 on Python threads and call(0) in this one, all at the same time."""
    threads = [threading.Thread(target=call, args=(tid,)) for tid in range(1, nthreads)]
    for thread in threads:
        thread.start()
    call(0)
    for thread in threads:
        thread.join()


U32 = 2.0 ** -24  # unit roundoff of float32


def dot_tolerance(k: int, scale: np.ndarray) -> np.ndarray:
    """Allowed |computed - exact| for float32 sums of k products whose magnitudes sum to `scale`.

    Rounding errors of a length-k float32 dot product are bounded by k*u*sum|a_i*b_i| in the worst case; with
    independent random signs they grow like sqrt(k)*u*sum|a_i*b_i|. We allow 8*sqrt(k+1)*u times that scale
    (the exact value computed in float64): random data stays well inside, a wrong index or a lost term does not.
    """
    return 8.0 * np.sqrt(k + 1.0) * U32 * scale + 1e-30


def assert_close(got: np.ndarray, want: np.ndarray, tol: np.ndarray, label: str = "") -> None:
    """Every element within its tolerance, and no NaN where the reference has none."""
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= tol)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{label}: {int(bad.sum())} of {bad.size} elements off; first at {index}: "
                             f"got {got[index]!r}, want {want[index]!r}, tolerance {tol[index]:.3g}")
