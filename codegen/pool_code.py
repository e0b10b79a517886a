"""The worker pool's native code (runtime/pool.py): one native call runs a compiled entry point on the caller and the
workers that come in time.

One module per process with two exported functions (signatures in codegen/abi.py), so that handing a call to a
worker thread needs neither the GIL nor a sleeping thread's wake-up through Python, and a parallel call is one
foreign call, like a one-thread call (the call stub, codegen/call_stub.py, makes it straight from its frame):
- `i64 braze_pool_run(ptr words, ptr task, ptr controls, i64 enter_budget, i64 join_budget)` runs the entry call
  `words` (TASK_FIELDS, codegen/abi.py; its nthreads the most threads it may use) on the pool whose task block is
  `task` and whose workers' control blocks `controls` points at. It reserves the pool (the task block's busy word;
  a pool that another thread holds makes the call run on the calling thread alone), writes the call into the task
  block, opens its gate and its finished count for a new call number, stores that number into the go word of each
  of the first nthreads - 1 workers and wakes those asleep on a futex. Then it waits until they have all entered or
  `enter_budget` is spent (the caller's choice: a small part of what the call takes, so that waking a sleeping
  worker pays off for a long call and never slows a short one by much) or declined it, closes the gate, runs thread
  0 with the count of threads that came, waits for the finished count to reach the workers that entered (spinning
  for `join_budget`, then sleeping on a futex), adds to the pool's counters and releases the pool. It returns how
  many workers sleep in Python (their Python thread then needs its Event set; never, with futexes).
- `i64 braze_pool_work(ptr task, ptr control, i64 seen, i64 budget)` is a worker's loop: it spins on its go word;
  for a new call it tries to enter the gate (a compare-and-swap that counts it in and gives its thread id) and, once
  in, waits for the gate to close, runs `fn(inputs, weights, outputs, arena, scratch, tid, nthreads, sync)` with the
  closed gate's thread count, adds itself to the finished count and wakes a caller asleep on it. A call whose gate
  has closed, or that the caller has moved on from, it skips. Where it can ask which CPU it runs on (Linux), a
  worker on the CPU the caller posted from declines the call (counted in the declined word, which the caller's gate
  adds to the entered ones), moves itself off that CPU (and gets back every CPU it may run on) and sleeps: the two
  would only take turns on that CPU, and a futex wake, which prefers the CPU a thread slept on, would put it back
  beside the caller for every later call. Once idle for its spin budget
  (codegen.sync.spin_budget; counted from the end of its last call, on x86 including any time it was descheduled,
  and from the end of a call the pool runs without it while that call lasts), it sleeps on its go word (counting
  the sleeps in its sleeps word) and never returns; without futexes it marks itself asleep and returns the last
  call it saw, and the Python thread sleeps until the next post. A go word of QUIT (no call's number) makes it
  return QUIT, and its Python thread ends.
- `void braze_pool_quit(ptr control)` stores QUIT into a worker's go word and wakes it if it sleeps on a futex:
  ThreadPool.stop, at process exit, so that no worker is in the pool's code (memory of the JIT's, which LLVM's
  static destructors free at exit) while the process ends.
So a call runs on the threads that entered in time (thread ids in the order they entered, the caller's 0): a worker
that sleeps, or has lost its core to another process, when the call is posted does not hold it up.
A thread that loses its core in the middle of a call still holds the others up at the next barrier until it gets
the core back (GEMM-like kernels claim their work in chunks, codegen/claims.py, so there it holds up one chunk).
The blocks' layout is codegen/sync_layout.py's. The task block is TASK_BYTES: the TASK_FIELDS words at byte 0, the gate at GATE (the call number above
GATE_CALL_SHIFT bits, then GATE_CLOSED, then the count of workers that entered) with the word of workers asleep until
it closes beside it, the finished count at FINISHED (the call number above the same shift, the count below) with
the caller's joiner word beside it and the declined count after them (the call number above the same shift), and
the busy word, the last call number, the counters (ENTRIES, ALONE, GATE_TICKS, JOIN_TICKS) and the caller's CPU
from BUSY on: separate cache lines for what the poster, the workers and the caller write. A worker's decline that
lands after the call it declined has ended can count for the next one and close that call's gate early: the call
then runs on the threads that did enter, as always. A control block is CONTROL_BYTES: go at byte 0, asleep
at byte 64 and sleeps at 72. The asleep, gate and joiner handshakes are Dekker-style with sequentially consistent
accesses (codegen/futex.py): the sleeper announces itself and then reads the word it waits on, the waker stores
that word and then reads the announcement.
"""
from __future__ import annotations

