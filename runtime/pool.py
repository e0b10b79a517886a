"""The process-wide worker threads that run compiled entry points in parallel.

A compiled call on up to N threads makes one call of the same entry point per thread id: thread 0 in the calling
thread (a ctypes call, which releases the GIL) and the others on persistent workers. Between kernels the threads
meet at the native barrier the module builder emits.

The workers never touch Python while they work: each one sits in a native loop (codegen/pool_code.py,
braze_pool_work) that watches its go word. A parallel call is one native call, braze_pool_run, made by the call
stub straight from its frame (codegen/call_stub.py) or, on the general path, by ThreadPool.run: it posts the call,
waits a little for the workers to enter it, runs thread 0's share and waits for the workers that entered. The
call runs on the threads that entered in time: a worker that sleeps, or lost its core to another process, is not
waited for; the call runs without it, on fewer threads, and it skips the call when it comes. How long the gate
waits is the executable's choice, a small part of what the call takes (ENTER_SHARE of its estimated time, at most
ENTER_MOST_US), so that waking a sleeping worker pays for a long call and a short one never waits long. A GIL
hand-over or the wake-up of a sleeping thread costs tens of microseconds on many machines (virtual ones above all);
this way a multi-threaded call costs a few microseconds more than a single-threaded one. Waiting threads spin only
briefly, then sleep (codegen/futex.py), so that a core taken by another process is not also burnt by a braze
thread waiting for the one that lost its core: a worker that has seen no call for WAIT_US microseconds sleeps on a
futex, which the next post wakes (while the pool runs a call the worker came too late for, it keeps spinning until
that call's end, so that it does not sleep through the call and come late to the next one too); a worker that finds
itself on the CPU the caller posted from declines the call at once and sleeps, since two threads on one CPU only
take turns: when another process holds the other CPU the scheduler wakes the worker beside the caller, and the
call then runs alone at the cost of that wake-up, never slower than on one thread by waiting for a worker that
cannot run; a caller whose workers are not done after JOIN_US sleeps until the last one is,
and the barrier between kernels does the same (codegen/sync.py; on x86 these are times, measured by the time-stamp
counter, elsewhere counts of spins that take about as long). Where there is no futex, an idle worker returns to
Python and sleeps on an Event, which ThreadPool.run sets after a call that found it asleep, and the waits keep
spinning (such calls take the general path, not the stub).

The pool runs one parallel call at a time (a busy word in its task block); a call that finds it busy (another
Python thread is running a compiled call) runs on one thread instead of waiting, so concurrent callers never block
each other on the pool. A call returns only after every worker that entered it has finished its share: their
native code uses the caller's buffers.

At process exit (atexit, before the interpreter and LLVM tear down) the pool stops: each worker is told to leave
its native loop and its thread ends, so that no thread runs or sleeps in code the JIT owns while the process
frees it. A call after that runs on the calling thread alone.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import os
import threading
from typing import TYPE_CHECKING, Callable, NamedTuple, TypeVar

from braze.ir.errors import BrazeError

from .memory import address, aligned_zeros

if TYPE_CHECKING:
    import llvmlite.ir as ir

    from braze.codegen.described import Described
    from braze.codegen.target import Target

T = TypeVar("T")

WAIT_US = 1000  # how long an idle worker spins before it sleeps: back-to-back calls find it awake
JOIN_US = 40  # how long a caller waiting for its workers spins before it sleeps
# How long a call waits for its workers to enter: ENTER_SHARE of the call's estimated time on one thread, at most
# ENTER_MOST_US (a sleeping worker wakes in 10-100 us; a spinning one enters in well under a microsecond).
ENTER_SHARE = 0.05
ENTER_MOST_US = 500.0
MAX_WORKERS = 256  # below the gate's count field (codegen/sync_layout.py)


def _kept(obj: T) -> T:
    """`obj`, never freed, not even while the interpreter shuts down: the workers' native loops keep reading their
    go words and the task block (and running the pool's code) until the process ends, so what they read must
    outlive every Python object, frames of daemon threads included."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
    return obj


class _Native(NamedTuple):
    run: Callable[..., int]
    work: Callable[..., int]
    quit: Callable[..., None]
    wait_budget: int  # WAIT_US and JOIN_US as the native loops count them (codegen.sync_layout.spin_budget)
    join_budget: int
    run_address: int  # braze_pool_run's address, for call frames (codegen/call_stub.py)


@functools.lru_cache(maxsize=None)
def native() -> _Native:
    """The pool's native functions (codegen/pool_code.py), compiled once per process through the JIT and its cache,
    or opened from the cache's shared object without loading LLVM (codegen/described.py)."""
    from braze.codegen.abi import POOL_QUIT, POOL_RUN, POOL_WORK
    from braze.codegen.described import compile_described
    from braze.codegen.sync_layout import spin_budget
    from braze.codegen.target import host_target
    target, module = host_target(), pool_module()
    library = _kept(compile_described(module.description, module.build, module.exports, target=target))
    return _Native(POOL_RUN.cfunc(library, "braze_pool_run"), POOL_WORK.cfunc(library, "braze_pool_work"),
                   POOL_QUIT.cfunc(library, "braze_pool_quit"), spin_budget(target, WAIT_US),
                   spin_budget(target, JOIN_US), library.address("braze_pool_run"))


def pool_module() -> Described:
    """The pool's module as codegen/described.py takes it."""
    from braze.codegen.described import Described
    from braze.codegen.target import host_target
    target = host_target()
    return Described("worker pool", lambda: _emit_pool_module(target),
                     ("braze_pool_run", "braze_pool_work", "braze_pool_quit"))


def _emit_pool_module(target: Target) -> ir.Module:
    """The pool's module, emitted (and llvmlite loaded) only when no cache entry has its code."""
    from braze.codegen.pool_code import emit_pool_module
    return emit_pool_module(target)


class _Worker:
    """A daemon thread running the native work loop as thread id `tid`, sleeping when it runs out of work, until it is
    told to quit."""

    def __init__(self, tid: int, task_address: int, work: Callable[..., int], *, run: bool = True) -> None:
        from braze.codegen.sync_layout import CONTROL_BYTES
        self.tid = tid
        self.control = _kept(aligned_zeros(CONTROL_BYTES // 8, "int64"))
        self.address = address(self.control)
        self.wake = threading.Event()
        self.quitting = False
        self._python_sleeps = 0
        self._task_address, self._work = task_address, work
        self.thread = threading.Thread(target=self._loop, name=f"braze-worker-{tid}", daemon=True)
        if run:  # a stopped pool's worker has a control block (posts go there) and no thread
            self.thread.start()

    @property
    def sleeps(self) -> int:
        """How many times this worker has gone to sleep for want of work (natively or in Python)."""
        from braze.codegen.sync_layout import SLEEPS
        return self._python_sleeps + int(self.control[SLEEPS // 8])

    def _loop(self) -> None:
        from braze.codegen.sync_layout import QUIT
        seen = 0
        while not self.quitting:
            seen = self._work(self._task_address, self.address, seen, native().wait_budget)
            if seen == QUIT:
                return
            self._python_sleeps += 1
            self.wake.wait()
            self.wake.clear()  # a post that comes now is still seen: the native loop reads the go word first

    def quit(self) -> None:
        """Make the worker leave its loop (it finishes a call it is in first)."""
        self.quitting = True
        if self.thread.is_alive():
            native().quit(self.address)
            self.wake.set()


class ThreadPool:
    """Persistent workers running compiled entry points; see the module doc."""

    def __init__(self) -> None:
        from braze.codegen.sync_layout import CALLER_CPU, TASK_BYTES
        self._workers: list[_Worker] = []
        self._task = _kept(aligned_zeros(TASK_BYTES // 8, "int64"))
        self._controls = _kept(aligned_zeros(MAX_WORKERS, "int64"))  # the workers' control block addresses
        self._task[CALLER_CPU // 8] = -1  # no call yet: no worker is on the caller's CPU
        self.task_address, self.controls_address = address(self._task), address(self._controls)
        self._growing = threading.Lock()
        self._stopped = False

    @property
    def size(self) -> int:
        """The number of worker threads started so far."""
        return len(self._workers)

    def start(self, workers: int) -> None:
        """Compile the pool's native code and start `workers` workers now, if not done yet (an executable that
        will run on several threads asks at load time, so that its first call costs what the later ones do)."""
        if workers > MAX_WORKERS:
            raise BrazeError(f"the worker pool has at most {MAX_WORKERS} workers; {workers} were asked for")
        work = native().work
        if len(self._workers) >= workers:
            return
        with self._growing:
            while len(self._workers) < workers:
                worker = _Worker(len(self._workers) + 1, self.task_address, work, run=not self._stopped)
                self._controls[len(self._workers)] = worker.address
                self._workers.append(worker)

    def stop(self, timeout: float = 1.0) -> None:
        """Make every worker leave its native loop and wait (at most `timeout` seconds in all) for their threads to
        end. Later calls run on the calling thread alone: their posts reach control blocks no thread watches."""
        with self._growing:
            self._stopped = True
            workers = list(self._workers)
        for worker in workers:
            worker.quit()
        for worker in workers:
            if worker.thread.is_alive():
                worker.thread.join(timeout / max(len(workers), 1))

    def counters(self) -> dict[str, int]:
        """What the pool's parallel calls found so far: calls (posted to workers), entries (workers that entered
        them), alone (calls that no worker entered in time), gate_ticks and join_ticks (time-stamp-counter ticks the
        callers waited for the workers to enter and to finish; 0 without such a counter) and sleeps (times the
        workers went to sleep for want of work). Read while calls run, the numbers may be a call apart."""
        from braze.codegen.sync_layout import ALONE, CALLS, ENTRIES, GATE_TICKS, JOIN_TICKS
        words = {"calls": CALLS, "entries": ENTRIES, "alone": ALONE, "gate_ticks": GATE_TICKS,
                 "join_ticks": JOIN_TICKS}
        found = {name: int(self._task[offset // 8]) for name, offset in words.items()}
        return {**found, "sleeps": sum(worker.sleeps for worker in self._workers)}

    def run(self, words: int, nthreads: int, enter_budget: int) -> None:
        """Run the entry call whose TASK_FIELDS words are at address `words` on at most `nthreads` threads: the
        caller and the workers that enter it within `enter_budget` (codegen.sync_layout.spin_budget units), or on the
        calling thread alone while another call holds the pool. One native call (codegen/pool_code.py)."""
        functions = native()
        self.start(nthreads - 1)
        if functions.run(words, self.task_address, self.controls_address, enter_budget, functions.join_budget):
            for worker in self._workers[:nthreads - 1]:
                worker.wake.set()


_pool: ThreadPool | None = None
_pool_lock = threading.Lock()


def pool() -> ThreadPool:
    """The process-wide pool (created on first use; a forked child starts a fresh one)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPool()
        return _pool


@atexit.register
def _stop_pool() -> None:
    """Stop the process's pool, if it was started, before the interpreter (and the JIT's memory) goes."""
    with _pool_lock:
        running = _pool
    if running is not None and running.size:
        running.stop()


def _forget_pool_in_child() -> None:
    """Threads do not survive fork: the child must not wait on the parent's workers."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def enter_budget(seconds: float) -> int:
    """The gate's spin budget for a call estimated to take `seconds` on one thread (see the module doc)."""
    from braze.codegen.sync_layout import spin_budget
    from braze.codegen.target import host_target
    return spin_budget(host_target(), min(ENTER_SHARE * seconds * 1e6, ENTER_MOST_US))


__all__ = ["ENTER_MOST_US", "ENTER_SHARE", "JOIN_US", "MAX_WORKERS", "ThreadPool", "WAIT_US", "enter_budget",
           "native", "pool"]
