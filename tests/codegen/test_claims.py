"""Dynamic work claiming (codegen/claims.py): every unit taken exactly once, by threads running at once, a late thread
taking fewer, the claim words left zero for the next loop; the static share without claim words."""
from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

from braze.codegen import compile_ir, host_target
from braze.codegen.claims import CHUNK_WORK, claimed_chunks
from braze.codegen.loops import I64, PTR, define_function, entry_builder, for_range, i64
from tests.codegen.native import at_once

KERNEL_ARGS = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
_compiled: dict[tuple[int, int | None], object] = {}


def marking_kernel(units: int, work: int | None = None):
    """`void mark(ptr counts, ptr owners, i64 tid, i64 nthreads, ptr claim)`: for each unit it claims, atomically
    counts[unit] += 1 and owners[unit] = tid + 1 (i64 arrays of `units`)."""
    if (units, work) not in _compiled:
        name = f"t_claims_mark_{units}_{work}"
        module = host_target().new_module(name)
        fn = define_function(module, name, [("counts", PTR), ("owners", PTR), ("tid", I64), ("nthreads", I64),
                                            ("claim", PTR)])
        counts, owners, tid, nthreads, claim = fn.args
        b = entry_builder(fn)
        with claimed_chunks(b, claim, tid, nthreads, units, work=work) as (start, stop):
            with for_range(b, start, stop, name="u") as unit:
                b.atomic_rmw("add", b.gep(counts, [unit], source_etype=I64), i64(1), "monotonic")
                b.store(b.add(tid, i64(1)), b.gep(owners, [unit], source_etype=I64))
        b.ret_void()
        library = compile_ir(module, use_cache=False)
        _compiled[units, work] = (library, library.cfunc(name, None, *KERNEL_ARGS))
    return _compiled[units, work][1]


def run_marking(units: int, nthreads: int, *, claims: bool = True, delays: dict[int, float] | None = None,
                work: int | None = None):
    """counts, owners and the claim words after threads 0..nthreads-1 ran the marking kernel at once (thread tid
    after delays[tid] seconds)."""
    fn = marking_kernel(units, work)
    counts, owners = np.zeros(units, np.int64), np.zeros(units, np.int64)
    words = np.zeros(8, np.int64)

    def call(tid: int) -> None:
        time.sleep((delays or {}).get(tid, 0.0))
        fn(counts.ctypes.data, owners.ctypes.data, tid, nthreads, words.ctypes.data if claims else None)
    at_once(call, nthreads)
    return counts, owners, words


@pytest.mark.parametrize("work", [None, 1, 5 * CHUNK_WORK])
@pytest.mark.parametrize("nthreads", [1, 2, 3, 4])
@pytest.mark.parametrize("units", [1, 7, 1001])
def test_claims_every_unit_is_taken_exactly_once(nthreads: int, units: int, work: int | None) -> None:
    counts, owners, _ = run_marking(units, nthreads, work=work)
    assert (counts == 1).all()
    assert set(np.unique(owners)) <= set(range(1, nthreads + 1))


def test_claims_last_thread_out_zeroes_the_claim_words() -> None:
    """The next loop on the same words (the next kernel, the next call) starts from unit 0 again."""
    _, _, words = run_marking(1001, 3)
    assert not words.any()
    counts, _, _ = run_marking(1001, 3)
    assert (counts == 1).all()


def test_claims_a_late_thread_takes_what_is_left() -> None:
    """Thread 1 starts long after thread 0 has claimed every unit: it computes nothing (with a static share it would
    compute half)."""
    _, owners, words = run_marking(1001, 2, delays={1: 0.05})
    assert (owners == 1).all() and not words.any()
    _, static, _ = run_marking(1001, 2, claims=False, delays={1: 0.05})
    assert (static[:500] == 1).all() and (static[500:] == 2).all()


def test_claims_without_claim_words_each_thread_takes_its_static_share() -> None:
    counts, owners, words = run_marking(7, 3, claims=False)
    assert (counts == 1).all() and not words.any()
    assert owners.tolist() == [1, 1, 2, 2, 3, 3, 3]


def test_claims_invalid_thread_ids_take_nothing() -> None:
    fn = marking_kernel(7)
    counts, owners, words = np.zeros(7, np.int64), np.zeros(7, np.int64), np.zeros(8, np.int64)
    for tid, nthreads in ((-1, 2), (2, 2), (0, 0), (0, -3)):
        fn(counts.ctypes.data, owners.ctypes.data, tid, nthreads, words.ctypes.data)
    assert not counts.any() and not words.any()