from typing import Callable

import llvmlite.ir as ir

from .abi import POOL_QUIT, POOL_RUN, POOL_WORK, emit_entry_call, load_task_words
from .futex import emit_sleep_until_changed, emit_wake_sleepers
from .loops import I64, PTR, define_function, i64, mark_explicit
from .sync import BARRIER_SLEEP_NS, BARRIER_SPIN_US, JOIN_SLEEP_NS, at, declare, relax, spin_mark, spin_step
from .sync_layout import (ALONE, ASLEEP, BUSY, CALLS, ENTRIES, FINISHED, GATE, GATE_CALL_SHIFT, GATE_CLOSED, GATE_COUNT,
                          GATE_SLEEPERS, GATE_TICKS, JOIN_TICKS, JOINER, QUIT, SLEEPS, CALLER_CPU, DECLINED, has_futex,
                          knows_cpus, spin_budget)
from .target import Target

# A sleeping worker wakes on a post; the timeout only bounds a wake lost to the 32-bit futex word wrapping around.
# Long, because a worker that woke would run the pool's code, and at process exit LLVM's static destructors free the
# JIT's code while daemon threads still live: a periodic wake landing there was a segfault after a clean run.
WORKER_SLEEP_NS = 3600 * 1_000_000_000
# An idle worker keeps spinning while the pool runs a call without it, at most this long after its own last call
# (see _idle_step), and only while no two readings of the clock are more than DESCHEDULED_US apart.
IDLE_BUSY_MOST_US = 100_000
DESCHEDULED_US = 100
CPU_SET_WORDS = 16   # a cpu_set_t: 1024 CPUs
POOL_MODULE = "braze_pool_v7"


def emit_pool_module(target: Target) -> ir.Module:
    """The module of the worker-pool functions (see the module doc)."""
    module = target.new_module(POOL_MODULE)
    mark_explicit(module)
    post, gate, join = _emit_post(module, target), _emit_gate(module, target), _emit_join(module, target)
    _emit_run(module, target, post, gate, join)
    _emit_work(module, target)
    _emit_quit(module, target)
    return module


def _emit_run(module: ir.Module, target: Target, post: ir.Function, gate: ir.Function, join: ir.Function) -> None:
    fn = POOL_RUN.define(module, "braze_pool_run")
    words, task, controls, enter_budget, join_budget = fn.args
    b = ir.IRBuilder(fn.entry_basic_block)
    call = load_task_words(b, words)
    workers = b.sub(call["nthreads"], i64(1), name="workers")
    reserved = b.cmpxchg(at(b, task, BUSY, "busy"), i64(0), i64(1), "acquire", "monotonic")
    alone, shared = fn.append_basic_block("alone"), fn.append_basic_block("shared")
    b.cbranch(b.extract_value(reserved, 1), shared, alone)
    b.position_at_end(alone)
    emit_entry_call(b, {**call, "nthreads": i64(1)}, i64(0))
    b.ret(i64(0))
    b.position_at_end(shared)
    number = b.add(b.load(at(b, task, CALLS), typ=I64, align=8), i64(1), name="call")
    b.store(number, at(b, task, CALLS), align=8)
    if knows_cpus(target):
        b.atomic_rmw("xchg", at(b, task, CALLER_CPU), _cpu(b, module), "monotonic")
    asleep = b.call(post, [words, task, controls, workers, number], name="asleep")
    posted = spin_mark(b, module, target)
    entered = b.call(gate, [task, workers, enter_budget], name="entered")
    gated = spin_mark(b, module, target)
    emit_entry_call(b, {**call, "nthreads": b.add(entered, i64(1))}, i64(0))
    ran = spin_mark(b, module, target)
    b.call(join, [task, entered, join_budget])
    alone = b.and_(b.icmp_signed(">", workers, i64(0)), b.icmp_signed("==", entered, i64(0)))
    for offset, amount in ((ENTRIES, entered), (ALONE, b.zext(alone, I64)), (GATE_TICKS, b.sub(gated, posted)),
                           (JOIN_TICKS, b.sub(spin_mark(b, module, target), ran))):
        _count_up(b, task, offset, amount)
    b.atomic_rmw("xchg", at(b, task, BUSY), i64(0), "release")
    b.ret(asleep)


