"""Test support: compile the kernel of one node into a module of its own and run it on numpy buffers.

`run_node(node, arrays, nthreads)` lowers the node (braze.codegen.lower.lower_node), adds a tiny exported wrapper
`void t_<hash>(ptr outs, ptr ins, ptr scratches, i64 tid, i64 nthreads, ptr status)` that reads the buffer pointers
from two arrays and calls the kernel, compiles the module without the disk cache and calls the wrapper for tid 0..n-1 in
turn, each thread with its own 64-byte aligned scratch area. Every operand is checked against the node's types and
copied into a 64-byte aligned buffer before any native call; results start filled with a garbage byte pattern, so
an element a kernel forgets to write shows up. `check_node` also runs 3 threads and demands the same bytes.
"""
from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass
from typing import Any, Sequence

import llvmlite.ir as ir
import numpy as np
import pytest
from hypothesis import strategies as st

from braze.codegen import compile_ir, host_target
from braze.codegen.abi import SHARE_AREA, SHARE_BYTES, STATUS_OFFSET
from braze.codegen.loops import I64, PTR
from braze.codegen.lower import KernelContext, KernelSpec, lower_node
from braze.codegen.lower.accuracy import ACCURACY, Accuracy
from braze.ir.evaluate import evaluate
from braze.ir.graph import Node, Value, sorted_attrs
from braze.ir.interpret import interpret
from braze.ir.registry import get_op
from braze.ir.types import TensorType, as_dtype, type_of

GARBAGE = 0xA7  # as float32 bytes: -4.6e-15 with every byte 0xA7; as bool it is neither 0 nor 1


def make_node(op: str, *operands: Any, **attrs: Any) -> Node:
    """A node applying `op` to operands given as TensorTypes or arrays (their types), named in0, in1, ..."""
    definition = get_op(op)
    types = [o if isinstance(o, TensorType) else type_of(np.asarray(o)) for o in operands]
    checked = definition.check_attrs(attrs)
    outs = definition.infer_types(types, checked)
    inputs = tuple(Value(f"in{i}", t) for i, t in enumerate(types))
    outputs = tuple(Value(f"out{i}", t) for i, t in enumerate(outs))
    return Node(op, inputs, outputs, sorted_attrs(checked))


def force_cpu(cpu: str | None, monkeypatch: Any) -> int:
    """Compile for `cpu` (BRAZE_CPU; None: the host), skipping the test where the host cannot run its code (an x86
    host without AVX2); returns that target's float32 lanes."""
    if cpu is not None:
        if not (host_target().is_x86 and host_target().vector_width >= 8):
            pytest.skip("needs an AVX2 host")
        monkeypatch.setenv("BRAZE_CPU", cpu)
    return host_target().vector_width


def describe(node: Node) -> str:
    """Everything that decides a node's kernel, as text (graph attributes print as IR)."""
    attrs = ", ".join(f"{k}={v}" for k, v in node.attrs)
    types = ", ".join(str(v.type) for v in node.inputs + node.outputs)
    return f"{node.op}[{attrs}]({types})"


def aligned_empty(nbytes: int) -> np.ndarray:
    """A byte buffer of at least 64 bytes whose data starts on a 64-byte boundary."""
    raw = np.empty(max(nbytes, 64) + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + max(nbytes, 64)]


