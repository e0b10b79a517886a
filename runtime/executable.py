"""Executable: a compiled graph ready to call on numpy arrays, one foreign call per thread per call.

An Executable owns everything its entry point touches: 64-byte-aligned copies of the weights, the prepared forms
of weights that some kernels read instead (a GEMM's packed B, filled once by the module's prepare function right
after the weights are copied), the arena (sized by the memory plan), per-thread scratch, the barrier's sync block
and an aligned staging buffer per input. A call validates every input before any native code runs (count, then
each input's type, rank, shape and dtype), stages inputs that are not C-contiguous and 64-byte aligned, allocates
aligned outputs, and enters the native code: once in the calling thread with one thread, or once per thread
through the process-wide pool (runtime/pool.py).
ctypes releases the GIL for the native part. No numpy computation and no Python per op happens inside a call.
When a kernel's run-time check fired (an index computed inside the graph out of range), the call raises that
check's error (IndexRangeError, worded as eager evaluation words it) after the native code has returned.

Accepted inputs: numpy arrays (and numpy scalars for rank-0 inputs, or objects with __array__, such as braze
Tensors) of the expected shape. The dtype must be the expected one, except for the documented safe conversions:
a same-kind widening that numpy calls safe (int8/int32 -> int64, float32 -> float64, uint8 -> int32, ...) and a
byte-swapped array of the expected type; those are converted into the staging buffer. Everything else raises a
braze error naming the input and the expected type.

Thread safety: one lock per Executable. The arena, scratch and staging buffers are shared by its calls, so calls
from several Python threads run one at a time on one Executable (each still releases the GIL while it runs, and
different Executables run concurrently). A parallel call returns or raises only after every thread has left the
native code; a thread that fails before entering it (an interrupt) sets the barrier's abort flag so the others do
not wait for it forever, and the call raises.
"""
from __future__ import annotations

import ctypes
import threading
from functools import partial
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from braze.codegen.abi import ENTRY, PREPARE, STATUS_OFFSET, STATUS_WORDS
from braze.codegen.sync import ABORT_OFFSET, SYNC_BYTES
from braze.codegen.graph_cache import compile_module
from braze.codegen.jit import CompiledLibrary
from braze.codegen.module_layout import BuiltModule
from braze.codegen.target import Target
from braze.ir.errors import BrazeError, DTypeError, IndexRangeError, ShapeError
from braze.ir.graph import Graph
from braze.ir.registry import get_op
from braze.ir.types import TensorType

from . import pool as _pool
from . import threads as _threads
from .memory import ALIGNMENT, address, aligned_block, aligned_copy, aligned_empty
from .timings import CompileTimings

if TYPE_CHECKING:
    from braze.codegen.module_builder import Lowering



def _describe(t: TensorType) -> str:
    return f"a {t.dtype.numpy_name} array of shape {t.shape} ({t})"


def index_bounds(graph: Graph) -> dict[str, int]:
    """Graph inputs used as indices (directly or through ops that preserve values, such as reshapes and casts): the
    exclusive upper bound their values must respect, from the registry's index_operands trait. Native kernels
    cannot raise, so the runtime checks these before a call instead of letting an out-of-range token id read a
    clamped row (kernels check indices computed inside the graph themselves)."""
    origin = {v.name: v.name for v in graph.inputs}
    bounds: dict[str, int] = {}
    for node in graph.nodes:
        op = get_op(node.op)
        if op.preserves_values and node.inputs and node.inputs[0].name in origin:
            origin[node.out.name] = origin[node.inputs[0].name]
        for position, bound in op.index_operands:
            indices = node.inputs[position]
            if indices.name in origin:
                name = origin[indices.name]
                bounds[name] = min(bounds.get(name, bound(node)), bound(node))
    return bounds