def _count_up(b: ir.IRBuilder, task: ir.Value, offset: int, amount: ir.Value) -> None:
    """Add to a counter of the task block that only the pool's holder writes."""
    word = at(b, task, offset)
    b.store(b.add(b.load(word, typ=I64, align=8), amount), word, align=8)


def _emit_post(module: ir.Module, target: Target) -> ir.Function:
    """`i64 post(ptr words, ptr task, ptr controls, i64 workers, i64 call)`: the call into the task block, its gate
    and finished count opened, the go words set; how many workers sleep in Python."""
    fn = define_function(module, "braze.pool.post", [("words", PTR), ("task", PTR), ("controls", PTR),
                                                     ("workers", I64), ("call", I64)], ret=I64, internal=True)
    words, task, controls, workers, call = fn.args
    b = ir.IRBuilder(fn.entry_basic_block)
    for k, value in enumerate(load_task_words(b, words).values()):
        b.store(value, b.gep(task, [i64(k)], source_etype=I64), align=8)
    opened = b.shl(call, i64(GATE_CALL_SHIFT), name="opened")
    b.atomic_rmw("xchg", at(b, task, FINISHED), opened, "seq_cst")
    b.atomic_rmw("xchg", at(b, task, DECLINED), opened, "seq_cst")
    b.atomic_rmw("xchg", at(b, task, GATE), opened, "seq_cst")
    b.ret(_each_control(b, fn, controls, workers, lambda control: _post_one(b, module, target, control, call)))
    return fn


def _post_one(b: ir.IRBuilder, module: ir.Module, target: Target, control: ir.Value, call: ir.Value) -> ir.Value:
    """Post the call to one worker; 1 when the worker sleeps in Python and needs its Event set, else 0."""
    b.atomic_rmw("xchg", control, call, "seq_cst")
    if has_futex(target):
        emit_wake_sleepers(b, module, target, control, at(b, control, ASLEEP))
        return i64(0)
    return b.load_atomic(at(b, control, ASLEEP), "seq_cst", 8, typ=I64)


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


def _spin(b: ir.IRBuilder, module: ir.Module, target: Target, look: Callable[[], tuple[ir.Value, ir.Value]],
          budget: ir.Value, name: str) -> tuple[ir.Value, ir.Value]:
    """Emit a spin that calls look() -> (ready, word) until ready or `budget` is spent; after it, (ready, word) as
    look() last returned them."""
    fn = b.function
    begun = spin_mark(b, module, target)
    entry = b.block
    head, keep, out = (fn.append_basic_block(f"{name}.{part}") for part in ("head", "keep", "out"))
    b.branch(head)
    b.position_at_end(head)
    mark = b.phi(I64, name=f"{name}.mark")
    mark.add_incoming(begun, entry)
    ready, word = look()
    b.cbranch(ready, out, keep)
    b.position_at_end(keep)
    relax(b, module, target)
    spent, carried = spin_step(b, module, target, mark, budget)
    mark.add_incoming(carried, b.block)
    b.cbranch(spent, out, head)
    b.position_at_end(out)
    return ready, word


def _count(b: ir.IRBuilder, word: ir.Value) -> ir.Value:
    return b.and_(word, i64(GATE_COUNT))


def _emit_gate(module: ir.Module, target: Target) -> ir.Function:
    """`i64 gate(ptr task, i64 workers, i64 budget)`: wait for the workers to enter, close the gate; how many came."""
    fn = define_function(module, "braze.pool.gate", [("task", PTR), ("workers", I64), ("budget", I64)], ret=I64,
                         internal=True)
    task, workers, budget = fn.args
    b = ir.IRBuilder(fn.entry_basic_block)
    gate = at(b, task, GATE, "gate")

    def all_in() -> tuple[ir.Value, ir.Value]:
        word = b.load_atomic(gate, "acquire", 8, typ=I64, name="gate.now")
        came = _count(b, word)
        if knows_cpus(target):  # a worker that declined will not come
            came = b.add(came, _count(b, b.load_atomic(at(b, task, DECLINED), "acquire", 8, typ=I64)))
        return b.icmp_signed(">=", came, workers), word
    _spin(b, module, target, all_in, budget, "enter")
    closed = b.atomic_rmw("or", gate, i64(GATE_CLOSED), "seq_cst", name="closed")
    if has_futex(target):
        emit_wake_sleepers(b, module, target, gate, at(b, task, GATE_SLEEPERS))
    b.ret(_count(b, closed))
    return fn


