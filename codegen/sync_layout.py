"""The memory layout of the native synchronization words (codegen/sync.py emits the code that uses them) and its
spin budgets: what the runtime allocates and passes, readable without loading LLVM."""
from __future__ import annotations

from .abi import CLAIM_OFFSET
from .target import Target

SYNC_BYTES = CLAIM_OFFSET + 64  # the status words and the claim words get a cache line each
ABORT_OFFSET = 8
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

CONTROL_BYTES = 192
GO, ASLEEP, SLEEPS, DONE, JOINER = 0, 64, 72, 128, 136


def spin_budget(target: Target, microseconds: float) -> int:
    """The budget of a spin of about `microseconds` on this target (ticks on x86, spins elsewhere; see above)."""
    return max(1, round(microseconds * (TSC_TICKS_PER_US if target.is_x86 else SPINS_PER_US)))
