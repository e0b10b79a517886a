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

import importlib
from typing import Any

# Each name is imported from its module on first use, so that `braze.codegen.cache` and the other modules a warm
# compile needs load without llvmlite (codegen/host.py, codegen/shared_object.py).
_HOMES = {"cache": ".cache", "vecmath": ".vecmath", "CompiledLibrary": ".library", "compile_ir": ".jit",
          **{name: ".loops" for name in ("CONTRACT", "F32", "F64", "I1", "I8", "I32", "I64", "PTR", "REASSOC", "VOID",
                                         "alloca", "const", "define_function", "element_ptr", "entry_builder",
                                         "for_range", "i64", "load", "loop_nest", "mark_explicit", "splat",
                                         "store", "vec", "vector_loop")},
          **{name: ".target" for name in ("CPU_ENV", "Target", "host_target", "init_llvm", "target_of")}}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(home, __name__)
    return module if home == f".{name}" else getattr(module, name)
