"""Executable: a compiled graph ready to call on numpy arrays, one foreign call per thread per call.

An Executable owns everything its entry point touches: 64-byte-aligned copies of the weights (or the weight arrays
themselves where they are aligned and nothing can change them, memory.unchangeable: a cache entry's derived weights,
an artifact's tensors; the first write_weights or swap_weights of one copies it), the prepared forms of weights that
some kernels read instead (a GEMM's packed B, filled once by the module's prepare function right after the weights
are copied, at load time), the arena (sized by the memory plan), per-thread scratch, the barrier's sync block and an
aligned staging buffer per input (and per output given an out= array not aligned to its dtype). Everything a first
call would otherwise set up (the worker pool's native code and threads, the call stub) is made at load time, and
warm() makes calls on zero inputs (braze.compile does, for a graph whose call is short) so that the first call finds
the code, the weights and the worker threads in the state later calls find them: the first call costs what the later
ones do.

A call validates every input before any native code runs (count, then each input's type, rank, shape and dtype)
and allocates the outputs (or takes the caller's `out=` arrays, checked). A one-thread call whose inputs are
exactly what the entry reads (numpy arrays of the expected dtype and shape, C-contiguous) is one foreign call of
the native call stub (runtime/call_frame.py), which does those checks on the array objects themselves and stages
what is not 64-byte aligned; any other call takes the general path: the checks and conversions in Python, then
the entry, once in the calling thread with one thread, or once per thread through the process-wide pool
(runtime/pool.py).
ctypes releases the GIL for the native part. No numpy computation and no Python per op happens inside a call.
When a kernel's run-time check fired (an index computed inside the graph out of range), the call raises that
check's error (IndexRangeError, worded as eager evaluation words it) after the native code has returned.

Accepted inputs: numpy arrays (and numpy scalars for rank-0 inputs, or objects with __array__, such as braze
Tensors) of the expected shape. The dtype must be the expected one, except for the documented safe conversions:
a same-kind widening that numpy calls safe (int8/int32 -> int64, float32 -> float64, uint8 -> int32, ...) and a
byte-swapped array of the expected type; those are converted into the staging buffer. Everything else raises a
braze error naming the input and the expected type.

Thread safety: the arena, scratch and staging buffers are shared by an Executable's calls, so calls from several
Python threads run one at a time on one Executable (each still releases the GIL while it runs, and different
Executables run concurrently). The call stub holds the frame's busy word natively for the length of its call
(codegen/call_stub.py), so the common call (stub-ready inputs and out= arrays, or outputs numpy.empty gives, no
run-time checks) takes no Python lock; every other call takes the Executable's lock and the same busy word. A
parallel call is one native call (runtime/pool.py): it returns only after every thread that took part has left the
native code.
"""
from __future__ import annotations

import ctypes
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from braze.codegen.abi import ENTRY, PREPARE, SHARE_AREA, STATUS_OFFSET, STATUS_WORDS, TASK_FIELDS
from braze.codegen.graph_cache import compile_module
from braze.codegen.library import CompiledLibrary
from braze.codegen.module_layout import BuiltModule
from braze.codegen.stub_layout import POOL_WORDS, STUB_BUSY
from braze.codegen.sync_layout import SYNC_BYTES, has_futex
from braze.codegen.target import Target
from braze.ir.errors import BrazeError, IndexRangeError
from braze.ir.graph import Graph
from braze.ir.types import TensorType

from . import cpu_load as _cpu_load
from . import pool as _pool
from . import threads as _threads
from .call_frame import CallFrame, call_stub, frame_claims
from . import memory
from .memory import ALIGNMENT, address, aligned_block, aligned_copy, aligned_zeros, is_aligned, map_bytes, \
    resident_block, unchangeable
from .signature import InputSpec, OutputSpec, index_bounds
from .timings import CompileTimings

if TYPE_CHECKING:
    from braze.codegen.module_builder import Lowering

# warm(): the longest call (by the work estimate) and the most input bytes it is done for. Above them a call takes
# long enough that reading the weights from memory and waking the workers add little to the first one.
WARM_SECONDS = 0.01
WARM_INPUT_BYTES = 16 << 20
# Two calls, not one: after a single one the batch-1 MLP's next call on two threads still took 36-119 us (median ~86)
# against ~20 later, after two 26-72 (median ~39), in six fresh processes each.
WARM_CALLS = 2


