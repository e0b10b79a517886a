"""The runtime's own modules (the call stub, the worker pool), found in the disk cache by a description of their
code instead of its LLVM IR, so that they cost a lookup per process; opened from their shared object
(codegen/shared_object.py) without loading LLVM where one was linked when the entry was stored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from braze.ir.errors import CodegenError

from . import cache, shared_object
from .library import CompiledLibrary, dump, known_library, lock, register
from .target import Target, host_target

if TYPE_CHECKING:
    import llvmlite.ir as ir


@dataclass(frozen=True)
class Described:
    """A runtime module as compile_described takes it: the description that keys it, how to build it, and what it
    exports."""

    description: str
    build: Callable[[], ir.Module]
    exports: tuple[str, ...]


# Objects of described modules compiled beside a graph's kernels (compile_beside), by key, until compile_described
# links them: (module name, LLVM IR text, compile result)
_beside: dict[str, tuple[str, str, Any]] = {}


def described_key(description: str, target: Target) -> str:
    """The cache key of a described module: its description, the code generator's version and the target."""
    from .module_layout import builder_version
    return cache.make_key(f"braze-described-module\n{builder_version()}\n{description}", target.identity)


def wanted(modules: Sequence[Described], target: Target) -> list[tuple[str, Described]]:
    """The modules (with their keys) that compile_described would have to compile now: neither linked in this
    process, nor in the disk cache, nor compiled beside an earlier graph. A compile about to run its kernels on the
    compile workers compiles these beside them (compile_beside) instead of one after another in this process later."""
    found = []
    for module in modules:
        key = described_key(module.description, target)
        with lock:
            if known_library(key) is not None or key in _beside:
                continue
        if cache.enabled() and cache.entry_path(key).exists():
            continue
        found.append((key, module))
    return found


def compile_beside(key: str, name: str, text: str, result: Any) -> None:
    """Keep the object of a described module compiled elsewhere (`result` with symbols, payload and optimized, as
    compile_here returns) for compile_described to link instead of compiling it again."""
    with lock:
        _beside[key] = (name, text, result)


def compile_described(description: str, build: Callable[[], ir.Module], exports: tuple[str, ...], *,
                      target: Target | None = None) -> CompiledLibrary:
    """The library of the module `build()` returns, found in the disk cache by `description` (everything its code
    depends on besides the code generator's version and the target, which are added) without building its IR. On a
    miss, or an entry that does not export exactly `exports` or does not open or link, the module is built (or taken
    from those compiled beside a graph's kernels), compiled and stored under that key with its shared object."""
    target = target or host_target()
    key = described_key(description, target)
    with lock:
        library = known_library(key)
        if library is not None:
            return library
        entry = cache.load(key) if cache.enabled() else None
        try:
            library = None if entry is None else _from_entry(entry, description, build, exports, target)
        except (CodegenError, ValueError):
            cache.discard(key)
        if library is not None:
            cache.count("hits")
        return register(library or _compiled(key, build, exports, target))


def _from_entry(entry: cache.CacheEntry, description: str, build: Callable[[], ir.Module], exports: tuple[str, ...],
                target: Target) -> CompiledLibrary:
    """The library of a cache entry: its shared object opened, or (where this machine cannot open one) its object
    linked by MCJIT; CodegenError or ValueError for an entry that is not the module's."""
    if set(entry.symbols) != set(exports):
        raise CodegenError(f"the cached module for {description!r} exports {list(entry.symbols)}")
    payload, shared = shared_object.detach(entry.payload, entry.meta)
    source = lambda: (str(build()),)  # noqa: E731 - built again only when the library is inspected
    code = None
    if shared is not None:
        try:
            code = shared_object.open_shared(shared, entry.symbols, cache.cache_dir(), description)
        except OSError:
            code = None
    if code is None:
        from .jit import link_objects
        return link_objects(description, entry.key, target, [(entry.symbols, payload)], source, from_cache=True)
    library = CompiledLibrary(description, entry.key, target, source, entry.symbols, (code, code.addresses), True, None)
    dump(library)
    return library


def _compiled(key: str, build: Callable[[], ir.Module], exports: tuple[str, ...], target: Target) -> CompiledLibrary:
    """The module built, compiled and linked by MCJIT, and stored (with its shared object) under `key`."""
    from .jit import compile_here, link_objects
    timings: dict[str, float] = {}
    with lock:
        ready = _beside.pop(key, None)
    if ready is not None:
        name, text, result = ready
    else:
        module = build()
        name, text = module.name, str(module)
        result = compile_here(text, name, target, timings)
    if set(result.symbols) != set(exports):
        raise CodegenError(f"module {name!r} exports {list(result.symbols)}, not {list(exports)}")
    if cache.enabled():
        payload, meta = shared_object.attach(result.payload, shared_object.link([result.payload]), {})
        cache.store(key, payload, result.symbols, meta)
    return link_objects(name, key, target, [(result.symbols, result.payload)], text, from_cache=False,
                        optimized=[result.optimized], timings=timings)
