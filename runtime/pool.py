"""The process-wide worker threads that run compiled entry points in parallel.

A compiled call with N threads makes N calls of the same entry point, one per thread id: thread 0 in the calling
thread (a ctypes call, which releases the GIL) and threads 1..N-1 on persistent workers. Between kernels the
threads meet at the native barrier the module builder emits.

The workers never touch Python while they work: each one sits in a native loop (codegen.sync, braze_pool_work)
that watches its go word, calls the posted entry point with its thread id and stores the call's number in its
done word. The caller posts a call natively (braze_pool_post) and, after its own share, waits natively for the
done words (braze_pool_join). A GIL hand-over or the wake-up of a sleeping thread costs tens of microseconds on
many machines (virtual ones above all); this way a multi-threaded call costs a few microseconds more than a
single-threaded one. Waiting threads spin only briefly, then sleep (codegen/futex.py), so that a core taken by
another process is not also burnt by a braze thread waiting for the one that lost its core: a worker that has
seen no call for WAIT_US microseconds sleeps on a futex, which the next post wakes; a caller whose workers are not
done after JOIN_US sleeps until the last one is, and the barrier between kernels does the same (codegen/sync.py;
on x86 these are times, measured by the time-stamp counter, elsewhere counts of spins that take about as long). Where there is no futex, an idle worker returns to Python and sleeps on an Event,
which the next post sets, and the waits keep spinning.

The pool runs one parallel call at a time; a call that finds it busy (another Python thread is running a
compiled call) runs on one thread instead of waiting, so concurrent callers never block each other on the pool.
A call returns, or raises, only after every worker has finished its share: their native code uses the caller's
buffers.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import TYPE_CHECKING, Callable, NamedTuple, TypeVar

from .memory import address, aligned_zeros

if TYPE_CHECKING:
    import llvmlite.ir as ir

    from braze.codegen.target import Target

T = TypeVar("T")

WAIT_US = 1000  # how long an idle worker spins before it sleeps: back-to-back calls find it awake
JOIN_US = 40  # how long a caller waiting for its workers spins before it sleeps


def _kept(obj: T) -> T:
    """`obj`, never freed, not even while the interpreter shuts down: the workers' native loops keep reading their
    go words and the task block (and running the pool's code) until the process ends, so what they read must
    outlive every Python object, frames of daemon threads included."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
    return obj


class _Native(NamedTuple):
    post: Callable[..., int]
    work: Callable[..., int]
    join: Callable[..., int]
    wait_budget: int  # WAIT_US and JOIN_US as the native loops count them (codegen.sync.spin_budget)
    join_budget: int


@functools.lru_cache(maxsize=None)
def native() -> _Native:
    """The pool's native functions (codegen.sync), compiled once per process through the JIT and its cache, or
    opened from the cache's shared object without loading LLVM (codegen/described.py)."""
    from braze.codegen.abi import POOL_JOIN, POOL_POST, POOL_WORK
    from braze.codegen.described import compile_described
    from braze.codegen.sync_layout import spin_budget
    from braze.codegen.target import host_target
    target = host_target()
    library = _kept(compile_described("worker pool", lambda: _emit_pool_module(target),
                                ("braze_pool_post", "braze_pool_work", "braze_pool_join"), target=target))
    return _Native(POOL_POST.cfunc(library, "braze_pool_post"), POOL_WORK.cfunc(library, "braze_pool_work"),
                   POOL_JOIN.cfunc(library, "braze_pool_join"), spin_budget(target, WAIT_US),
                   spin_budget(target, JOIN_US))


def _emit_pool_module(target: Target) -> ir.Module:
    """The pool's module, emitted (and llvmlite loaded) only when no cache entry has its code."""
    from braze.codegen.sync import emit_pool_module
    return emit_pool_module(target)


class _Worker:
    """A daemon thread running the native work loop as thread id `tid`, sleeping when it runs out of work."""

    def __init__(self, tid: int, task_address: int, work: Callable[..., int]) -> None:
        from braze.codegen.sync_layout import CONTROL_BYTES
        self.tid = tid
        self.control = _kept(aligned_zeros(CONTROL_BYTES // 8, "int64"))
        self.address = address(self.control)
        self.wake = threading.Event()
        self._python_sleeps = 0
        self._task_address, self._work = task_address, work
        self.thread = threading.Thread(target=self._loop, name=f"braze-worker-{tid}", daemon=True)
        self.thread.start()

    @property
    def sleeps(self) -> int:
        """How many times this worker has gone to sleep for want of work (natively or in Python)."""
        from braze.codegen.sync_layout import SLEEPS
        return self._python_sleeps + int(self.control[SLEEPS // 8])

    def _loop(self) -> None:
        seen = 0
        while True:
            seen = self._work(self._task_address, self.address, self.tid, seen, native().wait_budget)
            self._python_sleeps += 1
            self.wake.wait()
            self.wake.clear()  # a post that comes now is still seen: the native loop reads the go word first


class ThreadPool:
    """Persistent workers running compiled entry points; see the module doc."""

    def __init__(self) -> None:
        self._workers: list[_Worker] = []
        self._controls = (ctypes.c_void_p * 1)()
        self._task = _kept(aligned_zeros(8, "int64"))
        self._busy = threading.Lock()
        self._growing = threading.Lock()
        self._calls = 0

    @property
    def size(self) -> int:
        """The number of worker threads started so far."""
        return len(self._workers)

    def start(self, workers: int) -> None:
        """Compile the pool's native code and start `workers` workers now, if not done yet (an executable that
        will run on several threads asks at load time, so that its first call costs what the later ones do)."""
        self._grow(workers, native().work)

    def try_acquire(self) -> bool:
        """Reserve the pool for one parallel call; False when another call holds it."""
        return self._busy.acquire(blocking=False)

    def release(self) -> None:
        self._busy.release()

    def run(self, entry: int, args: tuple[int, int, int, int, int, int], nthreads: int, first: Callable[[], None],
            abort: Callable[[], None]) -> None:
        """Run the entry point at address `entry` with (inputs, weights, outputs, arena, scratch, sync) = args on
        nthreads threads; `first()` makes thread 0's call. The caller must hold the pool (try_acquire).

        If `first` fails (an interrupt can arrive just before its foreign call), `abort` is called before waiting
        for the workers, so that workers waiting for thread 0 at a native barrier stop waiting.
        """
        functions = native()
        self._grow(nthreads - 1, functions.work)
        self._calls += 1
        call, workers = self._calls, nthreads - 1
        inputs, weights, outputs, arena, scratch, sync = args
        failure: BaseException | None = None
        try:
            asleep = functions.post(address(self._task), entry, inputs, weights, outputs, arena, scratch, nthreads,
                                    sync, self._controls, workers, call)
            if asleep:
                for worker in self._workers[:workers]:
                    worker.wake.set()
            first()
        except BaseException as exc:
            failure = exc
            abort()
        # The workers' native code uses the caller's buffers: wait for them, even through interrupts (a post is
        # one native call, so either every worker got this call or none did).
        posted = failure is None or ctypes.c_int64.from_address(self._workers[0].address).value == call
        while posted:
            try:
                if functions.join(self._controls, workers, call, functions.join_budget):
                    break
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def _grow(self, count: int, work: Callable[..., int]) -> None:
        if len(self._workers) >= count:
            return
        with self._growing:
            while len(self._workers) < count:
                self._workers.append(_Worker(len(self._workers) + 1, address(self._task), work))
            self._controls = (ctypes.c_void_p * len(self._workers))(*[w.address for w in self._workers])


_pool: ThreadPool | None = None
_pool_lock = threading.Lock()


def pool() -> ThreadPool:
    """The process-wide pool (created on first use; a forked child starts a fresh one)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPool()
        return _pool


def _forget_pool_in_child() -> None:
    """Threads do not survive fork: the child must not wait on the parent's workers."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


__all__ = ["JOIN_US", "ThreadPool", "WAIT_US", "native", "pool"]
