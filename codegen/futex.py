"""Sleeping in native code until a word changes: Linux futexes through libc's syscall(), for codegen/sync.py.

A thread that has spun for a while without seeing a word change asks the kernel to put it to sleep while the word
still holds the value it last saw (FUTEX_WAIT, private to the process); the thread that changes the word then wakes
the sleepers (FUTEX_WAKE), but only when one has announced itself in a sleepers word, so that the common case,
where nobody sleeps, costs no system call. The announcement is Dekker-style with sequentially consistent accesses:
a sleeper adds itself to the sleepers word and then reads the word it waits on; a waker changes the word and then
reads the sleepers word; at least one of them sees the other's store, and the kernel's own compare of the word
makes a wake that comes just before the sleep harmless.

A futex is 32 bits: the waits compare the low half of braze's 64-bit counters (x86 and AArch64 are little-endian,
so that half comes first), which changes with every increment. Each wait is bounded by a timeout, a safety net
against a wake-up that never comes. `has_futex(target)` (codegen/sync_layout.py) is False where braze knows no futex
system call (not
Linux, or another architecture); the callers then keep spinning, with sched_yield now and then.
"""
from __future__ import annotations

import llvmlite.ir as ir

from .loops import I64, PTR, alloca, i64
from .sync_layout import futex_number
from .target import Target

FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
WAKE_ALL = 2 ** 31 - 1
TIMESPEC = ir.LiteralStructType([I64, I64])


def _syscall(module: ir.Module) -> ir.Function:
    try:
        return module.get_global("syscall")
    except KeyError:
        return ir.Function(module, ir.FunctionType(I64, [I64], var_arg=True), "syscall")


def emit_wait(b: ir.IRBuilder, module: ir.Module, target: Target, word: ir.Value, seen: ir.Value,
              timeout_ns: int) -> None:
    """Sleep while the low 32 bits at `word` equal those of `seen` (i64), at most `timeout_ns`; returns at once
    when they differ, on a wake, on a signal or at the timeout: callers re-check what they wait for."""
    timespec = alloca(b, TIMESPEC, name="futex.timeout")
    b.store(ir.Constant(TIMESPEC, [i64(timeout_ns // 10 ** 9), i64(timeout_ns % 10 ** 9)]), timespec)
    expected = b.and_(seen, i64(0xFFFFFFFF))
    b.call(_syscall(module), [i64(futex_number(target)), word, i64(FUTEX_WAIT_PRIVATE), expected, timespec,
                              ir.Constant(PTR, None), i64(0)])


def emit_wake(b: ir.IRBuilder, module: ir.Module, target: Target, word: ir.Value) -> None:
    """Wake every thread sleeping on `word`."""
    b.call(_syscall(module), [i64(futex_number(target)), word, i64(FUTEX_WAKE_PRIVATE), i64(WAKE_ALL),
                              ir.Constant(PTR, None), ir.Constant(PTR, None), i64(0)])


def emit_sleep_until_changed(b: ir.IRBuilder, module: ir.Module, target: Target, word: ir.Value, seen: ir.Value,
                             sleepers: ir.Value, timeout_ns: int) -> None:
    """Announce this thread in `sleepers`, sleep on `word` unless it has moved on from `seen`, then withdraw."""
    b.atomic_rmw("add", sleepers, i64(1), "seq_cst")
    now = b.load_atomic(word, "seq_cst", 8, typ=I64)
    fn = b.function
    sleep, awake = fn.append_basic_block("futex.sleep"), fn.append_basic_block("futex.awake")
    b.cbranch(b.icmp_signed("==", now, seen), sleep, awake)
    b.position_at_end(sleep)
    emit_wait(b, module, target, word, seen, timeout_ns)
    b.branch(awake)
    b.position_at_end(awake)
    b.atomic_rmw("sub", sleepers, i64(1), "seq_cst")


def emit_wake_sleepers(b: ir.IRBuilder, module: ir.Module, target: Target, word: ir.Value,
                       sleepers: ir.Value) -> None:
    """After changing `word` (with a sequentially consistent store): wake its sleepers if any announced itself."""
    fn = b.function
    wake, done = fn.append_basic_block("futex.wake"), fn.append_basic_block("futex.woken")
    count = b.load_atomic(sleepers, "seq_cst", 8, typ=I64)
    b.cbranch(b.icmp_signed(">", count, i64(0)), wake, done)
    b.position_at_end(wake)
    emit_wake(b, module, target, word)
    b.branch(done)
    b.position_at_end(done)
