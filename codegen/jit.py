"""The process-wide JIT: LLVM IR in, callable machine code out.

`compile_ir(module)` parses and verifies an llvmlite module, optimizes it at level 3 with loop and SLP
vectorization for the target, verifies it again, emits an object file and links that object into one long-lived
MCJIT engine. With the disk cache (codegen/cache.py) a module compiled before, in any process, skips parsing and
optimization: its object is loaded directly. The engine is created once and never freed (an engine owns its target
machine; freeing it would leave dangling machines), so every compiled function stays valid for the life of the
process. Compiling the same IR for the same target twice in one process returns the same library.

Symbol names are global across the engine: two different modules that export the same function name are an error
(kernel names are `k_<hash8>_<op>`, derived from what they compute). Addresses are resolved at load time; a
missing symbol or an address of 0 raises CodegenError and is never called.

`BRAZE_DUMP_LLVM=1` and `BRAZE_DUMP_ASM=1` print the optimized LLVM IR and the assembly of every module compiled.
"""
from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
from typing import Any

import llvmlite.binding as llvm
import llvmlite.ir as ir

from braze.ir.errors import CodegenError

from . import cache
from .target import OPT_LEVEL, Target, create_jit_machine, host_target, init_llvm, target_of

_lock = threading.RLock()
_engine: llvm.ExecutionEngine | None = None
_libraries: dict[str, "CompiledLibrary"] = {}
_symbol_owner: dict[str, str] = {}  # exported symbol -> the module name that defines it


class CompiledLibrary:
    """The machine code of one LLVM module, linked into the process-wide engine.

    `address(name)` and `cfunc(name, restype, *argtypes)` give callable entry points; `llvm_ir()` and `asm()`
    return the optimized IR and the host assembly, whole or for one function. A library loaded from the disk cache
    rebuilds its optimized IR from the source IR the first time it is inspected.
    """

    def __init__(self, name: str, key: str, target: Target, source_ir: str, symbols: tuple[str, ...],
                 addresses: dict[str, int], from_cache: bool, optimized: llvm.ModuleRef | None) -> None:
        self.name, self.key, self.target, self.source_ir = name, key, target, source_ir
        self.symbols, self.from_cache = symbols, from_cache
        self._addresses = addresses
        self._optimized = optimized
        self._asm: str | None = None

    def address(self, name: str) -> int:
        """The address of an exported function; raises CodegenError for unknown names."""
        try:
            return self._addresses[name]
        except KeyError:
            raise CodegenError(f"module {self.name!r} exports no function {name!r}; "
                               f"it exports {', '.join(self.symbols)}") from None

    def cfunc(self, name: str, restype: Any, *argtypes: Any) -> Any:
        """A ctypes function for an exported function with the given C signature (ctypes releases the GIL)."""
        return ctypes.CFUNCTYPE(restype, *argtypes)(self.address(name))

    def llvm_ir(self, function: str | None = None) -> str:
        """The optimized LLVM IR of the module, or of one function in it."""
        module = self._optimized_module()
        if function is None:
            return str(module)
        try:
            return str(module.get_function(function))
        except NameError:
            raise CodegenError(f"module {self.name!r} has no function {function!r}") from None

    def asm(self, function: str | None = None) -> str:
        """The host assembly of the module, or of one function in it."""
        with _lock:
            if self._asm is None:
                self._asm = self.target.machine().emit_assembly(self._optimized_module())
        return self._asm if function is None else _function_asm(self._asm, function, self.name)

    def _optimized_module(self) -> llvm.ModuleRef:
        with _lock:
            if self._optimized is None:
                self._optimized = _optimize(_parse(self.source_ir, self.name, self.target), self.target)
            return self._optimized

    def __repr__(self) -> str:
        origin = "cache" if self.from_cache else "compiled"
        return f"CompiledLibrary({self.name!r}, {origin}, symbols={list(self.symbols)}, target={self.target})"