def _emit_work(module: ir.Module, target: Target) -> None:
    fn = POOL_WORK.define(module, "braze_pool_work")
    task, control, seen0, budget = fn.args
    b = ir.IRBuilder(fn.entry_basic_block)
    asleep = at(b, control, ASLEEP, "asleep")
    b.atomic_rmw("xchg", asleep, i64(0), "seq_cst")
    begun = spin_mark(b, module, target)
    entry = b.block
    spin, relax_block, idle, run = (fn.append_basic_block(n) for n in ("spin", "relax", "idle", "run"))
    b.branch(spin)
    b.position_at_end(spin)
    seen, mark = b.phi(I64, name="seen"), b.phi(I64, name="mark")
    since, last = b.phi(I64, name="since"), b.phi(I64, name="last")  # its last call's end; the last clock reading
    for phi, value in ((seen, seen0), (mark, begun), (since, begun), (last, begun)):
        phi.add_incoming(value, entry)
    go = b.load_atomic(control, "acquire", 8, typ=I64, name="go")
    b.cbranch(b.icmp_signed("!=", go, seen), run, relax_block)
    b.position_at_end(run)
    call = b.phi(I64, name="call")
    call.add_incoming(go, spin)
    b.position_at_end(relax_block)
    relax(b, module, target)
    if target.is_x86:
        spent, carried, now = _idle_step(b, module, target, task, mark, since, last, budget)
    else:
        (spent, carried), now = spin_step(b, module, target, mark, budget), last
    if knows_cpus(target):  # spinning on the caller's CPU would only keep the caller from it
        spent = b.or_(spent, _on_callers_cpu(b, module, task), name="idle")
    for phi, value in ((seen, seen), (mark, carried), (since, since), (last, now)):
        phi.add_incoming(value, b.block)
    b.cbranch(spent, idle, spin)
    b.position_at_end(idle)
    if has_futex(target):  # sleep natively until the next post; after a timeout, straight back to sleep
        b.atomic_rmw("add", at(b, control, SLEEPS), i64(1), "monotonic")  # counted as it goes to sleep
        emit_sleep_until_changed(b, module, target, control, seen, asleep, WORKER_SLEEP_NS)
        for phi, value in ((seen, seen), (mark, carried), (since, since), (last, last)):  # still spent
            phi.add_incoming(value, b.block)
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
    leave_pool, stay = fn.append_basic_block("quit"), fn.append_basic_block("stay")
    b.cbranch(b.icmp_signed("==", call, i64(QUIT)), leave_pool, stay)
    b.position_at_end(leave_pool)
    b.ret(i64(QUIT))
    b.position_at_end(stay)
    _enter_and_run(b, module, target, task, call)
    ended = spin_mark(b, module, target)
    for phi, value in ((seen, call), (mark, ended), (since, ended), (last, ended)):
        phi.add_incoming(value, b.block)
    b.branch(spin)


def _emit_quit(module: ir.Module, target: Target) -> None:
    fn = POOL_QUIT.define(module, "braze_pool_quit")
    control, = fn.args
    b = ir.IRBuilder(fn.entry_basic_block)
    b.atomic_rmw("xchg", control, i64(QUIT), "seq_cst")
    if has_futex(target):
        emit_wake_sleepers(b, module, target, control, at(b, control, ASLEEP))
    b.ret_void()


def _cpu(b: ir.IRBuilder, module: ir.Module) -> ir.Value:
    """The CPU the calling thread runs on now (libc's sched_getcpu, a vDSO call on Linux), as i64."""
    return b.sext(b.call(declare(module, "sched_getcpu", ir.IntType(32), []), []), I64)


