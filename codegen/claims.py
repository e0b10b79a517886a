"""Dynamic work claiming: the threads of a call take chunks of a kernel's units from a shared counter.

A kernel whose work splits into many independent units (rows, planes, GEMM panels) does not cut them into one
fixed share per thread: each thread repeatedly claims a chunk of the units left from an atomic counter until none
are left, so a thread that lost its core or runs slower simply claims fewer. Each unit is still computed by exactly
one thread, and what a unit computes does not depend on which thread computes it, so results are bit-identical for
every thread count.

A loop's claim words are two i64 in the call's sync block (codegen/abi.py, CLAIM_OFFSET; one slot per claimed loop
of a kernel): the units claimed so far (from either end, see below), and how many threads have left the loop. Every
thread of a call runs every kernel, so the last of them to leave knows that nobody reads the counter any more and
zeroes both words; it does so before it arrives at the barrier that precedes the next kernel, so the next kernel
(and the first kernel of the next call, which starts only after every thread has finished this one) finds them zero
without a barrier of its own. Two loops of one kernel, with no barrier between them, need two slots. With one
thread, or without claim words (a null pointer), each thread takes its static share of the units in one chunk and
touches no shared memory.

How big a chunk is: a thread's first chunk is the units over CLAIMS_PER_THREAD times the thread count, each later one
the units left over as many, so that chunks shrink as the loop nears its end and the threads finish together, but
never more than the first chunk nor less than a TAIL_SPLIT-th of it, so that a loop costs a few dozen claims however
many units it has. A kernel that knows its work cuts it into no more chunks than CHUNK_WORK-sized pieces (one a thread
at least): a short conv's two threads then each claim their half at once. With a fixed chunk, the last one could
leave a thread idle for most of a chunk: SGEMM n = 512 on two threads claimed its 43 row panels 6 at a time, one
thread computing 24 and the other 19 (188-191 GFLOP/s; with shrinking chunks 209-216).
A claim reads the counter word and compare-and-swaps it forward by the chunk that what is left asks for.

Which end: the counter word holds two counts, the units taken from the front (its low half) and from the back (its
high half); threads of even id claim from the front, of odd id from the back. So on two threads, thread 0 computes
a prefix of every loop and thread 1 a suffix, whose border moves only as far as the threads' speeds differ: the
split is the static one where both run alike, and one kernel's thread finds in its own caches what the same thread
wrote of the previous kernel's output (a kernel's units walk the output in memory order), or the part of a weight
it read in the previous call. Claimed from one end, which thread took which chunk changed from call to call, and the
data followed it between the cores: on a Xeon with two 512-bit FMA ports, two threads, medians side by side, one
end / two ends: the benchmark CNN's three convs alone at batch 1 13.7 / 11.8, 38.7 / 37.1, 37.8 / 35.0 us, whole
models (benchmarks/models.py) CNN b1 104 / 100 us, MLP b64 325 / 317 us, CNN b64 4.38 / 4.23 ms, transformer b8
6.56 / 6.33 ms. On more threads the even ones share the front and the odd ones the back, which keeps less of that
affinity (a counter per thread would keep it all, at a cache line per thread in every claim slot). Loops of more
than HALF_MASK units (a count the low half cannot hold) are claimed from the front.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import llvmlite.ir as ir

from .loops import I64, PTR, i64

# Chunks per thread when all run at the same speed: enough that a thread running at half speed ends at most one
# small chunk after the others, few enough that the atomic claims cost nothing next to the work.
CLAIMS_PER_THREAD = 4
# The least work (floating-point operations) a chunk is cut to: about 40 us of one AVX-512 core, 130 of an AVX2 one.
# A claim moves the counter's cache line between the cores; the benchmark CNN at batch 1 on two threads spent 5-8 us
# of 75 in its convs' claims (9-10 claims each on loops of 20-50 units), and a thread that loses its core inside a
# chunk holds the others up by at most the chunk's work once it runs again (runtime/cpu_load.py then gives the next
# calls fewer threads), so a short kernel gains nothing from small chunks. That CNN, medians side by side, at 2**21 /
# 2**22 / 2**23 / 2**25: 75 / 74 / 71 / 70 us (its 9.4 MFLOP convs in 3 chunks at 2**22, 2 at 2**23); the MLP at
# batch 64 and the transformer at batch 1 (GEMMs of 34-50 MFLOP) within the noise.
CHUNK_WORK = 1 << 23
TAIL_SPLIT = 4  # the last chunks are at least the first one's size over this
LEAVERS_BYTE = 8  # the leavers word, after the counter
HALF_MASK = 0xFFFFFFFF  # the counter word's low half: the units taken from the front


@contextmanager
def claimed_chunks(b: ir.IRBuilder, claim: ir.Value, tid: ir.Value, nthreads: ir.Value, units: int, *,
                   name: str = "claim", also: Sequence[ir.Value] = (), work: float | None = None
                   ) -> Iterator[tuple[ir.Value, ir.Value]]:
    """Emit a loop over the chunks [start, stop) of [0, units) this thread claims, the body once (yielded).

    `claim` points at the claim words. With one thread or a null `claim` the thread takes its static share instead:
    units [tid*units/nthreads, (tid+1)*units/nthreads), contiguous, in one chunk. An invalid tid (outside
    [0, nthreads)) takes nothing and leaves the words alone. The last thread to leave also zeroes the i64 words in
    `also` (words every thread is done with once it has entered this loop: codegen/gemm_driver.py's done count).
    `work` (floating-point operations of the whole loop, where the kernel knows them) caps the chunks at one per
    CHUNK_WORK of it, at least one a thread.
    """
    fn = b.function
    setup, head, take, attempt, swap, own, got, body, leave, depart, reset, done = (
        fn.append_basic_block(f"{name}.{part}") for part in
        ("setup", "head", "take", "attempt", "swap", "own", "got", "body", "leave", "depart", "reset", "done"))
    valid = b.and_(b.icmp_signed(">=", tid, i64(0)), b.icmp_signed("<", tid, nthreads))
    b.cbranch(valid, setup, done)
    b.position_at_end(setup)
    two_ends = units <= HALF_MASK
    shared = b.and_(b.icmp_signed(">", nthreads, i64(1)), b.icmp_unsigned("!=", claim, ir.Constant(PTR, None)))
    claims = b.mul(nthreads, i64(CLAIMS_PER_THREAD))
    if work is not None:  # no more chunks than CHUNK_WORK-sized pieces of the work, one a thread at least
        pieces = i64(max(1, -(-int(work) // CHUNK_WORK)))
        claims = b.select(b.icmp_signed("<", pieces, claims), pieces, claims)
        claims = b.select(b.icmp_signed("<", claims, nthreads), nthreads, claims, name=f"{name}.claims")
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
    b.position_at_end(attempt)  # seen: the counter word as last read
    seen = b.phi(I64, name=f"{name}.seen")
    seen.add_incoming(first_seen, take)
    front, back = (b.and_(seen, i64(HALF_MASK)), b.lshr(seen, i64(32))) if two_ends else (seen, i64(0))
    left = b.sub(b.sub(i64(units), front), back, name=f"{name}.left")
    wanted = b.sdiv(b.add(left, b.sub(claims, i64(1))), claims)
    wanted = b.select(b.icmp_signed(">", wanted, chunk), chunk, wanted)
    wanted = b.select(b.icmp_signed("==", turn, i64(0)), chunk, wanted)  # a thread's first chunk: a whole one
    wanted = b.select(b.icmp_signed("<", wanted, least), least, wanted)
    wanted = b.select(b.icmp_signed(">", wanted, left), left, wanted, name=f"{name}.wanted")
    b.cbranch(b.icmp_signed("<=", left, i64(0)), got, swap)
    b.position_at_end(swap)
    from_back = b.icmp_signed("!=", b.and_(tid, i64(1)), i64(0)) if two_ends else ir.Constant(ir.IntType(1), 0)
    step = b.select(from_back, b.shl(wanted, i64(32)), wanted)
    swapped = b.cmpxchg(claim, seen, b.add(seen, step), "monotonic", "monotonic")
    seen.add_incoming(b.extract_value(swapped, 0), swap)
    claimed = b.select(from_back, b.sub(b.sub(i64(units), back), wanted), front, name=f"{name}.claimed")
    claimed_stop = b.add(claimed, wanted)
    b.cbranch(b.extract_value(swapped, 1), got, attempt)
    b.position_at_end(own)
    share = b.sdiv(b.mul(tid, i64(units)), nthreads)
    own_start = b.select(b.icmp_signed("==", turn, i64(0)), share, i64(units))
    own_stop = b.sdiv(b.mul(b.add(tid, i64(1)), i64(units)), nthreads)
    b.branch(got)
    b.position_at_end(got)
    start, stop = b.phi(I64, name=f"{name}.start"), b.phi(I64, name=f"{name}.stop")
    for value, bound, block in ((i64(units), i64(units), attempt), (claimed, claimed_stop, swap),
                                (own_start, own_stop, own)):
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


__all__ = ["CHUNK_WORK", "CLAIMS_PER_THREAD", "TAIL_SPLIT", "claimed_chunks"]
