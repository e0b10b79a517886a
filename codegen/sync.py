"""Native synchronization: the barrier between the kernels of a multi-threaded call, and the spin-then-sleep waits
it shares with the worker pool's native code (codegen/pool_code.py).

Barrier. `braze.barrier(ptr sync, i64 nthreads)` is emitted into each whole-graph module and works on SYNC_BYTES
of zeroed memory the runtime owns per executable: an arrival counter at byte 0 and a generation counter at byte
GENERATION_OFFSET (its own cache line, so spinning readers of the generation do not slow the arrivals), followed
by the status words of the run-time checks and the claim words of dynamic work claiming (codegen/abi.py). With one
thread it returns at once. Every thread of a call is in native code from its start to its end (a parallel call is
one native call, codegen/pool_code.py), so every thread that entered a call reaches each barrier. With futexes the
barrier's waiters, after spinning for BARRIER_SPIN_US, sleep on the generation (announcing themselves in the word
at SLEEPERS_OFFSET, see codegen/futex.py), at most BARRIER_SLEEP_NS at a time.
"""
from __future__ import annotations

import llvmlite.ir as ir

from .futex import emit_sleep_until_changed, emit_wake_sleepers
from .loops import I8, I64, PTR, VOID, define_function, i64
from .sync_layout import GENERATION_OFFSET, SLEEPERS_OFFSET, has_futex, spin_budget
from .target import Target, is_x86_triple

# At a barrier: long enough to cover the usual imbalance between the threads of a kernel, short enough that a
# thread waiting for one that lost its core soon gives its own core up (to that thread, or to whatever else runs).
BARRIER_SPIN_US = 40
# The longest futex sleep before a waiter looks again (a safety net: every wake-up is also signalled).
BARRIER_SLEEP_NS = 2_000_000
JOIN_SLEEP_NS = 20_000_000


def declare(module: ir.Module, name: str, ret: ir.Type, params: list[ir.Type]) -> ir.Function:
    """The function `name` of the module, declared with this signature on first use (intrinsics, libc)."""
    try:
        return module.get_global(name)
    except KeyError:
        return ir.Function(module, ir.FunctionType(ret, params), name)


def at(b: ir.IRBuilder, base: ir.Value, offset: int, name: str = "") -> ir.Value:
    return b.gep(base, [i64(offset)], inbounds=True, source_etype=I8, name=name)


def relax(b: ir.IRBuilder, module: ir.Module, target: Target) -> None:
    """A spin-wait hint to the core (x86 `pause`), where the target has one."""
    if target.is_x86:
        b.call(declare(module, "llvm.x86.sse2.pause", VOID, []), [])


def spin_mark(b: ir.IRBuilder, module: ir.Module, target: Target) -> ir.Value:
    """Where a spin starts: the time-stamp counter on x86, a spin count of 0 elsewhere."""
    if target.is_x86:
        return b.call(declare(module, "llvm.x86.rdtsc", I64, []), [], name="tsc")
    return i64(0)


def spin_step(b: ir.IRBuilder, module: ir.Module, target: Target, mark: ir.Value,
               budget: ir.Value) -> tuple[ir.Value, ir.Value]:
    """After one more spin of the spin begun at `mark`: (whether its budget is spent, the mark to carry on)."""
    if target.is_x86:
        now = b.call(declare(module, "llvm.x86.rdtsc", I64, []), [], name="tsc.now")
        return b.icmp_unsigned(">=", b.sub(now, mark), budget), mark
    following = b.add(mark, i64(1), name="spins.next")
    return b.icmp_signed(">=", following, budget), following


def _yields(triple: str) -> bool:
    """Whether the triple's OS has sched_yield."""
    return any(os in triple for os in ("linux", "darwin", "freebsd", "netbsd", "openbsd"))


# A wait for work in progress on other threads (a GEMM's shared packing): `pause` between reads, and after each
# COUNT_SPINS of them (tens of microseconds) a sched_yield, so that a thread waiting for one that lost its core to
# another process hands its core over.
COUNT_SPINS = 1024