def _emit_leave_cpu(module: ir.Module) -> ir.Function:
    """`void leave(i64 cpu)`: move the calling thread off `cpu` and give it back the CPUs it may run on. A futex
    wake puts a thread on the CPU it last ran on when that one is free, so a worker that declined a call on the
    caller's CPU and slept there would be woken there for every later call too, and decline them all; moved once,
    it wakes beside the caller. Nothing happens where the thread may run on `cpu` alone."""
    name = "braze_pool_leave_cpu"
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64]), name)
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    cpu, = fn.args
    i32, words = ir.IntType(32), ir.ArrayType(I64, CPU_SET_WORDS)
    get = declare(module, "sched_getaffinity", i32, [i32, I64, PTR])
    set_ = declare(module, "sched_setaffinity", i32, [i32, I64, PTR])
    allowed, away = b.alloca(words, name="allowed"), b.alloca(words, name="away")
    size = i64(8 * CPU_SET_WORDS)
    leave, move, done = (fn.append_basic_block(n) for n in ("leave", "move", "done"))
    got = b.call(get, [ir.Constant(i32, 0), size, allowed])
    known = b.and_(b.icmp_signed("==", got, ir.Constant(i32, 0)),
                   b.and_(b.icmp_signed(">=", cpu, i64(0)), b.icmp_signed("<", cpu, i64(64 * CPU_SET_WORDS))))
    b.cbranch(known, leave, done)
    b.position_at_end(leave)
    others = ir.Constant(I64, 0)
    for k in range(CPU_SET_WORDS):
        word = b.load(b.gep(allowed, [i64(0), i64(k)], inbounds=True), typ=I64)
        bit = b.select(b.icmp_signed("==", b.sdiv(cpu, i64(64)), i64(k)), b.shl(i64(1), b.srem(cpu, i64(64))),
                       i64(0))
        kept = b.and_(word, b.xor(bit, i64(-1)))
        b.store(kept, b.gep(away, [i64(0), i64(k)], inbounds=True))
        others = b.or_(others, kept)
    b.cbranch(b.icmp_unsigned("!=", others, i64(0)), move, done)
    b.position_at_end(move)
    b.call(set_, [ir.Constant(i32, 0), size, away])      # moves the thread now
    b.call(set_, [ir.Constant(i32, 0), size, allowed])   # and lets it go anywhere again, from where it is
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    return fn


def _on_callers_cpu(b: ir.IRBuilder, module: ir.Module, task: ir.Value) -> ir.Value:
    """Whether this thread runs on the CPU the caller of the latest call posted it from."""
    caller = b.load_atomic(at(b, task, CALLER_CPU), "monotonic", 8, typ=I64)
    return b.icmp_signed("==", _cpu(b, module), caller, name="beside.caller")