def aligned_copy(array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(storage, view): a 64-byte aligned, C-contiguous copy of array and the storage that keeps it alive."""
    storage = aligned_empty(array.nbytes)
    view = storage[:array.nbytes].view(array.dtype).reshape(array.shape)
    view[...] = array
    return storage, view


@dataclass
class Compiled:
    """A node's compiled kernel behind its wrapper."""

    node: Node
    spec: KernelSpec
    call: Any
    library: Any
    module: ir.Module


_compiled: dict[str, Compiled] = {}


def compile_node(node: Node, target=None, fixed: frozenset[str] = frozenset()) -> Compiled:
    """Lower and compile `node` (once per process for equal nodes and targets); `fixed` names the operands the
    lowering may read in a prepared form (KernelContext.fixed: params in a module)."""
    target = target or host_target()
    key = describe(node) + repr(sorted(fixed)) + target.identity
    if key in _compiled:
        return _compiled[key]
    digest = hashlib.sha256(key.encode()).hexdigest()
    module = target.new_module(f"t_{digest[:16]}")
    spec = lower_node(node, KernelContext(module, target, f"k_{digest[:8]}_{node.op}", fixed))
    wrapper = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64, I64, PTR]), f"t_{digest[:16]}")
    outs, ins, scratches, tid, nthreads, status = wrapper.args
    b = ir.IRBuilder(wrapper.append_basic_block("entry"))

    def pointer_at(array: ir.Value, index: ir.Value | int) -> ir.Value:
        slot = b.gep(array, [index if isinstance(index, ir.Value) else ir.Constant(I64, index)], source_etype=PTR)
        return b.load(slot, typ=PTR)
    args = [pointer_at(outs, i) for i in range(len(node.outputs))] + \
           [pointer_at(ins, i) for i in range(len(node.inputs))]
    for j, prepared in enumerate(spec.prepared):  # packed forms follow the inputs; filled before every call
        packed = pointer_at(ins, len(node.inputs) + j)
        b.call(prepared.function, [args[len(node.outputs) + prepared.operand], packed])
        args[len(node.outputs) + prepared.operand] = packed
    b.call(spec.function, args + [pointer_at(scratches, tid), tid, nthreads, status])
    b.ret_void()
    library = compile_ir(module, use_cache=False)
    call = library.cfunc(wrapper.name, None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                         ctypes.c_int64, ctypes.c_void_p)
    compiled = Compiled(node, spec, call, library, module)
    _compiled[key] = compiled
    return compiled


def run_node(node: Node, arrays: Sequence[np.ndarray], nthreads: int = 1, *,
             fixed: frozenset[str] = frozenset()) -> tuple[np.ndarray, ...]:
    """The node's results computed by its kernel, thread 0..nthreads-1 called one after another; operands named
    in `fixed` may be read in a prepared form (prepared before every call here). A run-time check that fires
    fails the test: run_node_reporting returns what it reported."""
    results, status = run_node_reporting(node, arrays, nthreads, fixed=fixed)
    assert status == (0, 0), f"{describe(node)}: a run-time check reported {status}"
    return results


