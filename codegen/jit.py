"""The JIT: LLVM IR in, callable machine code out.

`compile_ir(module)` parses and verifies an llvmlite module, optimizes it (llvm_object.PIPELINE_LEVEL, with loop and
SLP vectorization, or the short pipeline of a module marked llvm_object.EXPLICIT) for the target, verifies it again,
emits an object file and links that object into an MCJIT engine of its own. With the disk cache (codegen/cache.py) a
module compiled before, in any process, skips parsing and optimization: its object is loaded directly, after checking
that it exports exactly the module's functions; an entry that does not link or exports anything else is deleted and
the module rebuilt.

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

The library type and the registry of live libraries are in codegen/library.py, which loads without llvmlite: a warm
compile opens a graph's cached shared object there instead of linking its objects here (codegen/shared_object.py).

`BRAZE_DUMP_LLVM=1` and `BRAZE_DUMP_ASM=1` print the optimized LLVM IR and the assembly of every module compiled.
"""
from __future__ import annotations

import re
import struct
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import llvmlite.binding as llvm
import llvmlite.ir as ir

from braze.ir.errors import CodegenError

from . import cache, compile_workers, elf_symbols, llvm_object
from .compile_workers import Job, Result
from .described import compile_described
from .library import CompiledLibrary, Sources, dump, known_library, lock, pack_objects, register, unpack_objects
from .target import OPT_LEVEL, Target, create_jit_machine, host_target, init_llvm, target_of

__all__ = ["CompiledLibrary", "compile_described", "compile_here", "compile_ir", "compile_objects", "finish_batch",
           "known_library", "link_objects", "pack_objects", "run_tasks", "start_batch", "unpack_objects"]


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
    with lock:
        known = known_library(key)
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
        register(library)
    dump(library)
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
    with lock:
        with _timed(timings, "link"):
            linked = _link(name, [payload for _, payload in objects], tuple(s for syms, _ in objects for s in syms))
        library = CompiledLibrary(name, key, target, sources, tuple(s for syms, _ in objects for s in syms), linked,
                                  from_cache, optimized, timings, meta)
        register(library)
    dump(library)
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


def optimized_module(text: str, name: str, target: Target) -> llvm.ModuleRef:
    """The optimized module of LLVM IR text, for inspecting a library (CompiledLibrary.llvm_ir, asm)."""
    return _optimize(_parse(text, name, target), target, llvm_object.is_explicit(text))


def _parse(text: str, name: str, target: Target) -> llvm.ModuleRef:
    try:
        return llvm_object.parse(text, target.machine(), target.triple)
    except llvm_object.LLVMFailure as exc:
        raise _llvm_error(name, exc) from None


def _optimize(ref: llvm.ModuleRef, target: Target, explicit: bool) -> llvm.ModuleRef:
    """Run the module pipeline (llvm_object.optimize: `explicit` picks the short one), then verify the result."""
    try:
        return llvm_object.optimize(ref, target.machine(), explicit)
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
    unresolved = elf_symbols.unresolved_in_process(missing)
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


