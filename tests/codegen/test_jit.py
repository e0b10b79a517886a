"""The JIT: compile, call through ctypes, inspect, keep live libraries callable and free dropped ones."""
from __future__ import annotations

import ctypes
import gc
import uuid
import weakref

import llvmlite.ir as ir
import numpy as np
import pytest

from braze.codegen import (F32, I64, PTR, Target, alloca, compile_ir, define_function, entry_builder, for_range,
                           host_target, load, loop_nest, mark_explicit, store, vec, vector_loop)
from braze.ir.errors import CodegenError

ADD_ARGS = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BRAZE_CACHE", raising=False)
    monkeypatch.delenv("BRAZE_CPU", raising=False)


def unique_name(op: str = "add") -> str:
    return f"k_{uuid.uuid4().hex[:8]}_{op}"


def add_module(name: str, target: Target | None = None, scale: float = 1.0) -> ir.Module:
    """out[i] = (x[i] + y[i]) * scale with a vector main loop and a scalar tail."""
    target = target or host_target()
    module = target.new_module(name)
    fn = define_function(module, name, [("x", PTR), ("y", PTR), ("out", PTR), ("n", I64)], noalias=True)
    b = entry_builder(fn)
    x, y, out, n = fn.args

    def body(i, lanes):
        total = b.fadd(load(b, x, i, vec(lanes)), load(b, y, i, vec(lanes)))
        scaled = b.fmul(total, ir.Constant(vec(lanes), [ir.Constant(F32, scale)] * lanes) if lanes > 1
                        else ir.Constant(F32, scale))
        store(b, scaled, out, i)

    vector_loop(b, 0, n, target.vector_width, body)
    b.ret_void()
    return module


def run_add(library, name: str, n: int = 37, scale: float = 1.0) -> None:
    """Call the add kernel on numpy buffers and check it against numpy."""
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    library.cfunc(name, None, *ADD_ARGS)(x.ctypes.data, y.ctypes.data, out.ctypes.data, n)
    np.testing.assert_array_equal(out, (x + y) * np.float32(scale))


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 1000])
def test_jit_add_kernel_runs_on_numpy_buffers(n):
    name = unique_name()
    run_add(compile_ir(add_module(name)), name, n)


def test_jit_same_ir_returns_same_library():
    module = add_module(unique_name())
    assert compile_ir(module) is compile_ir(module)


def test_jit_accepts_ir_text():
    name = unique_name()
    run_add(compile_ir(str(add_module(name))), name)


def test_jit_inspection_returns_llvm_ir_and_asm():
    name = unique_name()
    library = compile_ir(add_module(name))
    assert f"define void @{name}" in library.llvm_ir()
    assert f"@{name}" in library.llvm_ir(name)
    assert library.asm(name).startswith(f"{name}:")
    assert "ret" in library.asm()


def test_jit_unknown_function_raises():
    name = unique_name()
    library = compile_ir(add_module(name))
    with pytest.raises(CodegenError, match="exports no function 'nope'"):
        library.address("nope")
    with pytest.raises(CodegenError, match="no function 'nope'"):
        library.asm("nope")


def test_jit_invalid_ir_raises_codegen_error():
    with pytest.raises(CodegenError, match="not valid LLVM IR"):
        compile_ir("define void @broken( {\n")


def test_jit_module_without_exports_raises():
    module = host_target().new_module(unique_name())
    fn = define_function(module, unique_name("internal"), [], internal=True)
    entry_builder(fn).ret_void()
    with pytest.raises(CodegenError, match="no exported function"):
        compile_ir(module)


def test_jit_modules_exporting_the_same_name_keep_their_own_code():
    name = unique_name()
    once, twice = compile_ir(add_module(name)), compile_ir(add_module(name, scale=2.0))
    run_add(once, name)
    run_add(twice, name, scale=2.0)


def test_jit_dropped_library_is_freed_and_compiles_again():
    name = unique_name()
    library = compile_ir(add_module(name))
    engine = weakref.ref(library._engine)
    del library
    gc.collect()
    assert engine() is None
    run_add(compile_ir(add_module(name)), name)


def test_jit_libraries_stay_callable_after_many_compiles():
    first, second = unique_name(), unique_name()
    lib1, lib2 = compile_ir(add_module(first)), compile_ir(add_module(second, scale=3.0))
    for _ in range(12):
        name = unique_name()
        compile_ir(add_module(name, scale=0.5), use_cache=False)
    del lib1, lib2
    gc.collect()
    run_add(compile_ir(add_module(first)), first)
    run_add(compile_ir(add_module(second, scale=3.0)), second, scale=3.0)


