"""Native synchronization: the barrier between the kernels of a multi-threaded call, and the worker-pool loop.

Barrier. `braze.barrier(ptr sync, i64 nthreads)` is emitted into each whole-graph module and works on SYNC_BYTES
of zeroed memory the runtime owns per executable: an arrival counter at byte 0, an abort flag at byte
ABORT_OFFSET and a generation counter at byte GENERATION_OFFSET (its own cache line, so spinning readers of the
generation do not slow the arrivals), followed by the status words of the run-time checks and the claim words of
dynamic work claiming (codegen/abi.py). With one thread it returns at once. The abort flag is the runtime's way out
when one thread of a call never reaches the native code (an exception in Python just before its foreign call):
the runtime sets it, every thread waiting at a barrier returns, and the runtime discards the call's results,
waits for all threads and zeroes the block before the next call.

Worker pool (runtime/pool.py), one module per process with three exported functions (signatures in codegen/abi.py),
so that handing a call to a worker thread needs neither the GIL nor a sleeping thread's wake-up through Python:
- `i64 braze_pool_post(ptr task, ptr fn, ptr inputs, ptr weights, ptr outputs, ptr arena, ptr scratch,
  i64 nthreads, ptr sync, ptr controls, i64 workers, i64 call)` writes the call into the task block, then stores
  `call` into the go word of each of the first `workers` control blocks and wakes those asleep on a futex; returns
  how many of them sleep in Python instead (their Python thread then needs its Event set; never, with futexes).
- `i64 braze_pool_work(ptr task, ptr control, i64 tid, i64 seen, i64 budget)` is a worker's loop: it spins on its
  go word; for every new call it runs `fn(inputs, weights, outputs, arena, scratch, tid, nthreads, sync)`, stores
  the call number in its done word and wakes a caller asleep on it. Once idle for its spin budget (spin_budget;
  counted from the end of its last call, on x86 including any time it was descheduled), it sleeps on its go
  word (counting the sleeps in its sleeps word) and never returns; without futexes it marks itself asleep and
  returns the last call it ran, and the Python thread sleeps until the next post.
- `i64 braze_pool_join(ptr controls, i64 workers, i64 call, i64 budget)` spins until every done word holds `call`
  (1) or the spin budget runs out; then, with futexes, it sleeps once on an unfinished worker's done word (at most
  JOIN_SLEEP_NS) and returns 0, as it does at once without futexes: the caller calls it again.
A control block is CONTROL_BYTES: go at byte 0, asleep at byte 64 and sleeps at 72, done at byte 128 and the
caller's joiner word at 136 (separate cache lines for what the poster, the worker and the caller write). The asleep
and joiner handshakes are Dekker-style with sequentially consistent accesses (codegen/futex.py): the sleeper
announces itself and then reads the word it waits on, the waker stores that word and then reads the announcement.
With futexes the barrier's waiters, after spinning for BARRIER_SPIN_US, sleep on the generation the same way,
announcing themselves in the word at SLEEPERS_OFFSET, and wake at the latest every BARRIER_SLEEP_NS to look at the
abort flag.
"""
from __future__ import annotations

import llvmlite.ir as ir

from .abi import POOL_JOIN, POOL_POST, POOL_WORK, TASK_FIELDS, emit_entry_call
from .futex import emit_sleep_until_changed, emit_wake_sleepers, has_futex
from .loops import I1, I8, I64, PTR, VOID, define_function, for_range, i64
from .sync_layout import ABORT_OFFSET, ASLEEP, CONTROL_BYTES, DONE, GENERATION_OFFSET, JOINER, SLEEPERS_OFFSET, SLEEPS, \
    SYNC_BYTES, spin_budget
from .target import Target

# At a barrier: long enough to cover the usual imbalance between the threads of a kernel, short enough that a
# thread waiting for one that lost its core soon gives its own core up (to that thread, or to whatever else runs).
BARRIER_SPIN_US = 40
# The longest futex sleep before a waiter looks again (at the barrier's abort flag; a joining caller returns to
# Python to take signals).
BARRIER_SLEEP_NS = 2_000_000
JOIN_SLEEP_NS = 20_000_000
WORKER_SLEEP_NS = 1_000_000_000

POOL_MODULE = "braze_pool_v2"


