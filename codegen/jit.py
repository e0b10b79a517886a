"""The JIT: LLVM IR in, callable machine code out.

`compile_ir(module)` parses and verifies an llvmlite module, optimizes it (llvm_object.PIPELINE_LEVEL, with loop and
SLP vectorization) for the target, verifies it again, emits an object file and links that object into an MCJIT engine
of its own. With the disk cache (codegen/cache.py) a module compiled before, in any process, skips parsing and
optimization: its object is loaded directly, after checking that it exports exactly the module's functions; an
entry that does not link or exports anything else is deleted and the module rebuilt.

Each library owns its engine (with a fresh target machine, which the engine takes ownership of), so the machine
code of a library is freed when the last reference to it goes: an Executable holds its library, and dropping a
compiled model returns its native code. While a library is alive, compiling the same IR for the same target
returns it again. Engines never share symbols, so two modules may export the same name. Addresses are resolved at
load time; a missing symbol or an address of 0 raises CodegenError and is never called.

A graph's module is several objects, its kernels and its entry (codegen/module_builder.py): `compile_objects` compiles
them at once here and in the compile workers (compile_workers.py) and `link_objects` links them into one engine,
after checking that every symbol one object needs is defined by another or by the process (codegen/elf_symbols.py).

A graph's objects are cached by keys that name them without their IR (codegen/graph_cache.py), so a later process
links them without any LLVM IR being built. Every library records the wall time of its steps in `timings` (print
IR, cache read and write, LLVM parse and optimize, emit object, link).

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
from typing import Any, Callable, Iterator, Sequence

import llvmlite.binding as llvm
import llvmlite.ir as ir

from braze.ir.errors import CodegenError

from . import cache, compile_workers, elf_symbols, llvm_object
from .compile_workers import Job, Result
from .target import OPT_LEVEL, Target, create_jit_machine, host_target, init_llvm, target_of

_lock = threading.RLock()
_libraries: weakref.WeakValueDictionary[str, CompiledLibrary] = weakref.WeakValueDictionary()


Sources = Sequence[str]


class CompiledLibrary:
    """The machine code of one or more LLVM modules (a graph's kernels and its entry), linked into one engine that
    lives as long as the library.

    `address(name)` and `cfunc(name, restype, *argtypes)` give callable entry points; `llvm_ir()` and `asm()`
    return the optimized IR and the host assembly, whole or for one function. A library loaded from the disk cache
    rebuilds its optimized IR from the source IR the first time it is inspected.
    """

    def __init__(self, name: str, key: str, target: Target, source_ir: str | Sources | Callable[[], Sources],
                 symbols: tuple[str, ...], linked: tuple[llvm.ExecutionEngine, dict[str, int]], from_cache: bool,
                 optimized: Sequence[llvm.ModuleRef | None] | llvm.ModuleRef | None,
                 timings: dict[str, float] | None = None, meta: dict[str, Any] | None = None) -> None:
        self.name, self.key, self.target = name, key, target
        self.symbols, self.from_cache = symbols, from_cache
        self.timings, self.meta = dict(timings or {}), dict(meta or {})
        self._source: Sources | Callable[[], Sources] = (source_ir,) if isinstance(source_ir, str) else source_ir
        self._engine, self._addresses = linked
        self._optimized: list[llvm.ModuleRef | None] | None = None if optimized is None else \
            [optimized] if isinstance(optimized, llvm.ModuleRef) else list(optimized)
        self._asm: str | None = None

    @property
    def sources(self) -> tuple[str, ...]:
        """The LLVM IR of each module the library was compiled from; built on first use for a library linked from
        the disk cache."""
        with _lock:
            if callable(self._source):
                self._source = tuple(self._source())
            return tuple(self._source)

    @property
    def source_ir(self) -> str:
        """The LLVM IR the library was compiled from, its modules one after another."""
        return "\n".join(self.sources)

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
        """The optimized LLVM IR of the modules, or of one function defined in them."""
        modules = self._optimized_modules()
        if function is None:
            return "\n".join(str(m) for m in modules)
        for module in modules:
            try:
                fn = module.get_function(function)
            except NameError:
                continue
            if not fn.is_declaration:
                return str(fn)
        raise CodegenError(f"module {self.name!r} has no function {function!r}")

    def asm(self, function: str | None = None) -> str:
        """The host assembly of the modules, or of one function in them."""
        with _lock:
            if self._asm is None:
                self._asm = "\n".join(self.target.machine().emit_assembly(m) for m in self._optimized_modules())
        return self._asm if function is None else _function_asm(self._asm, function, self.name)

    def _optimized_modules(self) -> list[llvm.ModuleRef]:
        with _lock:
            sources = self.sources
            if self._optimized is None or len(self._optimized) != len(sources):
                self._optimized = [None] * len(sources)
            for i, text in enumerate(sources):
                if self._optimized[i] is None:
                    self._optimized[i] = _optimize(_parse(text, self.name, self.target), self.target)
            return list(self._optimized)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        origin = "cache" if self.from_cache else "compiled"
        return f"CompiledLibrary({self.name!r}, {origin}, symbols={list(self.symbols)}, target={self.target})"


def compile_ir(module: ir.Module | str, *, target: Target | None = None, use_cache: bool | None = None
               ) -> CompiledLibrary:
    """Compile an llvmlite module (or LLVM IR text) for `target` and link it into an engine of its own.

    The target defaults to the one the module was created for (Target.new_module), else host_target().
    `use_cache=None` follows BRAZE_CACHE; True or False forces the disk cache on or off for this call.
    """
    target = target or (target_of(module) if isinstance(module, ir.Module) else None) or host_target()
    timings: dict[str, float] = {}
    with _timed(timings, "print IR"):
        text = str(module)
    name = module.name if isinstance(module, ir.Module) else _module_name(text)
    key = cache.make_key(text, target.identity)
    with _lock:
        known = _libraries.get(key)
        if known is not None:
            return known
        caching = cache.enabled() if use_cache is None else use_cache
        with _timed(timings, "cache read"):
            library = _from_cache(module, name, key, target, text, timings) if caching else None
        if library is None:
            optimized, symbols, payload = _compile_object(text, name, target, timings)
            if caching:
                with _timed(timings, "cache write"):
                    cache.store(key, payload, symbols)
            with _timed(timings, "link"):
                linked = _link(name, [payload], symbols)
            library = CompiledLibrary(name, key, target, text, symbols, linked, False, optimized, timings)
        _libraries[key] = library
    _dump(library)
    return library


def compile_described(description: str, build: Callable[[], ir.Module], exports: tuple[str, ...], *,
                      target: Target | None = None) -> CompiledLibrary:
    """The library of the module `build()` returns, found in the disk cache by `description` (everything its code
    depends on besides the code generator's version and the target, which are added) without building its IR: the
    runtime's own modules (the call stub, the worker pool) cost a lookup per process. On a miss, or an entry that
    does not export exactly `exports`, the module is built, compiled and stored under that key."""
    from .module_layout import builder_version
    target = target or host_target()
    key = cache.make_key(f"braze-described-module\n{builder_version()}\n{description}", target.identity)
    with _lock:
        known = _libraries.get(key)
        if known is not None:
            return known
        timings: dict[str, float] = {}
        entry = cache.load(key) if cache.enabled() else None
        library = None
        if entry is not None:
            try:
                if set(entry.symbols) != set(exports):
                    raise CodegenError(f"the cached module for {description!r} exports {list(entry.symbols)}")
                linked = _link(description, [entry.payload], entry.symbols)
                cache.count("hits")
                library = CompiledLibrary(description, key, target, lambda: (str(build()),), entry.symbols, linked,
                                          True, None, timings)
            except CodegenError:
                cache.discard(key)
        if library is None:
            module = build()
            optimized, symbols, payload = _compile_object(str(module), module.name, target, timings)
            if set(symbols) != set(exports):
                raise CodegenError(f"module {module.name!r} exports {list(symbols)}, not {list(exports)}")
            if cache.enabled():
                cache.store(key, payload, symbols)
            linked = _link(module.name, [payload], symbols)
            library = CompiledLibrary(module.name, key, target, str(module), symbols, linked, False, optimized,
                                      timings)
        _libraries[key] = library
    return library


def compile_objects(jobs: Sequence[Job], target: Target, timings: dict[str, float]) -> list[Result]:
    """The object of every job (name, LLVM IR text), compiled at once in this process and the compile workers
    (compile_workers.py); this process's stage times are added to `timings`. An invalid module raises
    CodegenError naming it."""
    batch = start_batch(target, parallel=len(jobs) > 1)
    for job in jobs:
        batch.add(job)
    return finish_batch(batch, timings)


def start_batch(target: Target, *, parallel: bool = True) -> compile_workers.Batch:
    """A batch of modules compiled for `target` as they are added (the workers start on each at once)."""
    init_llvm()
    return compile_workers.Batch(target.triple, target.cpu, target.features, OPT_LEVEL, parallel=parallel)


def compile_here(text: str, name: str, target: Target, timings: dict[str, float]) -> Result:
    """One module compiled in this process (its stage times added to `timings`); CodegenError if it is invalid."""
    optimized, symbols, payload = _compile_object(text, name, target, timings)
    return Result(symbols, payload, optimized)


def run_tasks(tasks: Sequence[compile_workers.Task], target: Target) -> list[Any]:
    """Every task's result, done in this process and the compile workers at once (compile_workers.run_tasks); an
    invalid module raises CodegenError naming it."""
    init_llvm()
    try:
        return compile_workers.run_tasks(list(tasks), target.triple, target.cpu, target.features, OPT_LEVEL)
    except llvm_object.LLVMFailure as exc:
        raise _llvm_error(getattr(exc, "job", "<llvm ir>"), exc) from None


def finish_batch(batch: compile_workers.Batch, timings: dict[str, float]) -> list[Result]:
    """Every object of the batch in the order added (see compile_objects)."""
    try:
        results = batch.finish()
    except llvm_object.LLVMFailure as exc:
        raise _llvm_error(getattr(exc, "job", "<llvm ir>"), exc) from None
    for result in results:
        for stage, seconds in result.timings.items():
            if result.optimized is not None or stage == "waiting for workers":
                timings[stage] = timings.get(stage, 0.0) + seconds
    return results


def link_objects(name: str, key: str, target: Target, objects: Sequence[tuple[tuple[str, ...], bytes]],
                 sources: Sources | Callable[[], Sources], *, from_cache: bool,
                 optimized: Sequence[llvm.ModuleRef | None] | None = None, timings: dict[str, float] | None = None,
                 meta: dict[str, Any] | None = None) -> CompiledLibrary:
    """One library of several objects (symbols, object file) linked into one engine, where each resolves the
    others' exports; `sources` (or a function building them) are their LLVM IR texts for inspection."""
    timings = {} if timings is None else timings
    with _lock:
        with _timed(timings, "link"):
            linked = _link(name, [payload for _, payload in objects], tuple(s for syms, _ in objects for s in syms))
        library = CompiledLibrary(name, key, target, sources, tuple(s for syms, _ in objects for s in syms), linked,
                                  from_cache, optimized, timings, meta)
        _libraries[key] = library
    _dump(library)
    return library


def known_library(key: str) -> CompiledLibrary | None:
    """The library linked under `key` earlier in this process and still alive, if any."""
    with _lock:
        return _libraries.get(key)


def pack_objects(objects: Sequence[tuple[tuple[str, ...], bytes]]) -> tuple[bytes, list[list[Any]]]:
    """Several objects as one cache payload and the index that splits it again (per object: symbols, size)."""
    return b"".join(p for _, p in objects), [[list(syms), len(p)] for syms, p in objects]


def unpack_objects(payload: bytes, index: Any) -> list[tuple[tuple[str, ...], bytes]] | None:
    """The objects of a payload packed by pack_objects, or None when the index does not describe it."""
    if not isinstance(index, list):
        return None
    objects, at = [], 0
    for item in index:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)
                and all(isinstance(x, str) for x in item[0]) and isinstance(item[1], int)
                and not isinstance(item[1], bool) and 0 < item[1] <= len(payload) - at):
            return None
        objects.append((tuple(item[0]), payload[at:at + item[1]]))
        at += item[1]
    return objects if at == len(payload) else None


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
        linked = _link(name, [entry.payload], entry.symbols)
    except CodegenError:
        cache.discard(key)
        return None
    cache.count("hits")
    return CompiledLibrary(name, key, target, text, entry.symbols, linked, True, None, timings, entry.meta)