class Executable:
    """A compiled graph: call it with one array per graph input; returns one array, or a tuple for several."""

    def __init__(self, built: BuiltModule, library: CompiledLibrary, *, threads: int | None = None,
                 prepared: Sequence[np.ndarray] | None = None) -> None:
        """`prepared`: the prepared weights made before for these weights and this module (runtime/prepared_cache.py),
        one read-only array per prepared slot, used instead of preparing them again."""
        self.built, self.library, self.graph = built, library, built.graph
        self.timings: CompileTimings | None = None  # set by the compile path (runtime/compile_path.py)
        self._requested = _threads.check_threads(threads)
        self._work = _threads.estimate_work(built.graph)
        self._enter_budget = _pool.enter_budget(_threads.estimated_seconds(self._work))
        self._threads, self._threads_version = self._chosen_threads(), _threads.version
        self._calls, self._load_version = self._threads, -1  # threads a call uses now: at most the CPUs left free
        self._entry = ENTRY.cfunc(library, built.entry)
        self._weights = map_bytes(self._weight, built.weights, [slot.type.nbytes for slot in built.weights])
        self._prepared = self._prepared_buffers(prepared)
        self._arena = resident_block(built.arena_for(self._threads))
        self._scratch = resident_block(built.scratch_stride * self._threads)
        self._sync = aligned_block(SYNC_BYTES)
        self._status = self._sync[STATUS_OFFSET:STATUS_OFFSET + 8 * STATUS_WORDS].view(np.int64)
        self._shared: np.ndarray | None = None
        self._share_area()
        self._checks = dict(built.checks)
        bounds = index_bounds(built.graph)
        self._specs = [InputSpec(k, v.name, v.type, bounds.get(v.name)) for k, v in enumerate(built.inputs)]
        self._out_specs = [OutputSpec(k, v.type) for k, v in enumerate(built.outputs)]
        self._input_ptrs = (ctypes.c_void_p * max(len(self._specs), 1))()
        self._output_ptrs = (ctypes.c_void_p * max(len(built.outputs), 1))()
        buffers = self._weights + self._prepared
        self._weight_ptrs = (ctypes.c_void_p * max(len(buffers), 1))(*[address(w) for w in buffers])
        self.prepare_calls = 0
        if built.prepare is not None and prepared is None:
            self._prepare(library)
        self._lock = threading.Lock()
        self._entry_address = library.address(built.entry)
        # the one-foreign-call path of one-thread calls (runtime/call_frame.py): what a call reads, prebuilt
        self._stub = call_stub()
        self._frame = None if self._stub is None else CallFrame(self._entry_words(), self._specs, self._out_specs)
        self._frame_pointer = None if self._frame is None else self._frame.pointer
        self._new_outputs = tuple(spec.new for spec in self._out_specs)
        self._new_output = self._new_outputs[0] if len(self._new_outputs) == 1 else None
        self._words = aligned_zeros(len(TASK_FIELDS), np.int64)  # the entry call the general path posts to the pool
        self._words_address = address(self._words)
        self._stub_parallel = self._frame is not None and has_futex(library.target)
        self._bind_call()

    def warm(self, call: Callable[[tuple[np.ndarray, ...]], Any] | None = None) -> bool:
        """WARM_CALLS calls on zero inputs, when a call is short (at most WARM_SECONDS by the work estimate,
        WARM_INPUT_BYTES of inputs): a short first call would otherwise read the code and weights from memory and wake
        the workers, several times the cost of a later call. `call` makes them (by default run: a caller whose users
        call through a wrapper passes it, so that the wrapper's Python is warm too). False when skipped, or when zeros
        are not a valid input (an index input of an empty dimension, a run-time check that fires on them)."""
        if _threads.estimated_seconds(self._work) > WARM_SECONDS or \
                sum(spec.nbytes for spec in self._specs) > WARM_INPUT_BYTES or \
                any(spec.bound == 0 for spec in self._specs):
            return False
        zeros = tuple(np.zeros(spec.shape, spec.dtype) for spec in self._specs)
        try:
            for _ in range(WARM_CALLS):
                (call or self.run)(zeros)
        except BrazeError:
            return False
        return True

    def _entry_words(self) -> dict[str, int]:
        """The entry's arguments, by TASK_FIELDS name (nthreads: the threads a call may use)."""
        return {"fn": self._entry_address, "inputs": ctypes.addressof(self._input_ptrs),
                "weights": ctypes.addressof(self._weight_ptrs), "outputs": ctypes.addressof(self._output_ptrs),
                "arena": address(self._arena), "scratch": address(self._scratch), "nthreads": self._calls,
                "sync": address(self._sync)}

    def _bind_call(self) -> None:
        """The entry's arguments for the current scratch area and thread count: the one-thread call's tuple (ctypes
        objects: a call converts nothing), the words the pool runs, the stub's frame; and the workers started now,
        so that the first call pays nothing the others do not. A call uses the configured threads, or as many as
        other processes leave CPUs free (runtime/cpu_load.py)."""
        self._calls = self._call_threads()
        self._one_thread = (self._input_ptrs, self._weight_ptrs, self._output_ptrs,
                            ctypes.c_void_p(address(self._arena)), ctypes.c_void_p(address(self._scratch)),
                            ctypes.c_int64(0), ctypes.c_int64(1), ctypes.c_void_p(address(self._sync)))
        words = self._entry_words()
        self._words[:] = [words[field] for field in TASK_FIELDS]
        if self._threads > 1:
            _pool.pool().start(self._threads - 1)
        parallel = self._calls > 1
        # a call without run-time checks skips the lock (out= arrays too, which the stub checks): the stub holds the
        # frame
        self._lock_free = self._stub is not None and not self._checks and (not parallel or self._stub_parallel)
        if self._frame is not None:
            on_pool = parallel and self._stub_parallel
            self._frame.set("scratch", words["scratch"])
            self._frame.set("arena", words["arena"])
            self._frame.set("nthreads", self._calls if on_pool else 1)
            self._frame.set_pool(self._pool_words() if on_pool else [0] * POOL_WORDS)

    def _pool_words(self) -> list[int]:
        """The pool the stub runs a parallel call on (CallFrame.set_pool)."""
        shared, functions = _pool.pool(), _pool.native()
        return [functions.run_address, shared.task_address, shared.controls_address, self._enter_budget,
                functions.join_budget]

    def _chosen_threads(self) -> int:
        return _threads.choose_threads(self._work, self._requested)

    def _call_threads(self) -> int:
        """The configured threads, capped by the CPUs other processes leave free (read at cap version now), unless
        the call is long (cpu_load.LONG_CALL_SECONDS)."""
        self._load_version = _cpu_load.version
        if self._threads == 1 or _threads.estimated_seconds(self._work) >= _cpu_load.LONG_CALL_SECONDS:
            return self._threads
        limit = _cpu_load.cap()
        return self._threads if limit is None else min(self._threads, limit)

    def _follow_load(self) -> None:
        """Rebind the calls to a new cap, once no call holds the frame."""
        with self._lock, self._frame_held():
            if self._load_version != _cpu_load.version:
                self._bind_call()

    @property
    def threads(self) -> int:
        """Threads a call uses: the count compiled in with threads=, else chosen from the process's thread count
        (braze.set_num_threads) and the graph's work estimate (runtime/threads.py); fewer while other processes keep
        the CPUs busy (runtime/cpu_load.py)."""
        if self._threads_version != _threads.version:
            with self._lock:
                self._retune()
        return self._threads

    def _retune(self) -> None:
        """Follow a new process thread count; the scratch area grows when more threads than before need it."""
        count = self._chosen_threads()
        if self.built.scratch_stride * count > self._scratch.nbytes:
            self._scratch = resident_block(self.built.scratch_stride * count)
        if self.built.arena_for(count) > self._arena.nbytes:  # a batch in chunks: an arena slot per thread
            self._arena = resident_block(self.built.arena_for(count))
        self._threads, self._threads_version = count, _threads.version
        self._share_area()
        self._bind_call()

    def _share_area(self) -> None:
        """The call's shared area (codegen/abi.py: shared packing), allocated once calls may use several threads,
        its address in the sync block."""
        if self._shared is None and self._threads > 1 and self.built.shared_bytes:
            self._shared = resident_block(self.built.shared_bytes)
            self._sync[SHARE_AREA:SHARE_AREA + 8].view(np.uint64)[0] = address(self._shared)

    @classmethod
    def build(cls, graph: Graph, *, threads: int | None = None, target: Target | None = None,
              use_cache: bool | None = None, lower: Lowering | None = None) -> Executable:
        """Build, compile (through the disk cache) and load an optimized graph."""
        built, library = compile_module(graph, target=target, use_cache=use_cache, lower=lower)
        return cls(built, library, threads=threads)

    def _weight(self, slot: Any) -> np.ndarray:
        array = np.asarray(slot.array(self.graph))
        want = slot.type
        if array.shape != want.shape or array.dtype != want.dtype.numpy:
            raise BrazeError(f"weight '{slot.path}' is {array.dtype}{list(array.shape)}, the graph declares {want}")
        return array if unchangeable(array) and is_aligned(array) and array.flags.c_contiguous else aligned_copy(array)

    def _writable(self, index: int) -> np.ndarray:
        """Weight buffer `index`, first replaced by a copy of its own when it is an array shared read-only."""
        if not self._weights[index].flags.writeable:
            self._weights[index] = aligned_copy(self._weights[index])
            self._weight_ptrs[index] = address(self._weights[index])
        return self._weights[index]

    def _prepared_buffers(self, given: Sequence[np.ndarray] | None) -> list[np.ndarray]:
        """One aligned buffer per prepared weight, after checking the slots the module's prepare function fills: the
        buffers `given` (each checked to be an aligned, contiguous array of its slot's size), else new ones."""
        slots, count = self.built.prepared, len(self._weights)
        if given is not None and len(given) != len(slots):
            raise BrazeError(f"module {self.built.name!r} has {len(slots)} prepared weights; got {len(given)}")
        buffers = []
        for k, slot in enumerate(slots):
            if slot.slot != count + k or not 0 <= slot.source < count or slot.nbytes <= 0:
                raise BrazeError(f"module {self.built.name!r}: prepared weight {slot.key!r} has slot {slot.slot}, "
                                 f"source {slot.source} and {slot.nbytes} bytes; expected slot {count + k}, a "
                                 f"source below {count} and a positive size")
            if given is None:
                buffer = aligned_block(slot.nbytes)
            elif isinstance(given[k], np.ndarray) and given[k].flags.c_contiguous and given[k].nbytes == slot.nbytes:
                buffer = given[k]
            else:
                raise BrazeError(f"prepared weight {slot.key!r} must be an aligned, contiguous array of "
                                 f"{slot.nbytes} bytes")
            if buffer.nbytes < slot.nbytes or address(buffer) % ALIGNMENT:
                raise BrazeError(f"prepared weight {slot.key!r}: {slot.nbytes} bytes at an address not "
                                 f"{ALIGNMENT}-byte aligned")
            buffers.append(buffer)
        if slots and self.built.prepare is None:
            raise BrazeError(f"module {self.built.name!r} prepares weights but exports no prepare function")
        return buffers

    @property
    def prepared(self) -> tuple[np.ndarray, ...]:
        """The prepared weights (read-only views), one per slot of the module (BuiltModule.prepared)."""
        views = tuple(buffer.view() for buffer in self._prepared)
        for view in views:
            view.flags.writeable = False
        return views

    def _prepare(self, library: CompiledLibrary) -> None:
        """Fill the prepared weights from the weight copies, before the first call of the entry: the module's prepare
        function, or for a model with large weights each form's own function (void(ptr param, ptr form), what the
        prepare function calls in turn) on several threads at once, largest first. Buffers shared read-only (found
        in the disk cache) are replaced by fresh ones first."""
        slots = self.built.prepared
        for index, slot in enumerate(slots):
            if not self._prepared[index].flags.writeable:
                self._prepared[index] = aligned_block(slot.nbytes)
                self._weight_ptrs[slot.slot] = address(self._prepared[index])
        sizes = [slot.nbytes for slot in slots]
        if len(slots) < 2 or sum(sizes) < 2 * memory.PARALLEL_BYTES:
            PREPARE.cfunc(library, self.built.prepare)(self._weight_ptrs)
        else:
            pointers = self._weight_ptrs
            map_bytes(lambda slot: library.cfunc(slot.function, None, ctypes.c_void_p, ctypes.c_void_p)(
                pointers[slot.source], pointers[slot.slot]), slots, sizes)
        self.prepare_calls += 1

    # --- weights ---------------------------------------------------------------------------------------------
    def weight(self, path: str) -> np.ndarray:
        """A copy of the current value of param `path` as this executable holds it."""
        return self._weights[self._weight_index(path)].copy()

    def write_weights(self, values: Mapping[str, np.ndarray]) -> None:
        """Overwrite params by path (a training step's new weights, optimizer state and buffers), then refill
        the prepared forms read from them. Every value is checked before anything is written, and a call in
        progress finishes first, so no call sees half-written weights."""
        checked = []
        for path, value in values.items():
            index = self._weight_index(path)
            target = self._weights[index]
            array = np.asarray(value)
            if array.shape != target.shape or array.dtype != target.dtype:
                raise BrazeError(f"weight '{path}' is {target.dtype}{list(target.shape)}; got "
                                 f"{array.dtype}{list(array.shape)}")
            checked.append((index, array))
        with self._lock:
            for index, array in checked:
                np.copyto(self._writable(index), array)
            if self.built.prepare is not None:
                self._prepare(self.library)

    def swap_weights(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """write_weights without the copies: each aligned, C-contiguous array of the weight's type becomes the
        param's buffer, and the buffer it replaces is returned under its path (a training step writes its next new
        values there); an array that cannot be a buffer is copied in and returned itself. The caller must not use
        an array it handed over, except through what this returns."""
        checked = []
        for path, value in values.items():
            index = self._weight_index(path)
            target = self._weights[index]
            if not isinstance(value, np.ndarray) or value.shape != target.shape or value.dtype != target.dtype:
                raise BrazeError(f"weight '{path}' is {target.dtype}{list(target.shape)}; got "
                                 f"{getattr(value, 'dtype', type(value).__name__)}{list(np.shape(value))}")
            own = value.flags.c_contiguous and value.flags.writeable and address(value) % ALIGNMENT == 0
            checked.append((path, index, value, own and value.nbytes > 0))
        returned = {}
        with self._lock:
            for path, index, value, own in checked:
                if own:
                    replaced = self._weights[index]
                    returned[path] = replaced if replaced.flags.writeable else aligned_copy(replaced)
                    self._weights[index] = value
                    self._weight_ptrs[index] = address(value)
                else:
                    np.copyto(self._writable(index), value)
                    returned[path] = value
            if self.built.prepare is not None:
                self._prepare(self.library)
        return returned

    def _weight_index(self, path: str) -> int:
        for k, slot in enumerate(self.built.weights):
            if slot.kind == "param" and slot.path == path:
                return k
        raise BrazeError(f"@{self.graph.name} holds no weight '{path}'")

    # --- inspection ------------------------------------------------------------------------------------------
    @property
    def input_types(self) -> tuple[TensorType, ...]:
        return tuple(s.type for s in self._specs)

    @property
    def output_types(self) -> tuple[TensorType, ...]:
        return tuple(v.type for v in self.built.outputs)

    def signature(self) -> str:
        """`(x: f32[1,4]) -> (f32[1,4])`: the inputs and outputs a call takes and returns."""
        ins = ", ".join(f"{s.name}: {s.type}" for s in self._specs)
        return f"({ins}) -> ({', '.join(str(t) for t in self.output_types)})"

    def __repr__(self) -> str:
        return (f"Executable(@{self.graph.name}{self.signature()}, {len(self.built.kernels)} kernels, "
                f"arena {self.built.arena_bytes} bytes, {self.threads} thread(s))")

    # --- calls -----------------------------------------------------------------------------------------------
    def __call__(self, *inputs: Any, out: Any = None) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run the graph; validates every input first (BrazeError, ShapeError or DTypeError naming it). With `out=`
        (an array, or a tuple of arrays for several outputs) the results are written there and returned."""
        outputs = self.run(inputs, out)
        return outputs[0] if len(outputs) == 1 else outputs

    def run(self, inputs: Sequence[Any], out: Any = None) -> tuple[np.ndarray, ...]:
        """Run the graph on a sequence of inputs; always returns a tuple of output arrays (`out`'s, when given)."""
        if len(inputs) != len(self._specs):
            raise self._count_error(inputs)
        if type(inputs) is not tuple:
            inputs = tuple(inputs)  # the stub reads a tuple's items
        if self._threads_version != _threads.version:
            self.threads  # noqa: B018 (follow a new process thread count before taking the lock)
        if self._load_version != _cpu_load.version and self._threads > 1:
            self._follow_load()
        answer = STUB_BUSY
        if self._lock_free:  # the stub holds the frame's busy word itself
            outputs = self._outputs(out)
            if len(outputs) == len(self._out_specs):
                answer = self._stub(self._frame_pointer, inputs, outputs)
                if not answer:
                    return outputs
        with self._lock:
            if answer != STUB_BUSY:  # the stub declined an array: the general path, with these outputs
                with self._frame_held():
                    outputs = outputs if out is None else self._given_outputs(outputs)
                    self._run_checked(inputs, outputs)
                return outputs
            outputs = self._outputs(out)
            # the stub returns 0 when it ran the call, else k + 1 for the first input it left to the general path
            if len(outputs) != len(self._out_specs) or self._stub is None or \
                    (self._calls != 1 and not self._stub_parallel) or self._stub_call(inputs, outputs):
                with self._frame_held():
                    outputs = outputs if out is None else self._given_outputs(outputs)
                    self._run_checked(inputs, outputs)
            if self._checks and self._status[0]:
                self._raise_check()
        return outputs

    def _outputs(self, out: Any) -> tuple[Any, ...]:
        """The arrays a call writes: `out`'s as a tuple, else new ones (OutputSpec.new)."""
        if out is not None:
            return out if type(out) is tuple else tuple(out) if isinstance(out, list) else (out,)
        if self._new_output is not None:
            return (self._new_output(),)
        return tuple(new() for new in self._new_outputs)

    def _stub_call(self, inputs: tuple[Any, ...], outputs: tuple[np.ndarray, ...]) -> int:
        """The stub's answer for this call, once no other thread's call holds the frame."""
        while True:
            answer = self._stub(self._frame_pointer, inputs, outputs)
            if answer != STUB_BUSY:
                return answer
            time.sleep(0)

    @contextmanager
    def _frame_held(self) -> Iterator[None]:
        """Hold the frame's busy word (when there is a frame) while the general path uses the buffers."""
        if self._frame is None:
            yield
            return
        claim, release = frame_claims()
        while not claim(self._frame_pointer):
            time.sleep(0)
        try:
            yield
        finally:
            release(self._frame_pointer)

    def _run_checked(self, inputs: tuple[Any, ...], outputs: tuple[np.ndarray, ...]) -> None:
        """The general path: every input checked (and converted or staged) in Python, then the native code on one
        thread or on the pool; results written through staging are copied out."""
        arrays = [spec.check(x) for spec, x in zip(self._specs, inputs)]
        pointers = self._input_ptrs
        for k, spec in enumerate(self._specs):
            pointers[k] = spec.pointer(arrays[k])
        written = [spec.pointer(y) for spec, y in zip(self._out_specs, outputs)]
        for k, where in enumerate(written):
            self._output_ptrs[k] = where
        if self._calls == 1:
            self._entry(*self._one_thread)
        else:
            _pool.pool().run(self._words_address, self._calls, self._enter_budget)
        for spec, y, where in zip(self._out_specs, outputs, written):
            spec.finish(y, where)

    def _count_error(self, inputs: Sequence[Any]) -> BrazeError:
        wanted = ", ".join(f"{s.name}: {s.type}" for s in self._specs) or "none"
        return BrazeError(f"@{self.graph.name} takes {len(self._specs)} input(s) ({wanted}); got {len(inputs)}")

    def _given_outputs(self, given: tuple[Any, ...]) -> tuple[np.ndarray, ...]:
        """The caller's out= arrays, one per output, each validated (with the errors the stub cannot give)."""
        if len(given) != len(self._out_specs):
            raise BrazeError(f"@{self.graph.name} has {len(self._out_specs)} output(s); out= gives {len(given)}")
        return tuple(spec.accept(array) for spec, array in zip(self._out_specs, given))

    def _raise_check(self) -> None:
        """Raise the error of the run-time check that fired in the last call, after clearing its status words."""
        number, value = (int(w) for w in self._status)
        self._status[...] = 0
        template = self._checks.get(number)
        if template is None:
            raise BrazeError(f"module {self.built.name!r} reported run-time check {number}, which it does not have")
        raise IndexRangeError(template.replace("{}", str(value), 1))
