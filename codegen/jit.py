"""The JIT: LLVM IR in, callable machine code out.

`compile_ir(module)` parses and verifies an llvmlite module, optimizes it at level 3 with loop and SLP
vectorization for the target, verifies it again, emits an object file and links that object into an MCJIT engine
of its own. With the disk cache (codegen/cache.py) a module compiled before, in any process, skips parsing and
optimization: its object is loaded directly, after checking that it exports exactly the module's functions; an
entry that does not link or exports anything else is deleted and the module rebuilt.

Each library owns its engine (with a fresh target machine, which the engine takes ownership of), so the machine
code of a library is freed when the last reference to it goes: an Executable holds its library, and dropping a
compiled model returns its native code. While a library is alive, compiling the same IR for the same target
returns it again. Engines never share symbols, so two modules may export the same name. Addresses are resolved at
load time; a missing symbol or an address of 0 raises CodegenError and is never called.

A caller that can name the module without its IR (the object of a whole graph, keyed by codegen/module_layout.py)
passes `cache_key=` and `meta=`: the entry is stored under that key with the meta object beside the code, and
`load_cached(key)` links it in a later process without any LLVM IR being built. Every library records the wall time
of its steps in `timings` (print IR, cache read and write, LLVM parse and optimize, emit object, link).

`BRAZE_DUMP_LLVM=1` and `BRAZE_DUMP_ASM=1` print the optimized LLVM IR and the assembly of every module compiled.
"""
from __future__ import annotations

import ctypes
import os
import re
import struct
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import llvmlite.binding as llvm
import llvmlite.ir as ir

from braze.ir.errors import CodegenError

from . import cache
from .target import OPT_LEVEL, Target, create_jit_machine, host_target, init_llvm, target_of

_lock = threading.RLock()
_libraries: weakref.WeakValueDictionary[str, CompiledLibrary] = weakref.WeakValueDictionary()


class CompiledLibrary:
    """The machine code of one LLVM module, linked into an engine that lives as long as the library.

    `address(name)` and `cfunc(name, restype, *argtypes)` give callable entry points; `llvm_ir()` and `asm()`
    return the optimized IR and the host assembly, whole or for one function. A library loaded from the disk cache
    rebuilds its optimized IR from the source IR the first time it is inspected.
    """

    def __init__(self, name: str, key: str, target: Target, source_ir: str | Callable[[], str],
                 symbols: tuple[str, ...], linked: tuple[llvm.ExecutionEngine, dict[str, int]], from_cache: bool,
                 optimized: llvm.ModuleRef | None, timings: dict[str, float] | None = None,
                 meta: dict[str, Any] | None = None) -> None:
        self.name, self.key, self.target = name, key, target
        self.symbols, self.from_cache = symbols, from_cache
        self.timings, self.meta = dict(timings or {}), dict(meta or {})
        self._source = source_ir
        self._engine, self._addresses = linked
        self._optimized = optimized
        self._asm: str | None = None

    @property
    def source_ir(self) -> str:
        """The LLVM IR the library was compiled from; built on first use for a library linked from a whole-graph
        cache entry."""
        with _lock:
            if callable(self._source):
                self._source = self._source()
            return self._source

    def address(self, name: str) -> int:
        """The address of an exported function; raises CodegenError for unknown names."""
        try:
            return self._addresses[name]
        except KeyError:
            raise CodegenError(f"module {self.name!r} exports no function {name!r}; "
                               f"it exports {', '.join(self.symbols)}") from None

    def cfunc(self, name: str, restype: Any, *argtypes: Any) -> Any:
        """A ctypes function for an exported function with the given C signature (ctypes releases the GIL); it
        keeps the library, and so its machine code, alive. A bare address() does not: hold the library with it."""
        function = ctypes.CFUNCTYPE(restype, *argtypes)(self.address(name))
        function.library = self
        return function

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


def compile_ir(module: ir.Module | str, *, target: Target | None = None, use_cache: bool | None = None,
               cache_key: str | None = None, meta: dict[str, Any] | None = None) -> CompiledLibrary:
    """Compile an llvmlite module (or LLVM IR text) for `target` and link it into an engine of its own.

    The target defaults to the one the module was created for (Target.new_module), else host_target().
    `use_cache=None` follows BRAZE_CACHE; True or False forces the disk cache on or off for this call.
    `cache_key` (with `meta`, stored beside the object) keys the disk entry instead of the IR text: see the module
    doc; the caller promises that the key determines the IR, and has looked it up with load_cached already, so the
    entry is only written.
    """
    target = target or (target_of(module) if isinstance(module, ir.Module) else None) or host_target()
    timings: dict[str, float] = {}
    with _timed(timings, "print IR"):
        text = str(module)
    name = module.name if isinstance(module, ir.Module) else _module_name(text)
    ir_key = cache.make_key(text, target.identity)
    key = cache_key or ir_key
    with _lock:
        known = _libraries.get(key) or _libraries.get(ir_key)
        if known is not None:
            return known
        caching = cache.enabled() if use_cache is None else use_cache
        with _timed(timings, "cache read"):
            library = _from_cache(module, name, key, target, text, timings) if caching and cache_key is None \
                else None
        if library is None:
            optimized, symbols, payload = _compile_object(text, name, target, timings)
            if caching:
                with _timed(timings, "cache write"):
                    cache.store(key, payload, symbols, meta)
            with _timed(timings, "link"):
                linked = _link(name, payload, symbols)
            library = CompiledLibrary(name, key, target, text, symbols, linked, False, optimized, timings, meta)
        _libraries[key] = _libraries[ir_key] = library
    _dump(library)
    return library