def _compile_object(text: str, name: str, target: Target, timings: dict[str, float]
                    ) -> tuple[llvm.ModuleRef, tuple[str, ...], bytes]:
    """Parse, verify, optimize and emit one module: its optimized form, its exported symbols and its object."""
    try:
        optimized, symbols, payload = llvm_object.compile_text(
            text, target.triple, target.cpu, target.features, OPT_LEVEL,
            lambda stage, seconds: timings.__setitem__(stage, timings.get(stage, 0.0) + seconds))
    except llvm_object.LLVMFailure as exc:
        raise _llvm_error(name, exc) from None
    if not symbols:
        raise CodegenError(f"module {name!r} defines no exported function")
    return optimized, symbols, payload


def _llvm_error(name: str, exc: llvm_object.LLVMFailure) -> CodegenError:
    if exc.stage == "optimize":
        return CodegenError(f"module {name!r} failed verification after optimization:\n{exc}")
    return CodegenError(f"module {name!r} is not valid LLVM IR:\n{exc}")


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start


def _parse(text: str, name: str, target: Target) -> llvm.ModuleRef:
    try:
        return llvm_object.parse(text, target.machine(), target.triple)
    except llvm_object.LLVMFailure as exc:
        raise _llvm_error(name, exc) from None


def _optimize(ref: llvm.ModuleRef, target: Target) -> llvm.ModuleRef:
    """Run the module pipeline (llvm_object.PIPELINE_LEVEL, with loop and SLP vectorization), then verify the
    result."""
    try:
        return llvm_object.optimize(ref, target.machine())
    except llvm_object.LLVMFailure as exc:
        raise _llvm_error(ref.name, exc) from None