def test_jit_loop_nest_and_entry_alloca_compute_row_sums():
    name = unique_name("rowsum")
    module = host_target().new_module(name)
    fn = define_function(module, name, [("x", PTR), ("out", PTR), ("rows", I64), ("cols", I64)], noalias=True)
    b = entry_builder(fn)
    x, out, rows, cols = fn.args
    with loop_nest(b, [rows, cols], name="rc") as (r, c):
        acc = alloca(b, F32, "acc")   # emitted in the entry block although the builder is inside the loop
        first = b.icmp_signed("==", c, ir.Constant(I64, 0))
        before = b.select(first, ir.Constant(F32, 0.0), load(b, out, r))
        store(b, b.fadd(before, load(b, x, b.add(b.mul(r, cols), c))), out, r)
        b.store(ir.Constant(F32, 0.0), acc)
    b.ret_void()
    assert fn.entry_basic_block.instructions[0].opname == "alloca"
    library = compile_ir(module)
    data = np.arange(35, dtype=np.float32).reshape(5, 7)
    sums = np.zeros(5, np.float32)
    library.cfunc(name, None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        data.ctypes.data, sums.ctypes.data, 5, 7)
    np.testing.assert_array_equal(sums, data.sum(axis=1))


def scale_loop_module(name: str) -> ir.Module:
    """out[i] = x[i] * 3 as a plain scalar loop: LLVM's loop vectorizer turns it into vector code."""
    module = host_target().new_module(name)
    fn = define_function(module, name, [("x", PTR), ("out", PTR), ("n", I64)], noalias=True)
    b = entry_builder(fn)
    x, out, n = fn.args
    with for_range(b, 0, n) as i:
        store(b, b.fmul(load(b, x, i), ir.Constant(F32, 3.0)), out, i)
    b.ret_void()
    return module


@pytest.mark.parametrize("explicit", [False, True])
def test_jit_a_module_marked_explicit_gets_the_short_pipeline(explicit):
    """A module marked explicit (a GEMM's, whose vectors are spelled out) skips LLVM's loop and vectorization passes,
    which cost most of a compile and find nothing to do there; an unmarked scalar loop is still vectorized. Both
    compute the same result."""
    name = unique_name("scale")
    module = scale_loop_module(name)
    if explicit:
        mark_explicit(module)
    library = compile_ir(module)
    vectorized = "<8 x float>" in library.llvm_ir(name) or "<16 x float>" in library.llvm_ir(name)
    assert vectorized is not explicit
    x = np.arange(37, dtype=np.float32)
    out = np.zeros_like(x)
    library.cfunc(name, None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(x.ctypes.data, out.ctypes.data, 37)
    np.testing.assert_array_equal(out, x * np.float32(3.0))


def test_jit_a_module_marked_explicit_with_vector_math_gets_the_full_pipeline():
    """Vector math is alwaysinline: a marked module that holds it (a GEMM's GELU epilogue) is inlined and simplified
    by the level-1 passes, not left with a call per vector (which made the transformer's FF1 5% slower), and gives
    the same bits whether its epilogue is inlined in the micro-kernel or out of line (test_gemm_epilogue.py)."""
    from braze.codegen import vecmath
    name = unique_name("exp")
    module = host_target().new_module(name)
    mark_explicit(module)
    fn = define_function(module, name, [("x", PTR), ("out", PTR), ("n", I64)], noalias=True)
    b = entry_builder(fn)
    x, out, n = fn.args
    vector_loop(b, 0, n, host_target().vector_width,
                lambda i, lanes: store(b, vecmath.call(b, "exp", load(b, x, i, vec(lanes) if lanes > 1 else F32)),
                                       out, i))
    b.ret_void()
    library = compile_ir(module)
    assert "braze.vm." not in library.llvm_ir(name)
    data = np.linspace(-3, 3, 37, dtype=np.float32)
    got = np.zeros_like(data)
    library.cfunc(name, None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(data.ctypes.data, got.ctypes.data, 37)
    np.testing.assert_allclose(got, np.exp(data), rtol=4e-7)


def test_jit_dump_env_prints_banners(monkeypatch, capsys):
    monkeypatch.setenv("BRAZE_DUMP_ASM", "1")
    monkeypatch.setenv("BRAZE_DUMP_LLVM", "1")
    name = unique_name()
    compile_ir(add_module(name))
    err = capsys.readouterr().err
    assert f"==== LLVM IR: {name}" in err and f"==== assembly: {name}" in err