def load_cached(key: str, target: Target, source_ir: Callable[[], str], *, use_cache: bool | None = None,
                accept: Callable[[dict[str, Any], tuple[str, ...]], bool] = lambda meta, symbols: True
                ) -> CompiledLibrary | None:
    """The library stored under `key` by compile_ir(cache_key=key), linked, its `meta` the entry's; None when the
    cache is off (use_cache as in compile_ir) or holds no valid entry. An entry whose meta and symbols `accept`
    refuses, or whose object does not link, is discarded (rebuilt by the caller), never called. `source_ir` builds
    the IR if the library is ever inspected."""
    with _lock:
        known = _libraries.get(key)
        if known is not None:
            return known
        if not (cache.enabled() if use_cache is None else use_cache):
            return None
        timings: dict[str, float] = {}
        with _timed(timings, "cache read"):
            entry = cache.load(key)
        if entry is None:
            return None
        name = str(entry.meta.get("name", key[:16]))
        try:
            if not accept(entry.meta, entry.symbols):
                raise CodegenError(f"module {name!r}: the cached layout does not fit the graph or the object")
            with _timed(timings, "link"):
                linked = _link(name, entry.payload, entry.symbols)
        except CodegenError:
            cache.discard(key)
            return None
        cache.count("hits")
        library = CompiledLibrary(name, key, target, source_ir, entry.symbols, linked, True, None, timings,
                                  entry.meta)
        _libraries[key] = library
    _dump(library)
    return library


def _from_cache(module: ir.Module | str, name: str, key: str, target: Target, text: str,
                timings: dict[str, float]) -> CompiledLibrary | None:
    """The library of the cached object for `key`, or None; an entry that exports other functions than the module
    defines, or that fails to link, is discarded (its engine, and so its code, freed with it)."""
    entry = cache.load(key)
    if entry is None:
        return None
    expected = (_defined_functions(module) if isinstance(module, ir.Module)
                else _exported_functions(_parse(text, name, target)))
    try:
        if set(entry.symbols) != set(expected):
            raise CodegenError(f"module {name!r}: the cached object exports {list(entry.symbols)}, "
                               f"the module defines {list(expected)}")
        linked = _link(name, entry.payload, entry.symbols)
    except CodegenError:
        cache.discard(key)
        return None
    cache.count("hits")
    return CompiledLibrary(name, key, target, text, entry.symbols, linked, True, None, timings, entry.meta)


def _compile_object(text: str, name: str, target: Target, timings: dict[str, float]
                    ) -> tuple[llvm.ModuleRef, tuple[str, ...], bytes]:
    """Parse, verify, optimize and emit one module: its optimized form, its exported symbols and its object."""
    with _timed(timings, "LLVM parse"):
        ref = _parse(text, name, target)
    with _timed(timings, "LLVM optimize"):
        optimized = _optimize(ref, target)
    symbols = _exported_functions(optimized)
    if not symbols:
        raise CodegenError(f"module {name!r} defines no exported function")
    with _timed(timings, "emit object"):
        payload = target.machine().emit_object(optimized)
    return optimized, symbols, payload


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start


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


def _defined_functions(module: ir.Module) -> tuple[str, ...]:
    """The functions an llvmlite module defines with external linkage: what its object exports."""
    return tuple(f.name for f in module.functions if not f.is_declaration and f.linkage in ("", "external"))


def _link(name: str, payload: bytes, symbols: tuple[str, ...]) -> tuple[llvm.ExecutionEngine, dict[str, int]]:
    """A new engine holding the object, and the address of every exported symbol; never an address of 0."""
    if not _plausible_object(payload):
        raise CodegenError(f"module {name!r}: its object is not a well-formed ELF file")
    engine = _new_engine()
    try:
        engine.add_object_file(llvm.ObjectFileRef.from_data(payload))
        engine.finalize_object()
    except RuntimeError as exc:
        raise CodegenError(f"module {name!r}: its object does not load: {exc}") from None
    addresses = {s: engine.get_function_address(s) for s in symbols}
    missing = [s for s, a in addresses.items() if not a]
    if missing:
        raise CodegenError(f"module {name!r}: no address for {', '.join(missing)} after loading its object")
    return engine, addresses


def _plausible_object(payload: bytes) -> bool:
    """On Linux, whether the payload is a 64-bit little-endian ELF file whose section table lies inside it: LLVM
    crashes on an object it cannot parse instead of reporting it (objects elsewhere are not checked)."""
    if not sys.platform.startswith("linux"):
        return True
    if len(payload) < 64 or payload[:6] != b"\x7fELF\x02\x01":
        return False
    (shoff,) = struct.unpack_from("<Q", payload, 40)
    shentsize, shnum = struct.unpack_from("<HH", payload, 58)
    return shentsize == 64 and 0 < shnum and shoff + shnum * shentsize <= len(payload)


def _new_engine() -> llvm.ExecutionEngine:
    """An MCJIT engine with a target machine of its own (an engine owns its machine; it is never shared)."""
    init_llvm()
    triple = llvm.get_process_triple()
    placeholder = llvm.parse_assembly(f'target triple = "{triple}"\n')
    return llvm.create_mcjit_compiler(placeholder, create_jit_machine(Target(triple, "", "", 4)))


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
