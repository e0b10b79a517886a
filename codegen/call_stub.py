"""The native front of a one-thread compiled call: numpy arrays in, the entry point called, in one foreign call.

    i64 braze_call(ptr frame, object inputs, object outputs)      CALL (codegen/abi.py)

`inputs` and `outputs` are Python tuples of numpy arrays, passed as objects (ctypes py_object). The stub reads each
array's type, dtype, rank, shape, flags and data pointer straight from its object, at the offsets of an ObjectLayout
the runtime measured on this process's numpy (runtime/objects.py), checks them against the frame, and returns k + 1
at the first array k (inputs first, then outputs) that is not exactly what the entry expects (another type, dtype or
shape, not C-contiguous, not aligned to its dtype, or an output not writable), before any native code of the graph
runs; the runtime then takes its general path for that call, with full checks, conversions and error messages.
Inputs are read and outputs written in place, wherever they start (kernels claim only element alignment: copying a
large input to a 64-byte boundary cost 5-10% of a 256-512 SGEMM on two threads, and writing a result 16 bytes past
one through an aligned buffer and copying it out 5-6% of an SGEMM of n = 512-1024 on one thread, 9% on two). The
stub then calls the entry with tid 0 and returns 0 or, when the frame allows more than one thread and names a worker
pool, runs the call on the pool (braze_pool_run, codegen/pool_code.py), so that a parallel call is one foreign call
too. It runs without the GIL: the caller's tuples keep every object alive. It holds the frame's busy word
(FRAME_BUSY, taken by a compare-and-swap) from its start to its return, so that two threads calling one executable
never share its buffers: a stub that finds the frame busy returns STUB_BUSY at once, and `braze_frame_claim(frame)`
/ `braze_frame_release(frame)`, exported beside it, take and give back the same word for the runtime's general path.

The frame is an array of i64 words the runtime owns per executable: first the entry's arguments in TASK_FIELDS
order (the entry's address, then every argument but the thread id; nthreads the most threads a call may use),
then FRAME_ARRAY_TYPE (the address of the numpy.ndarray type object), the input and output counts, the busy word,
the POOL_WORDS of the worker pool at FRAME_POOL (braze_pool_run's address, 0 for none, then its task block, its
control addresses, the gate's and the join's spin budgets), and RECORD_WORDS per input and then per output: the
expected dtype object, rank and address of the expected dims as i64s (codegen/stub_layout.py holds the offsets).
"""
from __future__ import annotations

import llvmlite.ir as ir

from .abi import CALL, FRAME_CLAIM, FRAME_RELEASE, POOL_RUN, TASK_FIELDS, emit_entry_call
from .loops import I32, I64, I8, PTR, for_range, i64, mark_explicit
from .stub_layout import (ALIGNED, C_CONTIGUOUS, FRAME_ARRAY_TYPE, FRAME_BUSY, FRAME_HEADER, FRAME_INPUTS,
                          FRAME_OUTPUTS, FRAME_POOL, POOL_WORDS, RECORD_WORDS, STUB_BUSY, WRITEABLE, ObjectLayout,
                          frame_words)
from .target import Target

__all__ = ["C_CONTIGUOUS", "FRAME_ARRAY_TYPE", "FRAME_BUSY", "FRAME_HEADER", "FRAME_INPUTS", "FRAME_OUTPUTS",
           "FRAME_POOL", "ObjectLayout", "POOL_WORDS", "RECORD_WORDS", "STUB_BUSY", "WRITEABLE", "emit_call_stub",
           "frame_words"]


def emit_call_stub(target: Target, layout: ObjectLayout) -> ir.Module:
    """The module exporting `braze_call` for objects of this layout (see the module doc)."""
    module = target.new_module(f"braze_call_v3_{layout.data}_{layout.descr}_{layout.tuple_items}")
    mark_explicit(module)
    fn = CALL.define(module, "braze_call")
    frame, inputs, outputs = fn.args
    b = ir.IRBuilder(fn.entry_basic_block)
    stub = _Stub(b, layout, frame)
    free = fn.append_basic_block("free")
    b.cbranch(_claim(b, frame), free, stub.refuse(i64(STUB_BUSY), release=False))
    b.position_at_end(free)
    stub.gather_inputs(inputs)
    stub.gather_outputs(outputs)
    stub.call_entry()
    _release(b, frame)
    b.ret(i64(0))
    _emit_claim_functions(module)
    return module


def _busy(b: ir.IRBuilder, frame: ir.Value) -> ir.Value:
    return b.gep(frame, [i64(FRAME_BUSY)], source_etype=I64, name="busy")


def _claim(b: ir.IRBuilder, frame: ir.Value) -> ir.Value:
    """Take the frame's busy word; whether this thread got it."""
    return b.extract_value(b.cmpxchg(_busy(b, frame), i64(0), i64(1), "acquire", "monotonic"), 1)


def _release(b: ir.IRBuilder, frame: ir.Value) -> None:
    b.atomic_rmw("xchg", _busy(b, frame), i64(0), "release")


def _emit_claim_functions(module: ir.Module) -> None:
    """`i64 braze_frame_claim(ptr frame)` (1 when taken, 0 when busy) and `void braze_frame_release(ptr frame)`."""
    claim = FRAME_CLAIM.define(module, "braze_frame_claim")
    b = ir.IRBuilder(claim.entry_basic_block)
    b.ret(b.zext(_claim(b, claim.args[0]), I64))
    release = FRAME_RELEASE.define(module, "braze_frame_release")
    b = ir.IRBuilder(release.entry_basic_block)
    _release(b, release.args[0])
    b.ret_void()