_exported_functions = llvm_object.exported_functions


def _defined_functions(module: ir.Module) -> tuple[str, ...]:
    """The functions an llvmlite module defines with external linkage: what its object exports."""
    return tuple(f.name for f in module.functions if not f.is_declaration and f.linkage in ("", "external"))


def _link(name: str, payloads: Sequence[bytes | memoryview], symbols: tuple[str, ...]
          ) -> tuple[llvm.ExecutionEngine, dict[str, int]]:
    """A new engine holding the objects, and the address of every exported symbol; never an address of 0."""
    payloads = [bytes(p) for p in payloads]  # cache entries hand out read-only views
    if not payloads or not all(_plausible_object(p) for p in payloads):
        raise CodegenError(f"module {name!r}: its object is not a well-formed ELF file")
    if len(set(symbols)) != len(symbols):
        raise CodegenError(f"module {name!r}: its objects export a symbol twice")
    _check_resolvable(name, payloads)
    engine = _new_engine()
    try:
        for payload in payloads:
            engine.add_object_file(llvm.ObjectFileRef.from_data(payload))
        engine.finalize_object()
    except RuntimeError as exc:
        raise CodegenError(f"module {name!r}: its object does not load: {exc}") from None
    addresses = {s: engine.get_function_address(s) for s in symbols}
    missing = [s for s, a in addresses.items() if not a]
    if missing:
        raise CodegenError(f"module {name!r}: no address for {', '.join(missing)} after loading its object")
    return engine, addresses


def _check_resolvable(name: str, payloads: Sequence[bytes]) -> None:
    """Every symbol the objects need is defined by one of them or by the process: MCJIT would link a call to an
    undefined symbol as a call to address 0 (Linux only, as _plausible_object)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        missing = elf_symbols.undefined_symbols(list(payloads))
    except ValueError as exc:
        raise CodegenError(f"module {name!r}: its object is not a well-formed ELF file ({exc})") from None
    process = ctypes.CDLL(None)
    unresolved = sorted(s for s in missing if not hasattr(process, s))
    if unresolved:
        raise CodegenError(f"module {name!r}: its objects call {', '.join(unresolved)}, which nothing defines")


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