def _idle_step(b: ir.IRBuilder, module: ir.Module, target: Target, task: ir.Value, mark: ir.Value, since: ir.Value,
               last: ir.Value, budget: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """One more spin of an idle worker (x86, budgets in time-stamp-counter ticks): (whether it should sleep, the
    mark its budget counts from, the clock now). While the pool runs a call, one this worker came too late for
    (or was not posted), the budget counts from that call's end rather than from this worker's last call: the
    caller's next call follows at once and finds the worker awake, where a worker that slept through a long call
    it missed would miss the next one too, waking up late again. Not for longer than IDLE_BUSY_MOST_US after its
    own last call, and not across a loss of its core: a reading of the clock more than DESCHEDULED_US after the
    previous one extends nothing, so a worker kept from its core for longer than its budget sleeps as before."""
    now = spin_mark(b, module, target)
    busy = b.icmp_unsigned("!=", b.load_atomic(at(b, task, BUSY), "monotonic", 8, typ=I64), i64(0))
    recent = b.icmp_unsigned("<", b.sub(now, since), i64(spin_budget(target, IDLE_BUSY_MOST_US)))
    running = b.icmp_unsigned("<", b.sub(now, last), i64(spin_budget(target, DESCHEDULED_US)))
    extend = b.and_(busy, b.and_(recent, running), name="extend")
    carried = b.select(extend, now, mark, name="mark.next")
    return b.icmp_unsigned(">=", b.sub(now, carried), budget), carried, now


def _enter_and_run(b: ir.IRBuilder, module: ir.Module, target: Target, task: ir.Value, call: ir.Value) -> None:
    """A worker's part of `call`: enter its gate or, when the gate has closed or the call is over, skip it."""
    fn = b.function
    gate = at(b, task, GATE, "gate")
    opened = b.shl(call, i64(GATE_CALL_SHIFT))
    enter, attempt, inside, skip = (fn.append_basic_block(n) for n in ("enter", "enter.try", "inside", "skip"))
    b.branch(enter)
    b.position_at_end(enter)
    word = b.load_atomic(gate, "acquire", 8, typ=I64, name="gate.seen")
    open_now = b.icmp_signed("==", b.and_(word, i64(~GATE_COUNT)), opened)  # this call's, not closed
    if knows_cpus(target):
        # on the caller's CPU the two would take turns on one core: decline, so that the caller need not wait
        consider, decline = fn.append_basic_block("enter.consider"), fn.append_basic_block("enter.decline")
        b.cbranch(open_now, consider, skip)
        b.position_at_end(consider)
        b.cbranch(_on_callers_cpu(b, module, task), decline, attempt)
        b.position_at_end(decline)
        b.atomic_rmw("add", at(b, task, DECLINED), i64(1), "seq_cst")
        b.call(_emit_leave_cpu(module), [b.load_atomic(at(b, task, CALLER_CPU), "monotonic", 8, typ=I64)])
        b.branch(skip)
    else:
        b.cbranch(open_now, attempt, skip)
    b.position_at_end(attempt)
    swapped = b.cmpxchg(gate, word, b.add(word, i64(1)), "acq_rel", "acquire")
    b.cbranch(b.extract_value(swapped, 1), inside, enter)
    b.position_at_end(inside)
    tid = b.add(_count(b, word), i64(1), name="tid")
    closed = _wait_closed(b, module, target, task, gate)
    words = {**load_task_words(b, task), "nthreads": b.add(_count(b, closed), i64(1), name="nthreads")}
    emit_entry_call(b, words, tid)
    finished = at(b, task, FINISHED, "finished")
    b.atomic_rmw("add", finished, i64(1), "seq_cst")
    if has_futex(target):
        emit_wake_sleepers(b, module, target, finished, at(b, task, JOINER))
    b.branch(skip)
    b.position_at_end(skip)


def _wait_closed(b: ir.IRBuilder, module: ir.Module, target: Target, task: ir.Value, gate: ir.Value) -> ir.Value:
    """Wait until the caller closes the gate; its closed value."""
    return _wait(b, module, target, gate, lambda word: b.icmp_unsigned("!=", b.and_(word, i64(GATE_CLOSED)), i64(0)),
                 i64(spin_budget(target, BARRIER_SPIN_US)), at(b, task, GATE_SLEEPERS), BARRIER_SLEEP_NS, "close")


def _emit_join(module: ir.Module, target: Target) -> ir.Function:
    """`void join(ptr task, i64 entered, i64 budget)`: return once the workers that entered have finished (spinning
    for `budget`, then sleeping on the finished count, at most JOIN_SLEEP_NS at a time; without futexes, spinning)."""
    fn = define_function(module, "braze.pool.join", [("task", PTR), ("entered", I64), ("budget", I64)],
                         internal=True)
    task, entered, budget = fn.args
    b = ir.IRBuilder(fn.entry_basic_block)
    _wait(b, module, target, at(b, task, FINISHED, "finished"),
          lambda word: b.icmp_signed(">=", _count(b, word), entered), budget, at(b, task, JOINER), JOIN_SLEEP_NS, "join")
    b.ret_void()
    return fn


def _wait(b: ir.IRBuilder, module: ir.Module, target: Target, word: ir.Value, ready: Callable[[ir.Value], ir.Value],
          budget: ir.Value, sleepers: ir.Value, sleep_ns: int, name: str) -> ir.Value:
    """Emit a wait until ready(the value at `word`): spin for `budget`, then sleep on the word (a futex announced
    in `sleepers`, at most `sleep_ns`; without futexes, spin again), and again; the value found ready."""
    fn = b.function
    head, nap, done = (fn.append_basic_block(f"{name}.{part}") for part in ("wait", "sleep", "done"))
    b.branch(head)
    b.position_at_end(head)

    def look() -> tuple[ir.Value, ir.Value]:
        value = b.load_atomic(word, "acquire", 8, typ=I64, name=f"{name}.now")
        return ready(value), value
    ok, value = _spin(b, module, target, look, budget, name)
    b.cbranch(ok, done, nap)
    b.position_at_end(nap)
    if has_futex(target):
        emit_sleep_until_changed(b, module, target, word, value, sleepers, sleep_ns)
    b.branch(head)
    b.position_at_end(done)
    return value


__all__ = ["POOL_MODULE", "emit_pool_module"]