def compile_ir(module: ir.Module | str, *, target: Target | None = None, use_cache: bool | None = None
               ) -> CompiledLibrary:
    """Compile an llvmlite module (or LLVM IR text) for `target` and link it into the process-wide engine.

    The target defaults to the one the module was created for (Target.new_module), else host_target().

    `use_cache=None` follows BRAZE_CACHE; True or False forces the disk cache on or off for this call.
    """
    target = target or (target_of(module) if isinstance(module, ir.Module) else None) or host_target()
    text = str(module)
    name = module.name if isinstance(module, ir.Module) else _module_name(text)
    key = cache.make_key(text, target.identity)
    with _lock:
        known = _libraries.get(key)
        if known is not None:
            return known
        caching = cache.enabled() if use_cache is None else use_cache
        entry = cache.load(key) if caching else None
        optimized = None
        if entry is not None:
            payload, symbols = entry.payload, entry.symbols
        else:
            optimized = _optimize(_parse(text, name, target), target)
            symbols = _exported_functions(optimized)
            if not symbols:
                raise CodegenError(f"module {name!r} defines no exported function")
            payload = target.machine().emit_object(optimized)
            if caching:
                cache.store(key, payload, symbols)
        addresses = _link(name, payload, symbols)
        library = CompiledLibrary(name, key, target, text, symbols, addresses, entry is not None, optimized)
        _libraries[key] = library
    _dump(library)
    return library


def _parse(text: str, name: str, target: Target) -> llvm.ModuleRef:
    init_llvm()
    try:
        ref = llvm.parse_assembly(text)
        ref.verify()
    except RuntimeError as exc:
        raise CodegenError(f"module {name!r} is not valid LLVM IR:\n{exc}") from None
    ref.triple = target.triple
    ref.data_layout = str(target.machine().target_data)
    return ref


def _optimize(ref: llvm.ModuleRef, target: Target) -> llvm.ModuleRef:
    """Run the level-3 module pipeline with loop and SLP vectorization, then verify the result."""
    pto = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    builder = llvm.create_pass_builder(target.machine(), pto)
    builder.getModulePassManager().run(ref, builder)
    try:
        ref.verify()
    except RuntimeError as exc:
        raise CodegenError(f"module {ref.name!r} failed verification after optimization:\n{exc}") from None
    return ref


def _exported_functions(ref: llvm.ModuleRef) -> tuple[str, ...]:
    return tuple(f.name for f in ref.functions
                 if not f.is_declaration and f.linkage == llvm.Linkage.external)


def _link(name: str, payload: bytes, symbols: tuple[str, ...]) -> dict[str, int]:
    """Add an object file to the engine and resolve every exported symbol; never returns an address of 0."""
    for symbol in symbols:
        owner = _symbol_owner.get(symbol)
        if owner is not None:
            raise CodegenError(f"module {name!r} exports {symbol!r}, already defined by module {owner!r}; "
                               "exported names must be unique per process (name kernels after what they compute)")
    engine = _get_engine()
    engine.add_object_file(llvm.ObjectFileRef.from_data(payload))
    engine.finalize_object()
    addresses = {s: engine.get_function_address(s) for s in symbols}
    missing = [s for s, a in addresses.items() if not a]
    if missing:
        raise CodegenError(f"module {name!r}: no address for {', '.join(missing)} after loading its object")
    _symbol_owner.update((s, name) for s in symbols)
    return addresses


def _get_engine() -> llvm.ExecutionEngine:
    """The one MCJIT engine, created on first use with a target machine of its own and never freed."""
    global _engine
    if _engine is None:
        init_llvm()
        triple = llvm.get_process_triple()
        placeholder = llvm.parse_assembly(f'target triple = "{triple}"\n')
        _engine = llvm.create_mcjit_compiler(placeholder, create_jit_machine(Target(triple, "", "", 4)))
    return _engine


def _module_name(text: str) -> str:
    match = re.search(r'^; ModuleID = "?([^"\n]*)"?', text, re.MULTILINE)
    return match.group(1) if match else "<llvm ir>"


def _function_asm(asm: str, function: str, module: str) -> str:
    """The lines of one function in an assembly listing, from its label to its end marker."""
    lines = asm.splitlines()
    labels = (f"{function}:", f'"{function}":')
    start = next((i for i, line in enumerate(lines) if line.startswith(labels)), None)
    if start is None:
        raise CodegenError(f"module {module!r} has no function {function!r} in its assembly")
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(".Lfunc_end")), len(lines) - 1)
    return "\n".join(lines[start:end + 1]) + "\n"


def _dump(library: CompiledLibrary) -> None:
    for env, title, text in (("BRAZE_DUMP_LLVM", "LLVM IR", library.llvm_ir),
                             ("BRAZE_DUMP_ASM", "assembly", library.asm)):
        if os.environ.get(env, "") not in ("", "0"):
            banner = f"==== {title}: {library.name} ({library.target}) ===="
            print(f"{banner}\n{text()}\n{'=' * len(banner)}", file=sys.stderr)