class _InputSpec:
    """One graph input: its name, type and staging buffer, with the checks of a call."""

    __slots__ = ("index", "name", "type", "dtype", "shape", "nbytes", "staging", "staging_address", "bound")

    def __init__(self, index: int, name: str, typ: TensorType, bound: int | None = None) -> None:
        self.index, self.name, self.type, self.bound = index, name, typ, bound
        self.dtype, self.shape, self.nbytes = typ.dtype.numpy, typ.shape, typ.nbytes
        self.staging = aligned_empty(typ.shape, self.dtype)
        self.staging_address = address(self.staging)

    def label(self) -> str:
        return f"input {self.index} ('{self.name}')"

    def check(self, x: Any) -> np.ndarray:
        """The input as an ndarray of the right shape, after the checks and the documented conversions."""
        if type(x) is not np.ndarray:
            x = self._as_array(x)
        if x.shape != self.shape:
            if x.ndim != len(self.shape):
                raise ShapeError(f"{self.label()}: expected rank {len(self.shape)}, {_describe(self.type)}; "
                                 f"got rank {x.ndim} with shape {x.shape}")
            raise ShapeError(f"{self.label()}: expected {_describe(self.type)}; got shape {x.shape}")
        if x.dtype != self.dtype and not safe_conversion(x.dtype, self.dtype):
            raise DTypeError(f"{self.label()}: expected {_describe(self.type)}; got dtype {x.dtype}, which does "
                             f"not convert safely (convert it explicitly, e.g. x.astype(np.{self.dtype.name}))")
        if self.bound is not None and x.size and (x.min() < 0 or x.max() >= self.bound):
            bad = x[(x < 0) | (x >= self.bound)].flat[0]
            raise IndexRangeError(f"{self.label()}: index {bad} is out of range; the values index a dimension of "
                                  f"size {self.bound}, so they must lie in [0, {self.bound})")
        return x

    def _as_array(self, x: Any) -> np.ndarray:
        if isinstance(x, np.ndarray):
            return x
        if isinstance(x, np.generic) or (hasattr(x, "__array__") and not isinstance(x, (str, bytes, type))):
            try:
                return np.asarray(x)
            except Exception as exc:  # a broken __array__: report it as the user's input
                raise BrazeError(f"{self.label()}: expected {_describe(self.type)}; converting the "
                                 f"{type(x).__name__} failed: {exc}") from None
        raise BrazeError(f"{self.label()}: expected {_describe(self.type)}; got {type(x).__name__}")

    def pointer(self, x: np.ndarray) -> int:
        """The address to pass for x: its own data when usable as is, else the staging buffer filled from it."""
        if x.dtype == self.dtype and x.flags.c_contiguous:
            where = _data_address(x)
            if where % ALIGNMENT == 0:
                return where
            ctypes.memmove(self.staging_address, where, self.nbytes)
        else:
            self.staging[...] = x
        return self.staging_address


_char_view, _address_of = ctypes.c_char.from_buffer, ctypes.addressof


def _data_address(array: np.ndarray) -> int:
    """The address of a contiguous array's data: through a ctypes view (a third of the time of
    array.ctypes.data) when the array is writable and not empty, else through the array interface."""
    try:
        return _address_of(_char_view(array))
    except (TypeError, ValueError):
        return int(array.__array_interface__["data"][0])


def safe_conversion(got: np.dtype, want: np.dtype) -> bool:
    """Byte order only, or a widening numpy calls safe within integers or within floats (never across kinds)."""
    if got.newbyteorder("=") == want:
        return True
    same_family = got.kind == want.kind or (got.kind == "u" and want.kind == "i")
    return same_family and bool(np.can_cast(got, want, casting="safe"))