def declare(module: ir.Module, name: str, ret: ir.Type, params: list[ir.Type]) -> ir.Function:
    """The function `name` of the module, declared with this signature on first use (intrinsics, libc)."""
    try:
        return module.get_global(name)
    except KeyError:
        return ir.Function(module, ir.FunctionType(ret, params), name)


def _at(b: ir.IRBuilder, base: ir.Value, offset: int, name: str = "") -> ir.Value:
    return b.gep(base, [i64(offset)], inbounds=True, source_etype=I8, name=name)


def _relax(b: ir.IRBuilder, module: ir.Module, target: Target) -> None:
    """A spin-wait hint to the core (x86 `pause`), where the target has one."""
    if target.is_x86:
        b.call(declare(module, "llvm.x86.sse2.pause", VOID, []), [])


def _spin_mark(b: ir.IRBuilder, module: ir.Module, target: Target) -> ir.Value:
    """Where a spin starts: the time-stamp counter on x86, a spin count of 0 elsewhere."""
    if target.is_x86:
        return b.call(declare(module, "llvm.x86.rdtsc", I64, []), [], name="tsc")
    return i64(0)


def _spin_step(b: ir.IRBuilder, module: ir.Module, target: Target, mark: ir.Value,
               budget: ir.Value) -> tuple[ir.Value, ir.Value]:
    """After one more spin of the spin begun at `mark`: (whether its budget is spent, the mark to carry on)."""
    if target.is_x86:
        now = b.call(declare(module, "llvm.x86.rdtsc", I64, []), [], name="tsc.now")
        return b.icmp_unsigned(">=", b.sub(now, mark), budget), mark
    following = b.add(mark, i64(1), name="spins.next")
    return b.icmp_signed(">=", following, budget), following


def _has_sched_yield(target: Target) -> bool:
    return any(os in target.triple for os in ("linux", "darwin", "freebsd", "netbsd", "openbsd"))


def emit_barrier(module: ir.Module, target: Target) -> ir.Function:
    """`void braze.barrier(ptr sync, i64 nthreads)`: returns once all nthreads threads have arrived.

    The last thread to arrive resets the arrival counter, bumps the generation and wakes the sleepers, if any; the
    others spin until they see the generation change (acquire) or the abort flag set, with `pause` between reads,
    and after each BARRIER_SPIN_US of spinning (a spin budget, see above) sleep on the generation (a futex; sched_yield where there is none), so that a thread waiting for one that lost its core
    gives the core up. Reading the generation before arriving makes the barrier reusable: a thread that races ahead
    to the next barrier arrives only after the reset it observed.
    """
    fn = define_function(module, "braze.barrier", [("sync", PTR), ("nthreads", I64)], internal=True)
    fn.attributes.add("noinline")
    sync, nthreads = fn.args
    b = ir.IRBuilder(fn.entry_basic_block)
    arrive, last, wait, spin, done = (fn.append_basic_block(n) for n in ("arrive", "last", "wait", "spin", "done"))
    b.cbranch(b.icmp_signed("<=", nthreads, i64(1)), done, arrive)
    b.position_at_end(arrive)
    generation, abort = _at(b, sync, GENERATION_OFFSET, "generation"), _at(b, sync, ABORT_OFFSET, "abort")
    seen = b.load_atomic(generation, "acquire", 8, typ=I64, name="seen")
    before = b.atomic_rmw("add", sync, i64(1), "acq_rel", name="before")
    b.cbranch(b.icmp_signed("==", before, b.sub(nthreads, i64(1))), last, wait)
    b.position_at_end(last)
    b.atomic_rmw("xchg", sync, i64(0), "monotonic")  # store_atomic needs typed pointers in llvmlite
    b.atomic_rmw("add", generation, i64(1), "seq_cst")
    if has_futex(target):
        emit_wake_sleepers(b, module, target, generation, _at(b, sync, SLEEPERS_OFFSET))
    b.branch(done)
    b.position_at_end(wait)
    begun = _spin_mark(b, module, target)
    b.branch(spin)
    b.position_at_end(spin)
    mark = b.phi(I64, name="mark")
    mark.add_incoming(begun, wait)
    now = b.load_atomic(generation, "acquire", 8, typ=I64, name="now")
    stop = b.load_atomic(abort, "monotonic", 8, typ=I64, name="stop")
    keep = fn.append_basic_block("keep")
    b.cbranch(b.or_(b.icmp_signed("!=", now, seen), b.icmp_signed("!=", stop, i64(0))), done, keep)
    b.position_at_end(keep)
    _relax(b, module, target)
    if has_futex(target) or _has_sched_yield(target):
        spent, carried = _spin_step(b, module, target, mark, i64(spin_budget(target, BARRIER_SPIN_US)))
        rest, back = fn.append_basic_block("rest"), fn.append_basic_block("back")
        spun = b.block
        b.cbranch(spent, rest, back)
        b.position_at_end(rest)
        if has_futex(target):
            emit_sleep_until_changed(b, module, target, generation, seen, _at(b, sync, SLEEPERS_OFFSET),
                                     BARRIER_SLEEP_NS)
        else:
            b.call(declare(module, "sched_yield", ir.IntType(32), []), [])
        renewed = _spin_mark(b, module, target)
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


