"""The native calling convention between generated code and the runtime, stated once.

Every exported function braze generates is described here by name, result and parameters; the module builder and
the worker-pool emitter define their LLVM functions from these descriptions, and the runtime takes its ctypes
signatures from them, so the three can never disagree about an argument's order or type.

    void braze_entry_<digest>(ptr inputs, ptr weights, ptr outputs, ptr arena, ptr scratch,
                              i64 tid, i64 nthreads, ptr sync)        ENTRY
    void braze_prepare_<digest>(ptr weights)                           PREPARE
    i64 braze_call(ptr frame, object inputs, object outputs)           CALL (codegen/call_stub.py)
    i64 braze_frame_claim(ptr frame), void braze_frame_release(ptr frame)   FRAME_CLAIM, FRAME_RELEASE
    i64 braze_pool_run(...), braze_pool_work(...), braze_pool_quit(...)   POOL_RUN, POOL_WORK, POOL_QUIT
                                                                       (codegen/pool_code.py)

What the arguments mean is documented where the functions are emitted (codegen/module_builder.py, codegen/sync.py).

Run-time checks. Native code cannot raise, so a kernel that meets a value its op rejects (an index out of range)
records it in the call's status words: STATUS_WORDS i64s at byte STATUS_OFFSET of the `sync` block, word 0 the
failed check's number (1, 2, ... in the module; codegen/lower/checks.py) and word 1 the offending value. The first
report of a call wins; the call still runs to its end (every index is clamped, so no access leaves its operand), and
the runtime then raises the check's error and zeroes the words before the next call.

Work claiming. A kernel's `status` argument points at STATUS_OFFSET of the call's sync block, and the kernel also
reaches the claim words there, CLAIM_OFFSET - STATUS_OFFSET bytes further: CLAIM_SLOTS slots of two i64, one per
claimed loop of the kernel (a kernel with more loops gives the rest a static split), each the shared counter from
which the threads of a call take chunks of the loop's units and the count of threads done with it
(codegen/claims.py). So whoever calls a kernel with more than one thread passes a status pointer with at least
CLAIM_BYTES after it.

Shared packing. A GEMM run on several threads whose chunks would each pack the same whole operand packs it once
per call instead, its threads taking its panels from the share words, into the call's shared area
(codegen/gemm_driver.py): a block of the module's `shared_bytes` (the most any of its kernels asks for) that the
runtime allocates beside the scratch and whose address it stores at SHARE_AREA of the sync block. The share words
are a cache line of their own at SHARE_OFFSET: the pack loop's claim words (SHARE_OFFSET, two i64 as a claim slot)
and the count of units packed (SHARE_DONE), which the threads of the GEMM zero as they leave it, as they do their
claim words; so a kernel that uses them needs a barrier before the next kernel does, and a kernel uses them once.
The word after them (CALLS) counts the calls that have ended, advanced by thread 0 at the end of each: a kernel
streaming a weight too large to stay in its cache walks it forward on even calls and backward on odd ones
(codegen/gemv.py), reading the count through its share words pointer. Kernels reach all of these from the status
pointer, SHARE_BYTES bytes of which then lie after it.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the runtime reads these signatures without loading LLVM: llvmlite is imported to emit code
    import llvmlite.ir as ir


def _llvm(kind: str) -> ir.Type:
    """The LLVM type of a parameter kind; an "object" is a pointer to a Python object, passed by ctypes as the
    object itself (py_object)."""
    from .loops import I64, PTR, VOID
    return {"ptr": PTR, "object": PTR, "i64": I64, "void": VOID}[kind]


_CTYPES = {"ptr": ctypes.c_void_p, "object": ctypes.py_object, "i64": ctypes.c_int64, "void": None}


@dataclass(frozen=True)
class NativeSignature:
    """A native function's result and its (name, kind) parameters; a kind is "ptr", "object", "i64" or "void"."""

    result: str
    params: tuple[tuple[str, str], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.params)

    def llvm_type(self) -> ir.FunctionType:
        import llvmlite.ir as ir
        return ir.FunctionType(_llvm(self.result), [_llvm(kind) for _, kind in self.params])

    def define(self, module: ir.Module, name: str) -> ir.Function:
        """The exported function `name` in `module`, with this signature and named arguments."""
        from .loops import define_function
        return define_function(module, name, [(n, _llvm(kind)) for n, kind in self.params], ret=_llvm(self.result))

    def cfunc(self, library: Any, name: str) -> Any:
        """A ctypes callable for the exported function `name` of a compiled library (codegen.jit)."""
        return library.cfunc(name, _CTYPES[self.result], *self.ctypes_params())

    def ctypes_params(self) -> tuple[Any, ...]:
        """The ctypes argument types, in order."""
        return tuple(_CTYPES[kind] for _, kind in self.params)


