"""Executable: input validation before native code, safe conversions, outputs, threads, and no Python per op.

The graphs here are chains of elementwise ops compiled with the checking lowering of tests/codegen, so these tests
pin down the runtime alone; tests/runtime/test_models.py runs real models through braze.compile.
"""
from __future__ import annotations

import gc
import mmap
import sys
import threading
from typing import Any, Callable

import numpy as np
import pytest

from braze import ir
from braze.ir.errors import BrazeError, DTypeError, ShapeError
from braze.ir.passes import optimize
from braze.runtime.executable import Executable
from braze.runtime.memory import aligned_copy, unchangeable

from ..codegen.checking_lowering import checking_lower

F32 = ir.float32


def chain(length: int, shape: tuple[int, ...] = (4, 6), name: str = "chain") -> ir.Graph:
    """relu(x + w), then `length` alternating neg / mul-by-y steps."""
    b = ir.GraphBuilder(name)
    x = b.input("x", ir.TensorType(shape, F32))
    y = b.input("y", ir.TensorType(shape, F32))
    w = b.param("w", ir.TensorType(shape, F32), id=1)
    h = b.relu(b.add(x, w))
    for k in range(length):
        h = b.mul(h, y) if k % 2 else b.neg(h)
    weights = {"w": np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape)}
    return optimize(b.finish([h], weights=weights), ["plan_memory"])


def executable(length: int = 3, shape: tuple[int, ...] = (4, 6), threads: int | None = 1) -> Executable:
    return Executable.build(chain(length, shape), threads=threads, lower=checking_lower)


def inputs(shape: tuple[int, ...] = (4, 6), seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]


def expected(exe: Executable, args: list[np.ndarray]) -> np.ndarray:
    return ir.interpret(exe.graph, args)[0]


# --- validation -------------------------------------------------------------------------------------------------

def test_executable_wrong_input_count_names_the_expected_inputs() -> None:
    exe = executable()
    with pytest.raises(BrazeError, match=r"takes 2 input\(s\) \(x: f32\[4,6\], y: f32\[4,6\]\); got 1"):
        exe(inputs()[0])


def test_executable_wrong_rank_names_the_input_and_expected_type() -> None:
    exe = executable()
    x, y = inputs()
    with pytest.raises(ShapeError, match=r"input 1 \('y'\): expected rank 2, a float32 array of shape \(4, 6\) "
                                         r"\(f32\[4,6\]\); got rank 3 with shape \(1, 4, 6\)"):
        exe(x, y[None])


def test_executable_wrong_shape_names_the_input_and_expected_type() -> None:
    exe = executable()
    x, _ = inputs()
    with pytest.raises(ShapeError, match=r"input 1 \('y'\): expected a float32 array of shape \(4, 6\) "
                                         r"\(f32\[4,6\]\); got shape \(6, 4\)"):
        exe(x, np.zeros((6, 4), np.float32))


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int8, np.bool_])
def test_executable_unsafe_dtype_names_the_input_and_expected_type(dtype: Any) -> None:
    exe = executable()
    x, y = inputs()
    with pytest.raises(DTypeError, match=rf"input 0 \('x'\): expected a float32 array of shape \(4, 6\) "
                                         rf"\(f32\[4,6\]\); got dtype {np.dtype(dtype)}"):
        exe(x.astype(dtype), y)


@pytest.mark.parametrize("bad", [None, "x", [[1.0] * 6] * 4, 3.0, object()])
def test_executable_non_array_names_the_input_and_expected_type(bad: Any) -> None:
    exe = executable()
    x, _ = inputs()
    with pytest.raises(BrazeError, match=rf"input 1 \('y'\): expected a float32 array of shape \(4, 6\) "
                                         rf"\(f32\[4,6\]\); got {type(bad).__name__}"):
        exe(x, bad)


def test_executable_broken_array_protocol_is_reported_not_crashed() -> None:
    class Broken:
        def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
            raise RuntimeError("no data")

    exe = executable()
    with pytest.raises(BrazeError, match=r"input 0 \('x'\): .*converting the Broken failed: no data"):
        exe(Broken(), inputs()[1])


def test_executable_a_failed_call_leaves_it_usable() -> None:
    exe = executable()
    args = inputs()
    with pytest.raises(ShapeError):
        exe(args[0][:2], args[1])
    np.testing.assert_array_equal(exe(*args), expected(exe, args))


# --- conversions and layouts --------------------------------------------------------------------------------

def test_executable_non_contiguous_input_is_copied() -> None:
    exe = executable()
    x, y = inputs()
    x_view = np.ascontiguousarray(x.T).T  # Fortran order: same values, not C-contiguous
    assert not x_view.flags.c_contiguous
    np.testing.assert_array_equal(exe(x_view, y[:, ::1]), expected(exe, [x, y]))