class _Stub:
    """Emits the stub's steps into one function."""

    def __init__(self, b: ir.IRBuilder, layout: ObjectLayout, frame: ir.Value) -> None:
        self.b, self.layout, self.frame = b, layout, frame

    def word(self, index: ir.Value | int, typ: ir.Type = I64) -> ir.Value:
        return self.b.load(self.b.gep(self.frame, [i64(index)], source_etype=I64), typ=typ, align=8)

    def field(self, obj: ir.Value, offset: int, typ: ir.Type) -> ir.Value:
        return self.b.load(self.b.gep(obj, [i64(offset)], source_etype=I8), typ=typ)

    def item(self, tuple_: ir.Value, k: ir.Value) -> ir.Value:
        items = self.b.gep(tuple_, [i64(self.layout.tuple_items)], source_etype=I8)
        return self.b.load(self.b.gep(items, [k], source_etype=PTR), typ=PTR, align=8)

    def require(self, ok: ir.Value, k: ir.Value) -> None:
        """Continue when `ok`, else return k + 1 (the k-th array, inputs then outputs, takes the general path)."""
        b = self.b
        go = b.append_basic_block("accepted")
        b.cbranch(ok, go, self.refuse(b.add(k, i64(1))))
        b.position_at_end(go)

    def refuse(self, answer: ir.Value, *, release: bool = True) -> ir.Block:
        """A block that returns `answer` (giving the frame's busy word back first, when `release`)."""
        b = self.b
        block = b.append_basic_block("refuse")
        with b.goto_block(block):
            if release:
                _release(b, self.frame)
            b.ret(answer)
        return block

    def check(self, obj: ir.Value, rec: ir.Value, flags_needed: int, answer: ir.Value) -> ir.Value:
        """Return `answer` unless `obj` is an ndarray with the record's dtype, rank and dims and the flags; its
        data pointer."""
        b, layout = self.b, self.layout
        self.require(b.icmp_unsigned("==", self.field(obj, layout.type, I64), self.word(FRAME_ARRAY_TYPE)), answer)
        self.require(b.icmp_unsigned("==", self.field(obj, layout.descr, I64), self.word(rec)), answer)
        rank = self.word(b.add(rec, i64(1)))
        self.require(b.icmp_signed("==", b.sext(self.field(obj, layout.nd, I32), I64), rank), answer)
        needed = ir.Constant(I32, flags_needed)
        self.require(b.icmp_unsigned("==", b.and_(self.field(obj, layout.flags, I32), needed), needed), answer)
        got, want = self.field(obj, layout.dims, PTR), self.word(b.add(rec, i64(2)), PTR)
        with for_range(b, 0, rank, name="dim") as d:
            have = b.load(b.gep(got, [d], source_etype=I64), typ=I64, align=8)
            self.require(b.icmp_signed("==", have, b.load(b.gep(want, [d], source_etype=I64), typ=I64, align=8)),
                         answer)
        return self.field(obj, layout.data, PTR)

    def gather_inputs(self, inputs: ir.Value) -> None:
        b = self.b
        pointers = self.word(TASK_FIELDS.index("inputs"), PTR)
        with for_range(b, 0, self.word(FRAME_INPUTS), name="in") as k:
            rec = b.add(i64(FRAME_HEADER), b.mul(k, i64(RECORD_WORDS)), name="rec")
            data = self.check(self.item(inputs, k), rec, C_CONTIGUOUS | ALIGNED, k)
            b.store(data, b.gep(pointers, [k], source_etype=PTR), align=8)

    def gather_outputs(self, outputs: ir.Value) -> None:
        """Check every output like an input, and writable."""
        b = self.b
        first = b.add(i64(FRAME_HEADER), b.mul(self.word(FRAME_INPUTS), i64(RECORD_WORDS)))
        pointers = self.word(TASK_FIELDS.index("outputs"), PTR)
        with for_range(b, 0, self.word(FRAME_OUTPUTS), name="out") as k:
            rec, answer = b.add(first, b.mul(k, i64(RECORD_WORDS)), name="orec"), b.add(self.word(FRAME_INPUTS), k)
            data = self.check(self.item(outputs, k), rec, C_CONTIGUOUS | ALIGNED | WRITEABLE, answer)
            b.store(data, b.gep(pointers, [k], source_etype=PTR), align=8)

    def call_entry(self) -> None:
        """Run the entry on this thread alone, or on the frame's worker pool when the frame allows more threads."""
        b = self.b
        words = {field: self.word(k) for k, field in enumerate(TASK_FIELDS)}
        runner = self.word(FRAME_POOL)
        parallel = b.and_(b.icmp_signed(">", words["nthreads"], i64(1)), b.icmp_unsigned("!=", runner, i64(0)))
        with b.if_else(parallel) as (on_pool, alone):
            with on_pool:
                run = b.inttoptr(runner, POOL_RUN.llvm_type().as_pointer(), name="pool.run")
                pool = [self.word(FRAME_POOL + k) for k in range(1, POOL_WORDS)]
                b.call(run, [self.frame, b.inttoptr(pool[0], PTR), b.inttoptr(pool[1], PTR), *pool[2:]])
            with alone:
                emit_entry_call(b, {**words, "nthreads": i64(1)}, i64(0))
