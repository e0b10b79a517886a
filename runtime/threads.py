"""How many threads a compiled call uses (the threads themselves are in runtime/pool.py).

An explicit count (braze.compile(..., threads=N)) is the module's own and is used as given. Every other module
uses the process's thread count, as torch's intra-op threads do: `braze.set_num_threads(n)` (read at each call,
so it changes modules compiled before it too), else `BRAZE_NUM_THREADS`, else every CPU this process may run on (its
affinity mask where the platform has one); `braze.get_num_threads()` returns it. Within that count a graph whose
work estimate (the registry's `work` trait summed over the whole graph, computed once per compile) is small runs
on one thread, where handing work to another thread costs more than it saves. Whatever the count, a call uses no
more threads than other processes leave CPUs idle (runtime/cpu_load.py).
"""
from __future__ import annotations

import os

from braze.ir.errors import BrazeError
from braze.ir.graph import Graph
from braze.ir.registry import get_op

NUM_THREADS_ENV = "BRAZE_NUM_THREADS"

# Estimated work (multiply-adds plus elements touched) below which a call runs on one thread: handing work to a
# worker and the barriers between kernels cost a few microseconds, about as long as a core needs for this much
# work. Measured on a Zen 5 (two Linear layers at batch 1, one process per case, 1 vs 2 threads): 131 K work
# 4.1 vs 4.1 us, 296 K 11.0 vs 9.4 us, 526 K 22.9 vs 11.6 us (the benchmark MLP, 673 K: 30 vs 16-19 us).
PARALLEL_THRESHOLD = 200_000
# Work estimate units one thread gets through per second, roughly (vector multiply-adds of a GEMM run faster,
# elements of a memory-bound kernel slower): only for waits sized as a share of a call's time (runtime/pool.py).
WORK_PER_SECOND = 2e10


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


def env_threads() -> int | None:
    """The thread count BRAZE_NUM_THREADS asks for, or None when it is unset or empty."""
    text = os.environ.get(NUM_THREADS_ENV, "").strip()
    if not text:
        return None
    try:
        count = int(text)
    except ValueError:
        raise BrazeError(f"{NUM_THREADS_ENV} must be a positive integer, got {text!r}") from None
    if count < 1:
        raise BrazeError(f"{NUM_THREADS_ENV} must be a positive integer, got {text!r}")
    return count


def check_threads(threads: int | None) -> int | None:
    """A requested thread count validated (None stays None: let the runtime choose)."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise BrazeError(f"threads must be a positive integer or None, got {threads!r}")
    return threads


_set_count: int | None = None
version = 0  # bumped by set_num_threads: executables re-read their thread count when it changes


def set_num_threads(threads: int) -> None:
    """Use `threads` threads per compiled call from the next call on (modules compiled with threads= keep theirs)."""
    global _set_count, version
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise BrazeError(f"set_num_threads: threads must be a positive integer, got {threads!r}")
    _set_count, version = threads, version + 1


def get_num_threads() -> int:
    """The threads a compiled call may use: set_num_threads', else BRAZE_NUM_THREADS, else the CPUs available."""
    if _set_count is not None:
        return _set_count
    from_env = env_threads()
    return from_env if from_env is not None else available_cpus()


def choose_threads(work: float, requested: int | None = None) -> int:
    """Threads for a call: `requested` as given, else get_num_threads(), or 1 when the work is small."""
    requested = check_threads(requested)
    if requested is not None:
        return requested
    count = get_num_threads()  # read even for small work, so that a bad BRAZE_NUM_THREADS is always reported
    return 1 if work < PARALLEL_THRESHOLD else count


def estimated_seconds(work: float) -> float:
    """What a call of estimated `work` takes on one thread, roughly (see WORK_PER_SECOND)."""
    return work / WORK_PER_SECOND


def estimate_work(graph: Graph) -> float:
    """A rough cost of one call: the registry's work estimate of every node (multiply-adds of matmuls and
    convolutions, elements written by the others)."""
    return float(sum(get_op(node.op).work_estimate(node) for node in graph.nodes))