def test_executable_strided_view_input_is_copied() -> None:
    exe = executable()
    x, y = inputs()
    big = np.zeros((8, 12), np.float32)
    big[::2, ::2] = x
    np.testing.assert_array_equal(exe(big[::2, ::2], y), expected(exe, [x, y]))


def test_executable_byte_swapped_input_is_converted() -> None:
    exe = executable()
    x, y = inputs()
    np.testing.assert_array_equal(exe(x.astype(">f4"), y), expected(exe, [x, y]))


def test_executable_safe_widening_is_converted() -> None:
    exe = executable()
    x, y = inputs()
    half = x.astype(np.float16)
    np.testing.assert_array_equal(exe(half, y), expected(exe, [half.astype(np.float32), y]))


def test_executable_array_like_input_is_accepted() -> None:
    class Wrapped:
        def __init__(self, a: np.ndarray) -> None:
            self.a = a

        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            return self.a

    exe = executable()
    x, y = inputs()
    np.testing.assert_array_equal(exe(Wrapped(x), y), expected(exe, [x, y]))


def test_executable_inputs_are_not_modified_and_outputs_are_fresh() -> None:
    exe = executable()
    x, y = inputs()
    keep = x.copy(), y.copy()
    first, second = exe(x, y), exe(x, y)
    np.testing.assert_array_equal(x, keep[0])
    np.testing.assert_array_equal(y, keep[1])
    assert first is not second and not np.shares_memory(first, second)
    assert first.flags.c_contiguous and first.flags.writeable and first.flags.owndata


def test_executable_large_outputs_are_allocated_aligned() -> None:
    exe = executable(2, shape=(64, 64))
    assert exe(*inputs((64, 64))).ctypes.data % 64 == 0


def test_executable_returns_a_tuple_for_several_outputs() -> None:
    b = ir.GraphBuilder("two")
    x = b.input("x", ir.TensorType((3,), F32))
    g = optimize(b.finish([b.relu(x), b.neg(x)]), ["plan_memory"])
    exe = Executable.build(g, lower=checking_lower)
    a, c = exe(np.array([-1, 0, 2], np.float32))
    np.testing.assert_array_equal(a, [0, 0, 2])
    np.testing.assert_array_equal(c, [1, 0, -2])


# --- what happens inside a call ---------------------------------------------------------------------------------

def profiled(fn: Callable[[], Any]) -> list[tuple[str, str, str]]:
    """Every Python-level and C-level call made while fn runs: (event, module, function name)."""
    seen: list[tuple[str, str, str]] = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen.append((event, frame.f_globals.get("__name__", ""), frame.f_code.co_name))
        elif event == "c_call":
            seen.append((event, getattr(arg, "__module__", None) or "", getattr(arg, "__name__", "")))

    gc.disable()  # a collection could run finalizers (Python calls) in the middle of the call
    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
        gc.enable()
    return seen


def test_executable_call_does_no_python_work_per_op() -> None:
    short, long = executable(2), executable(40)
    args = inputs()
    short(*args), long(*args)  # warm up (first-call caches in numpy and ctypes)
    few, many = profiled(lambda: short(*args)), profiled(lambda: long(*args))
    assert len(few) == len(many), (few, many)


def test_executable_call_never_reaches_the_interpreter_or_numpy_math() -> None:
    exe = executable(12)
    args = inputs()
    exe(*args)
    calls = profiled(lambda: exe(*args))
    assert not [c for c in calls if c[1].startswith(("braze.ir", "braze.frontend"))]
    math = {"add", "multiply", "negative", "maximum", "matmul", "dot", "einsum", "copyto"}
    assert not [c for c in calls if c[2] in math]


def test_executable_call_with_numpy_math_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    exe = executable(6)
    args = inputs()
    want = expected(exe, args)

    def forbidden(*a: Any, **k: Any) -> None:
        raise AssertionError("numpy math was called during a compiled call")

    for name in ("add", "multiply", "negative", "maximum", "matmul", "dot", "einsum", "copyto", "where"):
        monkeypatch.setattr(np, name, forbidden)
    got = exe(*args)
    monkeypatch.undo()
    np.testing.assert_array_equal(got, want)


# --- threads ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2, 4])
def test_executable_thread_counts_agree(threads: int) -> None:
    exe = executable(9, shape=(37, 53), threads=threads)
    assert exe.threads == threads
    args = inputs((37, 53))
    np.testing.assert_array_equal(exe(*args), expected(exe, args))


