"""The memory layout of the native synchronization words (codegen/sync.py and codegen/pool_code.py emit the code
that uses them), their spin budgets and whether the target can sleep on a futex: what the runtime allocates and
passes, readable without loading LLVM."""
from __future__ import annotations

from .abi import SHARE_OFFSET
from .target import Target

SYNC_BYTES = SHARE_OFFSET + 64  # the status, claim and share words get a cache line each
GENERATION_OFFSET = 64
SLEEPERS_OFFSET = 72  # threads asleep on the generation (codegen/futex.py)

# Spin budgets: how long a waiting thread spins before it sleeps on a futex (or, without futexes, yields or returns
# to Python). On x86 a budget is time-stamp-counter ticks, which count time at a fixed rate however fast the core
# runs and however long its `pause` takes (3 to 150 cycles across recent cores), and which keep counting while the
# thread is descheduled: a waiter that gets its core back after losing it finds its budget spent and sleeps at once,
# so the next wake-up (which the kernel gives precedence over a busy process) is quick. Elsewhere a budget is a
# number of spins. spin_budget converts microseconds at the nominal rates below (x86 time-stamp counters run at
# 2-4 GHz, so a budget lasts 0.6-1.25 times as long as stated).
TSC_TICKS_PER_US = 2500
SPINS_PER_US = 40

# The worker pool's blocks (codegen/pool_code.py states what each word holds).
CONTROL_BYTES = 128
GO, ASLEEP, SLEEPS = 0, 64, 72
QUIT = -1  # a go word no call has: the worker leaves its loop (ThreadPool.stop, at process exit)
TASK_BYTES = 256
GATE, GATE_SLEEPERS, FINISHED, JOINER, BUSY, CALLS = 64, 72, 128, 136, 192, 200
# What the pool's calls found, counted by the caller that holds the pool (beside the busy word; read by
# ThreadPool.counters): the workers that entered, the calls posted to workers that ran without any, and the
# time-stamp-counter ticks the callers spent at the gate and joining (0 where there is no such counter).
ENTRIES, ALONE, GATE_TICKS, JOIN_TICKS = 208, 216, 224, 232
CALLER_CPU = 240  # the CPU the caller of the latest call ran on when it posted it (where the pool knows CPUs)
DECLINED = 144  # beside the finished count: workers that declined the call (its number above GATE_CALL_SHIFT)
GATE_CALL_SHIFT = 16
GATE_CLOSED = 1 << 15
GATE_COUNT = GATE_CLOSED - 1  # the mask of the gate's and the finished word's counts

SYS_FUTEX = {"x86_64": 202, "aarch64": 98}  # the futex system call's number (Linux)


def futex_number(target: Target) -> int | None:
    """The futex system call's number on this target, or None where braze knows none."""
    if "linux" not in target.triple:
        return None
    return SYS_FUTEX.get(target.triple.split("-")[0])


def knows_cpus(target: Target) -> bool:
    """Whether the pool's code can ask which CPU a thread runs on (libc's sched_getcpu, Linux)."""
    return has_futex(target)


def has_futex(target: Target) -> bool:
    """Whether code for this target can sleep on a futex."""
    return futex_number(target) is not None


def spin_budget(target: Target, microseconds: float) -> int:
    """The budget of a spin of about `microseconds` on this target (ticks on x86, spins elsewhere; see above)."""
    return max(1, round(microseconds * (TSC_TICKS_PER_US if target.is_x86 else SPINS_PER_US)))
