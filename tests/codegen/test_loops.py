"""Vector constants: LLVM's short forms where every lane is alike, and the code built with them computes what the
lane-by-lane constants compute (the lowerings build every vector constant through them)."""
from __future__ import annotations

import ctypes
import math
import uuid

import llvmlite.ir as ir
import numpy as np
import pytest

from braze.codegen import F32, I32, PTR, compile_ir, define_function, entry_builder, host_target
from braze.codegen.loops import I1, splat, undef, vector_const, zeros


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BRAZE_CACHE", raising=False)


def test_vector_const_prints_zeros_as_zeroinitializer():
    assert zeros(ir.VectorType(F32, 16)).get_reference() == "zeroinitializer"
    assert vector_const(ir.VectorType(I1, 8), [False] * 8).get_reference() == "zeroinitializer"


def test_vector_const_prints_one_value_as_a_splat():
    lane = ir.Constant(F32, 1.5).get_reference()
    assert vector_const(ir.VectorType(F32, 4), 1.5).get_reference() == f"splat (float {lane})"


def test_vector_const_negative_zero_is_not_zeroinitializer():
    assert vector_const(ir.VectorType(F32, 4), -0.0).get_reference().startswith("splat (float 0x8")


def test_vector_const_prints_undefined_lanes_as_undef():
    assert undef(ir.VectorType(F32, 4)).get_reference() == "undef"


def test_vector_const_keeps_lanes_that_differ():
    assert str(vector_const(ir.VectorType(I32, 3), [0, 1, 2])) == "<3 x i32> <i32 0, i32 1, i32 2>"


def test_vector_const_is_shared_and_keeps_its_lanes():
    typ = ir.VectorType(F32, 8)
    assert vector_const(typ, 2.0) is vector_const(typ, [ir.Constant(F32, 2.0)] * 8)
    assert [c.constant for c in vector_const(typ, 2.0).constant] == [2.0] * 8


def test_vector_const_refuses_a_wrong_lane_count():
    with pytest.raises(ValueError, match="takes 4 lanes"):
        vector_const(ir.VectorType(I32, 4), [1, 2, 3])


@pytest.mark.parametrize("width", [2, 3, 7, 8, 9, 16, 17])
def test_vector_constants_compute_as_lane_lists(width):
    """out = select(mask, splat(x) + 1.5, zeros) * iota, and -0.0 * 1: each short form against numpy."""
    target = host_target()
    name = f"k_{uuid.uuid4().hex[:8]}_consts"
    module = target.new_module(name)
    fn = define_function(module, name, [("x", F32), ("out", PTR), ("signed", PTR)])
    b = entry_builder(fn)
    typ = ir.VectorType(F32, width)
    mask = vector_const(ir.VectorType(I1, width), [k % 3 != 1 for k in range(width)])
    iota = vector_const(typ, [float(k) for k in range(width)])
    lifted = b.fadd(splat(b, fn.args[0], width), vector_const(typ, 1.5))
    b.store(b.fmul(b.select(mask, lifted, zeros(typ)), iota), fn.args[1], align=4)
    b.store(b.fmul(vector_const(typ, -0.0), vector_const(typ, 1.0)), fn.args[2], align=4)
    b.ret_void()
    library = compile_ir(module)
    out, signed = np.full(width, np.nan, np.float32), np.full(width, np.nan, np.float32)
    library.cfunc(name, None, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p)(
        2.25, out.ctypes.data, signed.ctypes.data)
    k = np.arange(width, dtype=np.float32)
    np.testing.assert_array_equal(out, np.where(k % 3 != 1, np.float32(3.75), np.float32(0)) * k)
    assert all(v == 0 and math.copysign(1.0, v) < 0 for v in signed)
