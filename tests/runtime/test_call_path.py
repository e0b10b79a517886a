"""The one-foreign-call path of a call (the native stub) and its fallbacks, and `out=` buffers."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import braze
from braze.codegen.stub_layout import FRAME_BUSY
from braze.ir.errors import BrazeError, ShapeError
from braze.runtime.call_frame import call_stub
from braze.runtime.objects import object_layout

from .test_executable import executable, expected, inputs

pytestmark = pytest.mark.skipif(object_layout() is None, reason="numpy's object layout is not confirmed here")


def unaligned(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of `array` whose data does not start on a 64-byte boundary."""
    raw = np.empty(array.nbytes + 64 + array.itemsize, np.uint8)
    start = (-raw.ctypes.data % 64) + array.itemsize
    view = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    view[...] = array
    return view


class CountingStub:
    """Wraps the stub to record what it returned (0: it ran the call; k + 1: input k went the general path)."""

    def __init__(self, stub) -> None:
        self.stub, self.returned = stub, []

    def __call__(self, *args):
        self.returned.append(self.stub(*args))
        return self.returned[-1]


def counted(exe):
    exe._stub = CountingStub(exe._stub)
    return exe._stub


def test_call_path_object_layout_is_confirmed_on_this_numpy() -> None:
    assert object_layout() is not None and call_stub() is not None


def test_call_path_exact_inputs_take_the_stub() -> None:
    exe = executable()
    stub = counted(exe)
    args = inputs()
    np.testing.assert_array_equal(exe(*args), expected(exe, args))
    assert stub.returned == [0]


def test_call_path_large_outputs_are_new_aligned_arrays_the_stub_writes_in_place() -> None:
    """An output past the small-output size is allocated 64-byte aligned by the call, so the stub writes it where
    it is (no staging, no copy), and every call returns an array of its own."""
    exe = executable(shape=(64, 64))
    stub = counted(exe)
    args = inputs((64, 64))
    first, second = exe(*args), exe(*args)
    assert stub.returned == [0, 0] and exe._out_specs[0].staging is None
    assert first.ctypes.data % 64 == 0 and second.ctypes.data % 64 == 0 and not np.shares_memory(first, second)
    assert first.flags.c_contiguous and first.flags.writeable and first.shape == (64, 64)
    np.testing.assert_array_equal(first, expected(exe, args))
    np.testing.assert_array_equal(second, first)


def test_call_path_inputs_off_a_64_byte_boundary_are_read_in_place_by_the_stub() -> None:
    """numpy puts large arrays 16 or 32 bytes past a 64-byte boundary: they are read where they are, not copied."""
    exe = executable()
    stub = counted(exe)
    args = [unaligned(a) for a in inputs()]
    assert all(a.ctypes.data % 64 for a in args)
    for spec in exe._specs:
        spec.staging[...] = np.nan
    np.testing.assert_array_equal(exe(*args), expected(exe, args))
    assert stub.returned == [0]
    assert all(np.isnan(spec.staging).all() for spec in exe._specs)


def test_call_path_an_input_not_aligned_to_its_dtype_is_staged_on_the_checked_path() -> None:
    exe = executable()
    stub = counted(exe)
    x, y = inputs()
    raw = np.zeros(y.nbytes + 1, np.uint8)
    odd = np.frombuffer(raw.data, np.uint8, y.nbytes, 1).view(np.float32).reshape(y.shape)  # one byte off
    assert not odd.flags.aligned
    odd[...] = y
    np.testing.assert_array_equal(exe(x, odd), expected(exe, [x, y]))
    assert stub.returned == [2]
    np.testing.assert_array_equal(exe._specs[1].staging, y)


@pytest.mark.parametrize("change", ["dtype", "strided", "subclass", "fortran"])
def test_call_path_other_inputs_fall_back_to_the_checked_path(change: str) -> None:
    exe = executable()
    stub = counted(exe)
    x, y = inputs()
    given = {"dtype": y.astype(">f4"), "strided": np.repeat(y, 2, axis=1)[:, ::2],
             "subclass": y.view(np.matrix), "fortran": np.asfortranarray(y)}[change]
    np.testing.assert_array_equal(exe(x, given), expected(exe, [x, np.asarray(given, np.float32)]))
    assert stub.returned == [2]


def test_call_path_wrong_shape_is_still_named_after_the_stub_declines() -> None:
    exe = executable()
    with pytest.raises(ShapeError, match=r"input 1 \('y'\): expected a float32 array of shape \(4, 6\)"):
        exe(inputs()[0], np.zeros((6, 4), np.float32))


def test_call_path_out_receives_the_results_and_is_returned() -> None:
    exe = executable()
    stub = counted(exe)
    args = inputs()
    out = np.full((4, 6), np.nan, np.float32)
    assert exe(*args, out=out) is out
    np.testing.assert_array_equal(out, expected(exe, args))
    assert stub.returned == [0]  # checked by the stub itself