def emit_pool_module(target: Target) -> ir.Module:
    """The module of the worker-pool functions (see the module doc)."""
    module = target.new_module(POOL_MODULE)
    _emit_post(module, target)
    _emit_work(module, target)
    _emit_join(module, target)
    return module


def _emit_post(module: ir.Module, target: Target) -> None:
    fn = POOL_POST.define(module, "braze_pool_post")
    args = {a.name: a for a in fn.args}
    b = ir.IRBuilder(fn.entry_basic_block)
    for k, field in enumerate(TASK_FIELDS):
        b.store(args[field], b.gep(args["task"], [i64(k)], source_etype=args[field].type), align=8)
    asleep = _each_control(b, fn, args["controls"], args["workers"],
                           lambda control: _post_one(b, module, target, control, args["call"]))
    b.ret(asleep)


def _post_one(b: ir.IRBuilder, module: ir.Module, target: Target, control: ir.Value, call: ir.Value) -> ir.Value:
    """Post the call to one worker; 1 when the worker sleeps in Python and needs its Event set, else 0."""
    b.atomic_rmw("xchg", control, call, "seq_cst")
    if has_futex(target):
        emit_wake_sleepers(b, module, target, control, _at(b, control, ASLEEP))
        return i64(0)
    return b.load_atomic(_at(b, control, ASLEEP), "seq_cst", 8, typ=I64)


def _each_control(b: ir.IRBuilder, fn: ir.Function, controls: ir.Value, workers: ir.Value, body) -> ir.Value:
    """Sum of body(control) over the first `workers` control pointers."""
    entry = b.block
    loop, step, done = (fn.append_basic_block(n) for n in ("each", "each.body", "each.done"))
    b.branch(loop)
    b.position_at_end(loop)
    k, total = b.phi(I64, name="k"), b.phi(I64, name="total")
    k.add_incoming(i64(0), entry)
    total.add_incoming(i64(0), entry)
    b.cbranch(b.icmp_signed("<", k, workers), step, done)
    b.position_at_end(step)
    control = b.load(b.gep(controls, [k], source_etype=PTR), typ=PTR, align=8)
    value = body(control)
    k.add_incoming(b.add(k, i64(1)), b.block)
    total.add_incoming(b.add(total, value), b.block)
    b.branch(loop)
    b.position_at_end(done)
    return total


