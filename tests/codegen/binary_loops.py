"""Test support: a compiled z[i] = f(x[i], y[i]) float32 or float64 loop for one code variant (the host's vectors,
scalars, SSE2 or AVX2 code), for the binary vector math functions (vecmath_pow, vecmath_atan)."""
from __future__ import annotations

import ctypes
import uuid
from typing import Callable

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np

from braze.codegen import F32, F64, I64, PTR, compile_ir, define_function, entry_builder, host_target, load, store, vec
from braze.codegen import vector_loop

IS_X86 = llvm.get_process_triple().startswith("x86_64")
HAS_AVX2 = IS_X86 and "+avx2" in llvm.get_host_cpu_features().flatten().split(",")
VARIANTS = ["vector", "scalar"] + (["generic-cpu"] if IS_X86 else []) + (["haswell"] if HAS_AVX2 else [])
CPUS = {"generic-cpu": "x86-64", "haswell": "haswell"}

BinaryEmit = Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]


def binary_loop(emit: BinaryEmit, variant: str, label: str, dtype: str = "f32"):
    """(run, library, symbol): run(xs, ys) computes emit over the float32 (or float64) arrays with the variant's
    code, on vectors of the target's registers."""
    target = host_target(CPUS.get(variant))
    element, numpy_type = (F32, np.float32) if dtype == "f32" else (F64, np.float64)
    width = 1 if variant == "scalar" else max(target.vector_width // (1 if dtype == "f32" else 2), 1)
    symbol = f"k_{uuid.uuid4().hex[:8]}_{label}"
    module = target.new_module(symbol)
    fn = define_function(module, symbol, [("x", PTR), ("y", PTR), ("z", PTR), ("n", I64)], noalias=True)
    b = entry_builder(fn)
    x, y, z, n = fn.args

    def body(i, lanes: int) -> None:
        typ = vec(lanes, element) if lanes > 1 else element
        store(b, emit(b, load(b, x, i, typ), load(b, y, i, typ)), z, i)
    vector_loop(b, 0, n, width, body)
    b.ret_void()
    library = compile_ir(module, use_cache=False)
    cfunc = library.cfunc(symbol, None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

    def run(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        xs, ys = np.ascontiguousarray(xs, numpy_type), np.ascontiguousarray(ys, numpy_type)
        if xs.shape != ys.shape:
            raise ValueError(f"binary_loop: operand shapes differ: {xs.shape} and {ys.shape}")
        out = np.empty_like(xs)
        cfunc(xs.ctypes.data, ys.ctypes.data, out.ctypes.data, xs.size)
        return out
    return run, library, symbol