def emit_wait_for_count(b: ir.IRBuilder, word: ir.Value, count: ir.Value) -> None:
    """Continue once the i64 at `word` (read with acquire) is at least `count`; the target is the module's triple."""
    module, fn = b.module, b.function
    triple = str(module.triple)
    entry, head, spin, done = b.block, *(fn.append_basic_block(f"wait.{part}") for part in ("head", "spin", "done"))
    b.branch(head)
    b.position_at_end(head)
    spins = b.phi(I64, name="wait.spins")
    spins.add_incoming(i64(0), entry)
    now = b.load_atomic(word, "acquire", 8, typ=I64, name="wait.now")
    b.cbranch(b.icmp_signed(">=", now, count), done, spin)
    b.position_at_end(spin)
    if is_x86_triple(triple):
        b.call(declare(module, "llvm.x86.sse2.pause", VOID, []), [])
    following = b.add(spins, i64(1))
    if _yields(triple):
        with b.if_then(b.icmp_signed("==", b.and_(following, i64(COUNT_SPINS - 1)), i64(0))):
            b.call(declare(module, "sched_yield", ir.IntType(32), []), [])
    spins.add_incoming(following, b.block)
    b.branch(head)
    b.position_at_end(done)


def emit_barrier(module: ir.Module, target: Target) -> ir.Function:
    """`void braze.barrier(ptr sync, i64 nthreads)`: returns once all nthreads threads have arrived.

    The last thread to arrive resets the arrival counter, bumps the generation and wakes the sleepers, if any; the
    others spin until they see the generation change (acquire), with `pause` between reads, and after each
    BARRIER_SPIN_US of spinning (a spin budget, see above) sleep on the generation (a futex; sched_yield where there
    is none), so that a thread waiting for one that lost its core gives the core up. Reading the generation before
    arriving makes the barrier reusable: a thread that races ahead to the next barrier arrives only after the reset
    it observed.
    """
    fn = define_function(module, "braze.barrier", [("sync", PTR), ("nthreads", I64)], internal=True)
    fn.attributes.add("noinline")
    sync, nthreads = fn.args
    b = ir.IRBuilder(fn.entry_basic_block)
    arrive, last, wait, spin, done = (fn.append_basic_block(n) for n in ("arrive", "last", "wait", "spin", "done"))
    b.cbranch(b.icmp_signed("<=", nthreads, i64(1)), done, arrive)
    b.position_at_end(arrive)
    generation = at(b, sync, GENERATION_OFFSET, "generation")
    seen = b.load_atomic(generation, "acquire", 8, typ=I64, name="seen")
    before = b.atomic_rmw("add", sync, i64(1), "acq_rel", name="before")
    b.cbranch(b.icmp_signed("==", before, b.sub(nthreads, i64(1))), last, wait)
    b.position_at_end(last)
    b.atomic_rmw("xchg", sync, i64(0), "monotonic")  # store_atomic needs typed pointers in llvmlite
    b.atomic_rmw("add", generation, i64(1), "seq_cst")
    if has_futex(target):
        emit_wake_sleepers(b, module, target, generation, at(b, sync, SLEEPERS_OFFSET))
    b.branch(done)
    b.position_at_end(wait)
    begun = spin_mark(b, module, target)
    b.branch(spin)
    b.position_at_end(spin)
    mark = b.phi(I64, name="mark")
    mark.add_incoming(begun, wait)
    now = b.load_atomic(generation, "acquire", 8, typ=I64, name="now")
    keep = fn.append_basic_block("keep")
    b.cbranch(b.icmp_signed("!=", now, seen), done, keep)
    b.position_at_end(keep)
    relax(b, module, target)
    if has_futex(target) or _yields(target.triple):
        spent, carried = spin_step(b, module, target, mark, i64(spin_budget(target, BARRIER_SPIN_US)))
        rest, back = fn.append_basic_block("rest"), fn.append_basic_block("back")
        spun = b.block
        b.cbranch(spent, rest, back)
        b.position_at_end(rest)
        if has_futex(target):
            emit_sleep_until_changed(b, module, target, generation, seen, at(b, sync, SLEEPERS_OFFSET),
                                     BARRIER_SLEEP_NS)
        else:
            b.call(declare(module, "sched_yield", ir.IntType(32), []), [])
        renewed = spin_mark(b, module, target)
        slept = b.block
        b.branch(back)
        b.position_at_end(back)
        following = b.phi(I64, name="mark.next")
        following.add_incoming(carried, spun)
        following.add_incoming(renewed, slept)
        mark.add_incoming(following, back)
    else:
        mark.add_incoming(mark, keep)
    b.branch(spin)
    b.position_at_end(done)
    b.ret_void()
    return fn
