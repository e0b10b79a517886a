"""braze.codegen: the target, the process-wide JIT, the object cache, IR-building utilities and vector math.

Typical use by a lowering:

    target = host_target()
    module = target.new_module("k_1a2b3c4d_add")
    fn = define_function(module, "k_1a2b3c4d_add", [("x", PTR), ("y", PTR), ("out", PTR), ("n", I64)], noalias=True)
    ... emit the body with for_range / vector_loop / load / store; vecmath.call(b, "exp", x) for exp and friends ...
    library = compile_ir(module)
    kernel = library.cfunc("k_1a2b3c4d_add", None, c_void_p, c_void_p, c_void_p, c_int64)
"""
from __future__ import annotations

from . import cache, vecmath
from .jit import CompiledLibrary, compile_ir
from .loops import (CONTRACT, F32, F64, I1, I8, I32, I64, PTR, REASSOC, VOID, alloca, const, define_function,
                    element_ptr, entry_builder, for_range, i64, load, loop_nest, splat, store, vec, vector_loop)
from .target import CPU_ENV, Target, host_target, init_llvm, target_of

__all__ = ["CONTRACT", "CPU_ENV", "CompiledLibrary", "F32", "F64", "I1", "I8", "I32", "I64", "PTR", "REASSOC",
           "Target", "VOID", "alloca", "cache", "compile_ir", "const", "define_function", "element_ptr",
           "entry_builder", "for_range", "host_target", "i64", "init_llvm", "load", "loop_nest", "splat", "store",
           "target_of", "vec", "vecmath", "vector_loop"]