def run_node_reporting(node: Node, arrays: Sequence[np.ndarray], nthreads: int = 1, *,
                       fixed: frozenset[str] = frozenset()) -> tuple[tuple[np.ndarray, ...], tuple[int, int]]:
    """run_node's results and the status words the kernel left (check number and value; (0, 0) when none
    fired)."""
    compiled = compile_node(node, fixed=fixed)
    spec = compiled.spec
    if len(arrays) != len(node.inputs):
        raise ValueError(f"{node.op}: {len(arrays)} arrays for {len(node.inputs)} operands")
    operands = []
    for value, array in zip(node.inputs, arrays):
        array = np.asarray(array)
        if array.shape != value.shape or array.dtype != value.dtype.numpy:
            raise ValueError(f"{node.op}: operand %{value.name} is {value.type}, got {array.dtype}{list(array.shape)}")
        operands.append(array)
    keep = []
    in_views = []
    for array in operands:
        storage, view = aligned_copy(array)
        keep.append(storage)
        in_views.append(view)
    for prepared in spec.prepared:
        storage = aligned_empty(prepared.nbytes)
        keep.append(storage)
        in_views.append(storage)
    out_views = []
    for value in node.outputs:
        storage = aligned_empty(value.type.nbytes)
        storage[...] = GARBAGE
        keep.append(storage)
        out_views.append(storage[:value.type.nbytes].view(value.dtype.numpy).reshape(value.shape))
    scratch = [aligned_empty(spec.scratch_bytes) for _ in range(nthreads)]
    pointer_array = ctypes.c_void_p * max(len(out_views), len(in_views), nthreads, 1)
    outs = pointer_array(*[v.ctypes.data for v in out_views])
    ins = pointer_array(*[v.ctypes.data for v in in_views])
    scratches = pointer_array(*[s.ctypes.data for s in scratch])
    status = aligned_empty(SHARE_BYTES).view(np.int64)  # the status words, then the claim and share words
    status[...] = 0
    shared = aligned_empty(spec.shared_bytes)  # the call's shared area (codegen/abi.py)
    keep.append(shared)
    status[(SHARE_AREA - STATUS_OFFSET) // 8] = shared.ctypes.data
    for tid in range(nthreads):
        compiled.call(ctypes.addressof(outs), ctypes.addressof(ins), ctypes.addressof(scratches), tid, nthreads,
                      status.ctypes.data)
    return tuple(np.array(v) for v in out_views), (int(status[0]), int(status[1]))


def reference(node: Node, arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """The numpy reference of the node (the interpreter on a fused region's body)."""
    if node.op == "fused":
        return interpret(node.attr["body"], list(arrays))
    return evaluate(node.op, list(arrays), node.attr)


def accuracy_of(node: Node) -> Accuracy:
    """The node's bound from the accuracy table; a fused region takes the loosest of its body's ops."""
    if node.op != "fused":
        return ACCURACY.get(node.op, Accuracy())
    body = [accuracy_of(n) for n in node.attr["body"].nodes]
    return Accuracy(max((a.ulps for a in body), default=0.0), max((a.sum_terms for a in body), default=0.0),
                    max((a.input_abs for a in body), default=0.0), "the loosest bound of the region's ops")


def assert_close(got: np.ndarray, want: np.ndarray, allowed: np.ndarray | float, label: str) -> None:
    """Equal dtype and shape; NaN exactly where the reference has NaN; equal infinities; |got - want| <= allowed."""
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{label}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
    if got.dtype.kind not in "fc":
        bad = got != want
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        nan_g, nan_w = np.isnan(g), np.isnan(w)
        inf = np.isinf(w) | np.isinf(g)
        with np.errstate(invalid="ignore"):
            bad = (nan_g != nan_w) | (inf & (g != w) & ~nan_w) | \
                  (~nan_w & ~inf & ~(np.abs(g - w) <= np.broadcast_to(allowed, w.shape)))
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        limit = np.broadcast_to(allowed, want.shape)[index] if np.ndim(allowed) else allowed
        raise AssertionError(f"{label}: {int(bad.sum())} of {bad.size} elements differ; first at {index}: "
                             f"got {got[index]!r}, want {want[index]!r}, allowed {float(limit):.3g}")


def eps(dtype: np.dtype) -> float:
    """One ulp of 1.0 in a float dtype (0 for exact dtypes)."""
    return float(np.finfo(dtype).eps) if np.dtype(dtype).kind == "f" else 0.0


def allowed_error(node: Node, want: np.ndarray, *, terms: int = 0, scale: np.ndarray | float = 0.0,
                  inputs: np.ndarray | float = 0.0) -> np.ndarray | float:
    """The error accuracy.py allows for this node's result `want` (see Accuracy)."""
    acc = accuracy_of(node)
    e = eps(want.dtype)
    if acc.exact or e == 0.0:
        return 0.0
    tiny = 4.0 * float(np.finfo(want.dtype).smallest_subnormal)  # a few ulps of the subnormal range
    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = np.where(np.isfinite(want), np.abs(want.astype(np.float64)), 0.0)
        x = np.abs(np.asarray(inputs, dtype=np.float64))
        x = np.where(np.isfinite(x), x, 0.0)
        return e * (acc.ulps * magnitude + acc.sum_terms * np.sqrt(terms + 1.0) * np.asarray(scale)
                    + acc.input_abs * x) + tiny


def check_node(node: Node, arrays: Sequence[np.ndarray], *, terms: int = 0, scale: Any = 0.0, inputs: Any = 0.0,
               threads: bool = True) -> tuple[np.ndarray, ...]:
    """Run the node on 1 thread, compare every result with the reference within the node's accuracy, then run 3
    threads one after another and demand identical bytes. Returns the results."""
    got = run_node(node, arrays)
    want = reference(node, arrays)
    for k, (g, w) in enumerate(zip(got, want)):
        allowed = allowed_error(node, w, terms=terms, scale=scale[k] if isinstance(scale, tuple) else scale,
                                inputs=inputs)
        assert_close(g, w, allowed, f"{describe(node)} result {k}")
    if threads:
        split = run_node(node, arrays, nthreads=3)
        for k, (g, s) in enumerate(zip(got, split)):
            assert g.tobytes() == s.tobytes(), f"{describe(node)} result {k}: 3 threads differ from 1"
    return got


def random_array(rng: np.random.Generator, shape: Sequence[int], dtype: Any, *, low: float = -3.0,
                 high: float = 3.0) -> np.ndarray:
    """Random values of dtype: uniform floats in [low, high), ints over a small range, random bools."""
    dtype = np.dtype(as_dtype(dtype).numpy_name)
    shape = tuple(shape)
    if dtype.kind == "f":
        return rng.uniform(low, high, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100) + 1, shape).astype(dtype)


def fused_nodes(graph, inputs: Sequence[np.ndarray]) -> list[tuple[Node, list[np.ndarray]]]:
    """Each `fused` node of a graph with the values of its operands, computed by the reference interpreter."""
    out = []
    for node in graph.nodes:
        if node.op == "fused":
            operands = interpret(graph.replace(outputs=node.inputs), list(inputs))
            out.append((node, list(operands)))
    return out


# --- hypothesis strategies and test data ----------------------------------------------------------------------

# Sizes that exercise the vector loops: empty, 1, odd remainders around the vector widths, a few full vectors.
DIMS = (0, 1, 1, 2, 3, 5, 7, 9, 16, 17, 33)
MAX_ELEMENTS = 4096


@st.composite
def shapes(draw, min_rank: int = 0, max_rank: int = 4, nonempty: bool = False) -> tuple[int, ...]:
    """A shape of rank in [min_rank, max_rank] with dims from DIMS and at most MAX_ELEMENTS elements."""
    choices = [d for d in DIMS if d or not nonempty]
    rank = draw(st.integers(min_rank, max_rank))
    shape = tuple(draw(st.sampled_from(choices)) for _ in range(rank))
    while prod_of(shape) > MAX_ELEMENTS:
        shape = shape[1:]
    return shape


@st.composite
def broadcast_operands(draw, count: int, **kw) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """A result shape and `count` operand shapes broadcasting to it (leading axes dropped, axes set to 1)."""
    out = draw(shapes(**kw))
    operands = []
    for _ in range(count):
        lead = draw(st.integers(0, len(out)))
        shape = tuple(1 if draw(st.booleans()) and draw(st.booleans()) else d for d in out[lead:])
        operands.append(shape)
    operands[draw(st.integers(0, count - 1))] = out  # one operand has the full shape, as is typical
    return out, operands


def prod_of(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


FLOAT_SPECIALS = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-40, -1e-40, 88.5, -104.0, 3.4e38)


def special_array(rng: np.random.Generator, shape: Sequence[int], dtype: Any, *, low: float = -3.0,
                  high: float = 3.0, fraction: float = 0.15, specials: Sequence[float] = FLOAT_SPECIALS
                  ) -> np.ndarray:
    """random_array with about `fraction` of the elements replaced by special values (NaN, infinities, signed
    zeros, huge and subnormal floats; the extremes of integer dtypes)."""
    array = random_array(rng, shape, dtype, low=low, high=high)
    if array.size == 0 or array.dtype.kind == "b":
        return array
    if array.dtype.kind == "f":
        specials = np.asarray(specials, dtype=array.dtype)
    else:
        info = np.iinfo(array.dtype)
        specials = np.asarray([info.min, info.max, 0, -1 if info.min < 0 else 1], dtype=array.dtype)
    pick = rng.random(array.shape) < fraction
    array[pick] = rng.choice(specials, size=int(pick.sum()))
    return array