def chunk_sizes(units: int, nthreads: int, work: int | None = None) -> list[int]:
    """The sizes of the chunks thread 0 of `nthreads` claims in turn when it runs alone (the others late)."""
    name = f"t_claims_sizes_{units}_{nthreads}_{work}"
    module = host_target().new_module(name)
    fn = define_function(module, name, [("sizes", PTR), ("claim", PTR)])
    sizes, claim = fn.args
    b = entry_builder(fn)
    with claimed_chunks(b, claim, i64(0), i64(nthreads), units, work=work) as (start, stop):
        b.store(b.sub(stop, start), b.gep(sizes, [start], source_etype=I64))
    b.ret_void()
    library = compile_ir(module, use_cache=False)
    out, words = np.zeros(units, np.int64), np.zeros(8, np.int64)
    library.cfunc(name, None, ctypes.c_void_p, ctypes.c_void_p)(out.ctypes.data, words.ctypes.data)
    at, found = 0, []
    while at < units:
        found.append(int(out[at]))
        at += max(found[-1], 1)
    return found


def test_claims_chunks_shrink_towards_the_end() -> None:
    """What is left over 4 x threads: 43 units for 2 threads go 6, 5, 4, 4, 3, ... down to a quarter of the first
    chunk, so the threads end together (a fixed 6 left one thread 24 units and the other 19)."""
    sizes = chunk_sizes(43, 2)
    assert sum(sizes) == 43 and sizes == sorted(sizes, reverse=True)
    assert sizes[:4] == [6, 5, 4, 4] and sizes[-1] == 1 and min(sizes[:-1]) == 2


def test_claims_two_threads_take_a_prefix_and_a_suffix() -> None:
    """Thread 0 claims from the front and thread 1 from the back, so each computes one contiguous run of the units
    (the same run from call to call where both run alike: the data a thread wrote stays in its caches)."""
    for _ in range(5):
        counts, owners, words = run_marking(1001, 2)
        assert (counts == 1).all() and not words.any()
        assert (np.diff(owners) >= 0).all()


def test_claims_an_odd_thread_alone_takes_everything_from_the_back() -> None:
    _, owners, words = run_marking(1001, 2, delays={0: 0.05})
    assert (owners == 2).all() and not words.any()


def first_claim(units: int, tid: int, nthreads: int, work: int | None = None) -> tuple[int, int]:
    """(start, stop) of the first chunk thread `tid` claims when it runs alone."""
    name = f"t_claims_first_{units}_{tid}_{nthreads}_{work}"
    module = host_target().new_module(name)
    fn = define_function(module, name, [("first", PTR), ("claim", PTR)])
    first, claim = fn.args
    b = entry_builder(fn)
    with claimed_chunks(b, claim, i64(tid), i64(nthreads), units, work=work) as (start, stop):
        taken = b.load(b.gep(first, [i64(2)], source_etype=I64), typ=I64)
        with b.if_then(b.icmp_signed("==", taken, i64(0))):
            b.store(start, b.gep(first, [i64(0)], source_etype=I64))
            b.store(stop, b.gep(first, [i64(1)], source_etype=I64))
            b.store(i64(1), b.gep(first, [i64(2)], source_etype=I64))
    b.ret_void()
    library = compile_ir(module, use_cache=False)
    out, words = np.zeros(3, np.int64), np.zeros(8, np.int64)
    library.cfunc(name, None, ctypes.c_void_p, ctypes.c_void_p)(out.ctypes.data, words.ctypes.data)
    return int(out[0]), int(out[1])


def test_claims_from_the_back_end_at_the_last_unit_and_a_loop_too_long_for_it_claims_from_the_front() -> None:
    assert first_claim(43, 1, 2) == (37, 43)
    assert first_claim(43, 3, 4) == (40, 43)
    huge = 3 << 32  # more units than the counter word's halves count: every thread takes from the front
    assert first_claim(huge, 1, 2) == (0, huge // 8)


def test_claims_a_little_work_is_cut_into_one_chunk_a_thread_first() -> None:
    """Less work than CHUNK_WORK a thread: each thread's first claim is its whole static share (one claim, the split
    two threads that run alike keep from call to call); one thread alone then takes the rest in shrinking chunks."""
    assert chunk_sizes(24, 2, work=CHUNK_WORK) == [12, 6, 3, 3]
    assert first_claim(24, 1, 2, work=CHUNK_WORK) == (12, 24)
    assert first_claim(24, 2, 3, work=CHUNK_WORK) == (0, 8)
    assert chunk_sizes(24, 2, work=3 * CHUNK_WORK) == [8, 6, 4, 2, 2, 2]  # three chunks' work: 3 claims at first
    assert chunk_sizes(43, 2, work=100 * CHUNK_WORK) == chunk_sizes(43, 2)  # much work: 4 chunks a thread, as before


def test_claims_with_a_little_work_two_threads_still_share_a_late_ones_units() -> None:
    _, owners, words = run_marking(1001, 2, delays={1: 0.05}, work=1)
    assert (owners == 1).all() and not words.any()