class Executable:
    """A compiled graph: call it with one array per graph input; returns one array, or a tuple for several."""

    def __init__(self, built: BuiltModule, library: CompiledLibrary, *, threads: int | None = None) -> None:
        self.built, self.library, self.graph = built, library, built.graph
        self.timings: CompileTimings | None = None  # set by the compile path (runtime/compile_path.py)
        self.threads = _threads.choose_threads(_threads.estimate_work(built.graph), threads)
        self._entry = ENTRY.cfunc(library, built.entry)
        self._weights = [self._weight(slot) for slot in built.weights]
        self._prepared = self._prepared_buffers()
        self._arena = aligned_block(built.arena_bytes)
        self._scratch = aligned_block(built.scratch_stride * self.threads)
        self._sync = aligned_block(SYNC_BYTES)
        self._status = self._sync[STATUS_OFFSET:STATUS_OFFSET + 8 * STATUS_WORDS].view(np.int64)
        self._checks = dict(built.checks)
        bounds = index_bounds(built.graph)
        self._specs = [_InputSpec(k, v.name, v.type, bounds.get(v.name)) for k, v in enumerate(built.inputs)]
        self._input_ptrs = (ctypes.c_void_p * max(len(self._specs), 1))()
        self._output_ptrs = (ctypes.c_void_p * max(len(built.outputs), 1))()
        buffers = self._weights + self._prepared
        self._weight_ptrs = (ctypes.c_void_p * max(len(buffers), 1))(*[address(w) for w in buffers])
        self.prepare_calls = 0
        if built.prepare is not None:
            self._prepare(library)
        self._outputs = _output_layout(built.outputs)
        self._lock = threading.Lock()
        # ctypes objects, not ints, so that a call converts no argument
        self._fixed = (self._input_ptrs, self._weight_ptrs, self._output_ptrs, ctypes.c_void_p(address(self._arena)),
                       ctypes.c_void_p(address(self._scratch)))
        self._one_thread = (*self._fixed, ctypes.c_int64(0), ctypes.c_int64(1), ctypes.c_void_p(address(self._sync)))
        self._entry_address = library.address(built.entry)
        self._pool_args = (ctypes.addressof(self._input_ptrs), ctypes.addressof(self._weight_ptrs),
                           ctypes.addressof(self._output_ptrs), address(self._arena), address(self._scratch),
                           address(self._sync))
        self._first = partial(self._run_thread, self.threads, 0)
        self._abort_address = address(self._sync) + ABORT_OFFSET

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
        return aligned_copy(array)

    def _prepared_buffers(self) -> list[np.ndarray]:
        """One aligned buffer per prepared weight, after checking the slots the module's prepare function fills."""
        count, buffers = len(self._weights), []
        for k, slot in enumerate(self.built.prepared):
            if slot.slot != count + k or not 0 <= slot.source < count or slot.nbytes <= 0:
                raise BrazeError(f"module {self.built.name!r}: prepared weight {slot.key!r} has slot {slot.slot}, "
                                 f"source {slot.source} and {slot.nbytes} bytes; expected slot {count + k}, a "
                                 f"source below {count} and a positive size")
            buffer = aligned_block(slot.nbytes)
            if buffer.nbytes < slot.nbytes or address(buffer) % ALIGNMENT:
                raise BrazeError(f"could not allocate {slot.nbytes} aligned bytes for prepared weight {slot.key!r}")
            buffers.append(buffer)
        if self.built.prepared and self.built.prepare is None:
            raise BrazeError(f"module {self.built.name!r} prepares weights but exports no prepare function")
        return buffers

    def _prepare(self, library: CompiledLibrary) -> None:
        """Fill the prepared weights from the weight copies, once, before the first call of the entry."""
        PREPARE.cfunc(library, self.built.prepare)(self._weight_ptrs)
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
            target = self._weights[self._weight_index(path)]
            array = np.asarray(value)
            if array.shape != target.shape or array.dtype != target.dtype:
                raise BrazeError(f"weight '{path}' is {target.dtype}{list(target.shape)}; got "
                                 f"{array.dtype}{list(array.shape)}")
            checked.append((target, array))
        with self._lock:
            for target, array in checked:
                np.copyto(target, array)
            if self.built.prepare is not None:
                self._prepare(self.library)

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
    def __call__(self, *inputs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        """Run the graph; validates every input first (BrazeError, ShapeError or DTypeError naming it)."""
        outputs = self.run(inputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def run(self, inputs: Sequence[Any]) -> tuple[np.ndarray, ...]:
        """Run the graph on a sequence of inputs; always returns a tuple of output arrays."""
        specs = self._specs
        if len(inputs) != len(specs):
            wanted = ", ".join(f"{s.name}: {s.type}" for s in specs) or "none"
            raise BrazeError(f"@{self.graph.name} takes {len(specs)} input(s) ({wanted}); got {len(inputs)}")
        arrays = [spec.check(x) for spec, x in zip(specs, inputs)]
        with self._lock:
            pointers = self._input_ptrs
            for k, spec in enumerate(specs):
                pointers[k] = spec.pointer(arrays[k])
            outputs = self._new_outputs()
            if self.threads == 1 or not self._run_parallel():
                self._entry(*self._one_thread)
            if self._checks and self._status[0]:
                self._raise_check()
        return outputs

    def _new_outputs(self) -> tuple[np.ndarray, ...]:
        total, layout = self._outputs
        block = np.empty(total + ALIGNMENT, np.uint8)
        base = _data_address(block)
        start = -base % ALIGNMENT
        pointers = self._output_ptrs
        outputs = []
        for k, (offset, dtype, count, shape) in enumerate(layout):
            pointers[k] = base + start + offset
            outputs.append(np.frombuffer(block, dtype, count, start + offset).reshape(shape))
        return tuple(outputs)

    def _raise_check(self) -> None:
        """Raise the error of the run-time check that fired in the last call, after clearing its status words."""
        number, value = (int(w) for w in self._status)
        self._status[...] = 0
        template = self._checks.get(number)
        if template is None:
            raise BrazeError(f"module {self.built.name!r} reported run-time check {number}, which it does not have")
        raise IndexRangeError(template.replace("{}", str(value), 1))

    def _run_parallel(self) -> bool:
        """Run on the pool with self.threads threads; False (nothing run) when another call holds the pool."""
        pool = _pool.pool()
        if not pool.try_acquire():
            return False
        try:
            pool.run(self._entry_address, self._pool_args, self.threads, self._first, self._abort)
        except BaseException:
            self._sync[...] = 0  # every thread has ended: clear the counters and the abort flag
            raise
        finally:
            pool.release()
        return True

    def _run_thread(self, nthreads: int, tid: int) -> None:
        """The calling thread's share of a parallel call (the workers' shares start natively, see pool.py)."""
        self._entry(*self._fixed, tid, nthreads, self._one_thread[-1])

    def _abort(self) -> None:
        """Release every thread waiting at a native barrier of the current call (its results are discarded)."""
        ctypes.c_int64.from_address(self._abort_address).value = 1


def _output_layout(outputs: Sequence[Any]) -> tuple[int, list[tuple[int, np.dtype, int, tuple[int, ...]]]]:
    """Byte offsets (64-byte aligned) of every output in one block per call, and the block's size."""
    layout, offset = [], 0
    for v in outputs:
        layout.append((offset, v.type.dtype.numpy, v.type.size, v.type.shape))
        offset += -(-v.type.nbytes // ALIGNMENT) * ALIGNMENT
    return offset, layout
