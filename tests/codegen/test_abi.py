"""The native calling convention (codegen/abi.py): the functions the builder and the pool emitter define have
exactly the signatures the runtime calls them with."""
from __future__ import annotations

import ctypes

import numpy as np

from braze import ir
from braze.codegen import host_target
from braze.codegen.abi import (CALLS, CLAIM_BYTES, CLAIM_OFFSET, CLAIM_SLOT_BYTES, CLAIM_SLOTS, ENTRY, POOL_QUIT,
                               POOL_RUN, POOL_WORK, PREPARE, SHARE_AREA, SHARE_BYTES, SHARE_DONE, SHARE_OFFSET,
                               STATUS_OFFSET, STATUS_WORDS, TASK_FIELDS)
from braze.codegen.module_builder import build_module
from braze.codegen.pool_code import emit_pool_module
from braze.codegen.sync_layout import GENERATION_OFFSET, SYNC_BYTES
from braze.ir.passes import optimize


def _gemm_graph() -> ir.Graph:
    """x @ w with a param w: a GEMM that prepares (packs) its weight, so the module exports a prepare function."""
    b = ir.GraphBuilder("gemm")
    x = b.input("x", ir.TensorType((32, 512), ir.float32))
    w = b.param("w", ir.TensorType((512, 256), ir.float32), id=0)
    graph = b.finish([b.matmul(x, w)], weights={"w": np.ones((512, 256), np.float32)})
    return optimize(graph)


def test_abi_entry_and_prepare_functions_have_the_stated_signatures() -> None:
    built = build_module(_gemm_graph())
    entry = built.module.get_global(built.entry)
    assert str(entry.function_type) == str(ENTRY.llvm_type())
    assert [a.name for a in entry.args] == list(ENTRY.names)
    assert built.prepare is not None
    assert str(built.module.get_global(built.prepare).function_type) == str(PREPARE.llvm_type())


def test_abi_pool_functions_have_the_stated_signatures() -> None:
    module = emit_pool_module(host_target())
    exports = [("braze_pool_run", POOL_RUN), ("braze_pool_work", POOL_WORK), ("braze_pool_quit", POOL_QUIT)]
    for name, signature in exports:
        fn = module.get_global(name)
        assert str(fn.function_type) == str(signature.llvm_type()) and [a.name for a in fn.args] == list(
            signature.names)


def test_abi_task_words_are_every_entry_argument_but_the_thread_id() -> None:
    assert TASK_FIELDS == ("fn", "inputs", "weights", "outputs", "arena", "scratch", "nthreads", "sync")
    assert set(ENTRY.names) - set(TASK_FIELDS) == {"tid"}


def test_abi_ctypes_types_follow_the_llvm_kinds() -> None:
    kinds = {ctypes.c_void_p: "ptr", ctypes.c_int64: "i64"}
    assert [kinds[t] for t in ENTRY.ctypes_params()] == [kind for _, kind in ENTRY.params]


def test_abi_status_words_have_a_cache_line_of_their_own_in_the_sync_block() -> None:
    """Kernels write the status words only when a check fails; the barrier's counters stay off their line."""
    assert STATUS_OFFSET % 64 == 0 and STATUS_OFFSET > GENERATION_OFFSET
    assert STATUS_OFFSET + 8 * STATUS_WORDS <= SYNC_BYTES


def test_abi_claim_words_have_a_cache_line_of_their_own_within_reach_of_the_status_pointer() -> None:
    """Threads claiming work hammer these words: off the barrier's and the status words' lines, inside the block."""
    assert CLAIM_OFFSET % 64 == 0 and CLAIM_OFFSET >= STATUS_OFFSET + 64
    assert CLAIM_SLOTS * CLAIM_SLOT_BYTES <= 64 and CLAIM_OFFSET + CLAIM_SLOTS * CLAIM_SLOT_BYTES <= SYNC_BYTES
    assert CLAIM_BYTES == CLAIM_OFFSET - STATUS_OFFSET + CLAIM_SLOTS * CLAIM_SLOT_BYTES


def test_abi_share_words_have_a_cache_line_of_their_own_within_reach_of_the_status_pointer() -> None:
    """A claim slot and the done count, then the shared area's address and the count of calls ended, on a line of
    their own inside the block."""
    assert SHARE_OFFSET % 64 == 0 and SHARE_OFFSET >= CLAIM_OFFSET + 64
    assert SHARE_DONE == SHARE_OFFSET + CLAIM_SLOT_BYTES and SHARE_DONE + 8 <= SHARE_AREA < SHARE_OFFSET + 64
    assert CALLS == SHARE_AREA + 8 and CALLS + 8 <= min(SYNC_BYTES, SHARE_OFFSET + 64)
    assert SHARE_BYTES == CALLS + 8 - STATUS_OFFSET