def test_executable_concurrent_calls_from_python_threads_are_correct() -> None:
    """Several Python threads call one Executable (serialized by its lock) and another one at the same time."""
    shared = executable(21, shape=(64, 129), threads=2)
    other = executable(22, shape=(64, 129), threads=2)
    failures: list[str] = []

    def work(seed: int) -> None:
        for k in range(15):
            exe = shared if (seed + k) % 3 else other
            args = inputs((64, 129), seed=seed * 100 + k)
            got = exe(*args)
            if not np.array_equal(got, expected(exe, args)):
                failures.append(f"thread {seed} call {k}")

    workers = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in workers)
    assert not failures


def test_executable_threads_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAZE_NUM_THREADS", "3")
    assert executable(2, shape=(512, 1024), threads=None).threads == 3
    assert executable(2, threads=None).threads == 1  # a small graph stays on one thread within that count
    monkeypatch.setenv("BRAZE_NUM_THREADS", "1")
    assert executable(2, shape=(512, 1024), threads=None).threads == 1
    assert executable(2, threads=2).threads == 2  # an explicit count wins over the environment


def test_executable_small_graphs_use_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BRAZE_NUM_THREADS", raising=False)
    assert executable(2, threads=None).threads == 1


def test_executable_repr_and_signature() -> None:
    exe = executable(2)
    assert exe.signature() == "(x: f32[4,6], y: f32[4,6]) -> (f32[4,6])"
    assert "kernels" in repr(exe) and "thread" in repr(exe)


def test_swap_weights_makes_an_aligned_array_the_buffer_and_copies_others() -> None:
    ex = executable(length=1)
    x, y = np.ones((4, 6), np.float32), np.ones((4, 6), np.float32)
    before = ex.weight("w")
    new = aligned_copy(np.full((4, 6), 2.0, np.float32))
    freed = ex.swap_weights({"w": new})
    np.testing.assert_array_equal(freed["w"], before)  # the old buffer comes back for the next call's outputs
    np.testing.assert_array_equal(ex(x, y), -np.maximum(x + 2.0, 0))
    unaligned = np.zeros(4 * 6 + 1, np.float32)[1:].reshape(4, 6)
    unaligned[...] = 3.0
    assert ex.swap_weights({"w": unaligned})["w"] is unaligned  # copied in, not adopted
    np.testing.assert_array_equal(ex(x, y), -np.maximum(x + 3.0, 0))
    with pytest.raises(BrazeError, match="weight 'w' is float32"):
        ex.swap_weights({"w": np.zeros((2, 2), np.float32)})


def frozen_aligned(array: np.ndarray) -> np.ndarray:
    """An aligned copy that nothing can change: read-only down to the block it views."""
    out = aligned_copy(array)
    out.base.flags.writeable = out.flags.writeable = False
    return out


def test_unchangeable_is_read_only_down_to_the_memory() -> None:
    writable = np.arange(4.0)
    view = writable[:]
    view.flags.writeable = False
    assert unchangeable(frozen_aligned(writable)) and unchangeable(np.frombuffer(b"\0" * 16, np.float32))
    assert not unchangeable(writable) and not unchangeable(view)  # a read-only view of memory others may write
    assert not unchangeable(np.frombuffer(bytearray(16), np.float32))


def test_unchangeable_is_a_file_mapped_read_only_not_one_mapped_writable(tmp_path) -> None:
    path = tmp_path / "entry"
    path.write_bytes(bytes(64))
    with path.open("r+b") as f:
        read_only, writable = mmap.mmap(f.fileno(), 64, access=mmap.ACCESS_READ), mmap.mmap(f.fileno(), 64)
    assert unchangeable(np.frombuffer(read_only, np.float32))
    assert not unchangeable(np.frombuffer(writable, np.float32))


def test_executable_shares_an_unchangeable_weight_and_copies_it_before_a_write() -> None:
    graph = chain(1)
    shared = frozen_aligned(graph.weights["w"])
    exe = Executable.build(graph.replace(weights={"w": shared}), threads=1, lower=checking_lower)
    assert exe._weights[0] is shared
    args = inputs()
    np.testing.assert_array_equal(exe(*args), expected(exe, args))
    exe.write_weights({"w": np.full((4, 6), 2.0, np.float32)})
    assert exe._weights[0] is not shared and np.array_equal(shared, graph.weights["w"])
    np.testing.assert_array_equal(exe(*args), -np.maximum(args[0] + 2.0, 0))


def test_swap_weights_returns_a_writable_copy_of_a_shared_weight() -> None:
    graph = chain(1)
    shared = frozen_aligned(graph.weights["w"])
    exe = Executable.build(graph.replace(weights={"w": shared}), threads=1, lower=checking_lower)
    freed = exe.swap_weights({"w": aligned_copy(np.full((4, 6), 3.0, np.float32))})["w"]
    assert freed is not shared and freed.flags.writeable and np.array_equal(freed, shared)