def _emit_work(module: ir.Module, target: Target) -> None:
    fn = POOL_WORK.define(module, "braze_pool_work")
    task, control, tid, seen0, budget = fn.args
    b = ir.IRBuilder(fn.entry_basic_block)
    asleep, done_word = _at(b, control, ASLEEP, "asleep"), _at(b, control, DONE, "done")
    b.atomic_rmw("xchg", asleep, i64(0), "seq_cst")
    begun = _spin_mark(b, module, target)
    entry = b.block
    spin, relax, idle, run = (fn.append_basic_block(n) for n in ("spin", "relax", "idle", "run"))
    b.branch(spin)
    b.position_at_end(spin)
    seen, mark = b.phi(I64, name="seen"), b.phi(I64, name="mark")
    seen.add_incoming(seen0, entry)
    mark.add_incoming(begun, entry)
    go = b.load_atomic(control, "acquire", 8, typ=I64, name="go")
    b.cbranch(b.icmp_signed("!=", go, seen), run, relax)
    b.position_at_end(run)
    call = b.phi(I64, name="call")
    call.add_incoming(go, spin)
    b.position_at_end(relax)
    _relax(b, module, target)
    spent, carried = _spin_step(b, module, target, mark, budget)
    seen.add_incoming(seen, relax)
    mark.add_incoming(carried, relax)
    b.cbranch(spent, idle, spin)
    b.position_at_end(idle)
    if has_futex(target):  # sleep natively until the next post; after a timeout, straight back to sleep
        emit_sleep_until_changed(b, module, target, control, seen, asleep, WORKER_SLEEP_NS)
        b.atomic_rmw("add", _at(b, control, SLEEPS), i64(1), "monotonic")
        seen.add_incoming(seen, b.block)
        mark.add_incoming(carried, b.block)  # still spent
        b.branch(spin)
    else:  # announce the sleep, then look at go once more (the poster reads asleep), and return to Python
        b.atomic_rmw("xchg", asleep, i64(1), "seq_cst")
        late = b.load_atomic(control, "seq_cst", 8, typ=I64, name="late")
        woke, leave = fn.append_basic_block("woke"), fn.append_basic_block("leave")
        b.cbranch(b.icmp_signed("!=", late, seen), woke, leave)
        b.position_at_end(woke)
        b.atomic_rmw("xchg", asleep, i64(0), "seq_cst")
        call.add_incoming(late, woke)
        b.branch(run)
        b.position_at_end(leave)
        b.ret(seen)
    b.position_at_end(run)
    words = {field: b.load(b.gep(task, [i64(k)], source_etype=I64), typ=I64, align=8, name=field)
             for k, field in enumerate(TASK_FIELDS)}
    emit_entry_call(b, words, tid)
    b.atomic_rmw("xchg", done_word, call, "seq_cst")
    if has_futex(target):
        emit_wake_sleepers(b, module, target, done_word, _at(b, control, JOINER))
    seen.add_incoming(call, b.block)
    mark.add_incoming(_spin_mark(b, module, target), b.block)
    b.branch(spin)


def _emit_join(module: ir.Module, target: Target) -> None:
    fn = POOL_JOIN.define(module, "braze_pool_join")
    controls, workers, call, budget = fn.args
    b = ir.IRBuilder(fn.entry_basic_block)
    begun = _spin_mark(b, module, target)
    entry = b.block
    spin, relax, done = (fn.append_basic_block(n) for n in ("spin", "relax", "done"))
    b.branch(spin)
    b.position_at_end(spin)
    mark, spent = b.phi(I64, name="mark"), b.phi(I1, name="spent")
    mark.add_incoming(begun, entry)
    spent.add_incoming(ir.Constant(I1, 0), entry)
    finished = _each_control(b, fn, controls, workers, lambda control: b.zext(
        b.icmp_signed("==", b.load_atomic(_at(b, control, DONE), "acquire", 8, typ=I64), call), I64))
    all_done = b.icmp_signed("==", finished, workers)
    b.cbranch(b.or_(all_done, spent), done, relax)
    b.position_at_end(relax)
    _relax(b, module, target)
    over, carried = _spin_step(b, module, target, mark, budget)
    mark.add_incoming(carried, relax)
    spent.add_incoming(over, relax)
    b.branch(spin)
    b.position_at_end(done)
    if has_futex(target):
        finish, sleep = fn.append_basic_block("joined"), fn.append_basic_block("join.sleep")
        b.cbranch(all_done, finish, sleep)
        b.position_at_end(sleep)
        _sleep_on_a_worker(b, module, target, controls, workers, call)
        b.ret(i64(0))
        b.position_at_end(finish)
    b.ret(b.zext(all_done, I64))


def _sleep_on_a_worker(b: ir.IRBuilder, module: ir.Module, target: Target, controls: ir.Value, workers: ir.Value,
                       call: ir.Value) -> None:
    """Sleep (once, at most JOIN_SLEEP_NS) on the done word of the first worker that has not finished `call`."""
    fn = b.function
    with for_range(b, 0, workers, name="w") as k:
        control = b.load(b.gep(controls, [k], source_etype=PTR), typ=PTR, align=8)
        done_word = _at(b, control, DONE)
        last = b.load_atomic(done_word, "seq_cst", 8, typ=I64)
        sleep, next_worker = fn.append_basic_block("w.sleep"), fn.append_basic_block("w.next")
        b.cbranch(b.icmp_signed("!=", last, call), sleep, next_worker)
        b.position_at_end(sleep)
        emit_sleep_until_changed(b, module, target, done_word, last, _at(b, control, JOINER), JOIN_SLEEP_NS)
        b.ret(i64(0))
        b.position_at_end(next_worker)