def test_call_path_read_only_out_is_left_to_the_checked_path() -> None:
    exe = executable()
    stub = counted(exe)
    out = np.zeros((4, 6), np.float32)
    out.flags.writeable = False
    with pytest.raises(BrazeError, match="writable C-contiguous"):
        exe(*inputs(), out=out)
    assert stub.returned == [3] and not out.any()  # two inputs, then output 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(4, 6), (64, 64)])
def test_call_path_out_off_a_64_byte_boundary_is_written_in_place_by_the_stub(shape: tuple[int, ...],
                                                                            threads: int) -> None:
    """numpy's own arrays mostly start 16 bytes past a cache line: the kernels write such an out= where it is."""
    exe = executable(shape=shape, threads=threads)
    stub = counted(exe)
    args = inputs(shape)
    out = unaligned(np.full(shape, np.nan, np.float32))
    assert out.ctypes.data % 64
    for _ in range(2):
        assert exe(*args, out=out) is out
        np.testing.assert_array_equal(out, expected(exe, args))
    assert stub.returned == [0, 0] and exe._out_specs[0].staging is None


def test_call_path_out_not_aligned_to_its_dtype_is_written_through_staging_on_the_checked_path() -> None:
    exe = executable(shape=(64, 64))
    stub = counted(exe)
    args = inputs((64, 64))
    raw = np.zeros(64 * 64 * 4 + 1, np.uint8)
    odd = np.frombuffer(raw.data, np.uint8, 64 * 64 * 4, 1).view(np.float32).reshape(64, 64)  # one byte off
    assert not odd.flags.aligned
    for _ in range(2):  # the staging buffer is made on the first such call, then reused
        assert exe(*args, out=odd) is odd
        np.testing.assert_array_equal(odd, expected(exe, args))
    assert stub.returned == [3, 3] and exe._out_specs[0].staging is not None


@pytest.mark.parametrize("threads", [1, 2])
def test_call_path_out_works_on_every_path(threads: int) -> None:
    exe = executable(shape=(64, 64), threads=threads)
    args = inputs((64, 64))
    out = np.empty((64, 64), np.float32)
    exe(np.asfortranarray(args[0]) if threads == 1 else args[0], args[1], out=out)  # Fortran order: checked path
    np.testing.assert_array_equal(out, expected(exe, args))


@pytest.mark.parametrize("bad, message", [
    (np.zeros((4, 5), np.float32), r"out\[0\]: expected a float32 array of shape \(4, 6\)"),
    (np.zeros((4, 6), np.float64), r"out\[0\]: expected a float32 array of shape \(4, 6\)"),
    (np.zeros((6, 4), np.float32).T, r"out\[0\]: expected a writable C-contiguous array"),
    (bytearray(96), r"out\[0\]: expected a numpy array"),
    ((np.zeros((4, 6), np.float32),) * 2, r"has 1 output\(s\); out= gives 2"),
])
def test_call_path_bad_out_is_a_clear_error(bad, message: str) -> None:
    exe = executable()
    with pytest.raises(BrazeError, match=message):
        exe(*inputs(), out=bad)


def test_call_path_compiled_module_out_with_arrays_and_tensors() -> None:
    model = braze.nn.Linear(4, 3)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    compiled = braze.compile(model.eval(), x)
    want = compiled(x)
    out = np.empty((2, 3), np.float32)
    assert compiled(x, out=out) is out
    np.testing.assert_array_equal(out, want)
    out[...] = 0
    assert compiled(braze.tensor(x), out=out) is out
    np.testing.assert_array_equal(out, want)


def test_call_path_index_inputs_keep_their_range_check() -> None:
    compiled = braze.compile(braze.nn.Embedding(5, 2).eval(), np.array([0, 1, 2]))
    stub = counted(compiled.executable)
    np.testing.assert_array_equal(compiled(np.array([0, 4, 2])).shape, (3, 2))
    with pytest.raises(braze.IndexRangeError, match="index 5 is out of range"):
        compiled(np.array([0, 5, 2]))
    assert stub.returned == [1, 1]


@pytest.mark.parametrize("shape", [(4, 6), (64, 64)])
def test_call_path_one_executable_called_from_several_threads_at_once(shape: tuple[int, ...]) -> None:
    """Calls that take the stub without a lock hold the frame natively: concurrent calls on one executable, some
    of them on the general path (unaligned inputs, out=), never share its buffers and all get exact results, with
    small outputs (staged when numpy's array is not aligned) and large ones (allocated aligned) alike."""
    exe = executable(shape=shape)
    args = inputs(shape)
    want = expected(exe, args)
    odd = [args[0], unaligned(args[1])]
    wrong: list[str] = []

    def hammer(k: int) -> None:
        out = np.empty_like(want)
        for n in range(400):
            if k == 0 and n % 3 == 0:
                got = exe(*args, out=out)
            else:
                got = exe(*(odd if k == 1 and n % 2 else args))
            if not np.array_equal(got, want):
                wrong.append(f"thread {k}, call {n}")
    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong and exe._frame.words[FRAME_BUSY] == 0
