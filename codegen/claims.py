"""Dynamic work claiming: the threads of a call take chunks of a kernel's units from a shared counter.

A kernel whose work splits into many independent units (rows, planes, GEMM panels) does not cut them into one
fixed share per thread: each thread repeatedly claims the next `chunk` units from an atomic counter until none
are left, so a thread that lost its core or runs slower simply claims fewer. Each unit is still computed by exactly
one thread, and what a unit computes does not depend on which thread computes it, so results are bit-identical for
every thread count.

A loop's claim words are two i64 in the call's sync block (codegen/abi.py, CLAIM_OFFSET; one slot per claimed loop
of a kernel): the next unclaimed unit, and how many threads have left the loop. Every thread of a call runs every
kernel, so the last of them to leave knows that nobody reads the counter any more and zeroes both words; it does so
before it arrives at the barrier that precedes the next kernel, so the next kernel (and the first kernel of the next
call, which starts only after every thread has finished this one) finds them zero without a barrier of its own.
Two loops of one kernel, with no barrier between them, need two slots. With one thread, or without claim words (a
null pointer), each thread takes its static share of the units in one chunk and touches no shared memory.

How big a chunk is: the units left over CLAIMS_PER_THREAD times the thread count, so that chunks shrink as the loop
nears its end and the threads finish together, but never more than the first chunk nor less than a TAIL_SPLIT-th
of it, so that a loop costs a few dozen claims however many units it has. With a fixed chunk, the last one could
leave a thread idle for most of a chunk: SGEMM n = 512 on two threads claimed its 43 row panels 6 at a time, one
thread computing 24 and the other 19 (188-191 GFLOP/s; with shrinking chunks 209-216).
A claim reads the counter and compare-and-swaps it forward by the chunk that what is left asks for.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import llvmlite.ir as ir

from .loops import I64, PTR, i64

# Chunks per thread when all run at the same speed: enough that a thread running at half speed ends at most one
# small chunk after the others, few enough that the atomic claims cost nothing next to the work.
CLAIMS_PER_THREAD = 4
TAIL_SPLIT = 4  # the last chunks are at least the first one's size over this
LEAVERS_BYTE = 8  # the leavers word, after the counter


@contextmanager
def claimed_chunks(b: ir.IRBuilder, claim: ir.Value, tid: ir.Value, nthreads: ir.Value, units: int, *,
                   name: str = "claim", also: Sequence[ir.Value] = ()) -> Iterator[tuple[ir.Value, ir.Value]]:
    """Emit a loop over the chunks [start, stop) of [0, units) this thread claims, the body once (yielded).

    `claim` points at the claim words. With one thread or a null `claim` the thread takes its static share instead:
    units [tid*units/nthreads, (tid+1)*units/nthreads), contiguous, in one chunk. An invalid tid (outside
    [0, nthreads)) takes nothing and leaves the words alone. The last thread to leave also zeroes the i64 words in
    `also` (words every thread is done with once it has entered this loop: codegen/gemm_driver.py's done count).
    """
    fn = b.function
    setup, head, take, attempt, swap, own, got, body, leave, depart, reset, done = (
        fn.append_basic_block(f"{name}.{part}") for part in
        ("setup", "head", "take", "attempt", "swap", "own", "got", "body", "leave", "depart", "reset", "done"))
    valid = b.and_(b.icmp_signed(">=", tid, i64(0)), b.icmp_signed("<", tid, nthreads))
    b.cbranch(valid, setup, done)
    b.position_at_end(setup)
    shared = b.and_(b.icmp_signed(">", nthreads, i64(1)), b.icmp_unsigned("!=", claim, ir.Constant(PTR, None)))
    claims = b.mul(nthreads, i64(CLAIMS_PER_THREAD))
    chunk = b.sdiv(b.add(i64(units), b.sub(claims, i64(1))), claims)
    chunk = b.select(b.icmp_signed("<", chunk, i64(1)), i64(1), chunk, name=f"{name}.chunk")
    least = b.sdiv(b.add(chunk, i64(TAIL_SPLIT - 1)), i64(TAIL_SPLIT), name=f"{name}.least")
    b.branch(head)
    b.position_at_end(head)
    turn = b.phi(I64, name=f"{name}.turn")
    turn.add_incoming(i64(0), setup)
    b.cbranch(shared, take, own)
    b.position_at_end(take)
    first_seen = b.load_atomic(claim, "monotonic", 8, typ=I64)
    b.branch(attempt)
    b.position_at_end(attempt)  # seen: the counter as last read; all taken once it reaches the units
    seen = b.phi(I64, name=f"{name}.seen")
    seen.add_incoming(first_seen, take)
    wanted = b.sdiv(b.add(b.sub(i64(units), seen), b.sub(claims, i64(1))), claims)
    wanted = b.select(b.icmp_signed(">", wanted, chunk), chunk, wanted)
    wanted = b.select(b.icmp_signed("<", wanted, least), least, wanted, name=f"{name}.wanted")
    b.cbranch(b.icmp_signed(">=", seen, i64(units)), got, swap)
    b.position_at_end(swap)
    swapped = b.cmpxchg(claim, seen, b.add(seen, wanted), "monotonic", "monotonic")
    seen.add_incoming(b.extract_value(swapped, 0), swap)
    end = b.add(seen, wanted)
    claimed_stop = b.select(b.icmp_signed("<", end, i64(units)), end, i64(units))
    b.cbranch(b.extract_value(swapped, 1), got, attempt)
    b.position_at_end(own)
    share = b.sdiv(b.mul(tid, i64(units)), nthreads)
    own_start = b.select(b.icmp_signed("==", turn, i64(0)), share, i64(units))
    own_stop = b.sdiv(b.mul(b.add(tid, i64(1)), i64(units)), nthreads)
    b.branch(got)
    b.position_at_end(got)
    start, stop = b.phi(I64, name=f"{name}.start"), b.phi(I64, name=f"{name}.stop")
    for value, bound, block in ((seen, i64(units), attempt), (seen, claimed_stop, swap), (own_start, own_stop, own)):
        start.add_incoming(value, block)
        stop.add_incoming(bound, block)
    b.cbranch(b.icmp_signed("<", start, stop), body, leave)
    b.position_at_end(body)
    yield start, stop
    turn.add_incoming(b.add(turn, i64(1)), b.block)
    b.branch(head)
    b.position_at_end(leave)
    b.cbranch(shared, depart, done)
    b.position_at_end(depart)
    leavers = b.gep(claim, [i64(LEAVERS_BYTE)], inbounds=True, source_etype=ir.IntType(8))
    before = b.atomic_rmw("add", leavers, i64(1), "acq_rel")
    b.cbranch(b.icmp_signed("==", before, b.sub(nthreads, i64(1))), reset, done)
    b.position_at_end(reset)
    for word in (claim, *also):
        b.atomic_rmw("xchg", word, i64(0), "monotonic")  # store_atomic needs typed pointers in llvmlite
    b.atomic_rmw("xchg", leavers, i64(0), "release")
    b.branch(done)
    b.position_at_end(done)


__all__ = ["CLAIMS_PER_THREAD", "TAIL_SPLIT", "claimed_chunks"]