def _signature(result: str, params: str) -> NativeSignature:
    """A signature from "kind name, kind name, ..." text, the way the module docs write it."""
    return NativeSignature(result, tuple((name, kind) for kind, name in (p.split() for p in params.split(","))))


ENTRY = _signature("void", "ptr inputs, ptr weights, ptr outputs, ptr arena, ptr scratch, i64 tid, i64 nthreads, "
                           "ptr sync")
PREPARE = _signature("void", "ptr weights")
CALL = _signature("i64", "ptr frame, object inputs, object outputs")
FRAME_CLAIM = _signature("i64", "ptr frame")
FRAME_RELEASE = NativeSignature("void", (("frame", "ptr"),))

STATUS_OFFSET = 128  # a cache line of its own: the barrier's counters live below it
STATUS_WORDS = 2
CLAIM_OFFSET = STATUS_OFFSET + 64  # the claim words get a cache line of their own, away from the barrier's
CLAIM_SLOTS, CLAIM_SLOT_BYTES = 4, 16
CLAIM_BYTES = CLAIM_OFFSET - STATUS_OFFSET + CLAIM_SLOTS * CLAIM_SLOT_BYTES  # from the status pointer to their end
SHARE_OFFSET = CLAIM_OFFSET + 64  # the share words: a claim slot, then the done count
SHARE_DONE = SHARE_OFFSET + CLAIM_SLOT_BYTES
SHARE_AREA = SHARE_OFFSET + 32  # the address of the call's shared area (0 when the module needs none)
CALLS = SHARE_AREA + 8  # the count of calls ended (see the module doc)
SHARE_BYTES = CALLS + 8 - STATUS_OFFSET  # from the status pointer to the end of the share words and the call count

# An entry call as words, the way the worker pool and the call stub pass it on: the entry's address, then every
# entry argument but the thread id, which each thread supplies itself (nthreads: the most threads the call may use).
TASK_FIELDS = ("fn", *(name for name in ENTRY.names if name != "tid"))


def load_task_words(b: ir.IRBuilder, base: ir.Value) -> dict[str, ir.Value]:
    """The TASK_FIELDS words stored from `base` on (i64 each), by name."""
    from .loops import I64, i64
    return {field: b.load(b.gep(base, [i64(k)], source_etype=I64), typ=I64, align=8, name=field)
            for k, field in enumerate(TASK_FIELDS)}


def emit_entry_call(b: ir.IRBuilder, words: dict[str, ir.Value], tid: ir.Value) -> None:
    """Call the entry point at words["fn"] with thread id `tid` and the other arguments from their task words."""
    from .loops import I64, PTR
    entry_type = ENTRY.llvm_type()
    entry = b.inttoptr(words["fn"], entry_type.as_pointer(), name="entry")  # a typed pointer: the call's signature
    b.call(entry, [tid if name == "tid" else words[name] if typ == I64 else b.inttoptr(words[name], PTR)
                   for name, typ in zip(ENTRY.names, entry_type.args)])


POOL_RUN = _signature("i64", "ptr words, ptr task, ptr controls, i64 enter_budget, i64 join_budget")
POOL_WORK = _signature("i64", "ptr task, ptr control, i64 seen, i64 budget")
POOL_QUIT = _signature("void", "ptr control")
