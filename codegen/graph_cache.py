"""Native code for a whole optimized graph, found by the graph's text when compiled before: a warm load builds no LLVM.

`compile_module(graph)` looks up the disk-cache entry keyed by module_layout.module_key (the graph's text, the
target, the builder version). On a hit it links the stored object and rebuilds the BuiltModule from the entry's
layout and the graph: no kernel is lowered and no LLVM IR is built, printed, parsed or optimized. On a miss it
builds the module (module_builder.py), compiles it (jit.py) and stores the object under that key with its layout.
Only the default lowering uses the key: a custom lowering's code is not named by the graph, so its module is
compiled (and cached) by its LLVM IR as before. Each step's wall time goes to the `timings` dict given.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from braze.ir.graph import Graph

from .jit import CompiledLibrary, compile_ir, load_cached
from .module_layout import BuiltModule, built_from_meta, graph_digest, layout_meta, module_key, module_names
from .target import Target, host_target

if TYPE_CHECKING:
    from .module_builder import Lowering


def compile_module(graph: Graph, *, target: Target | None = None, use_cache: bool | None = None,
                   lower: Lowering | None = None, timings: dict[str, float] | None = None
                   ) -> tuple[BuiltModule, CompiledLibrary]:
    """The built module and linked library of an optimized graph, from the whole-graph cache entry when there is
    a valid one (see the module doc)."""
    timings = {} if timings is None else timings
    target = target or host_target()
    key = None
    if lower is None:
        start = time.perf_counter()
        digest = graph_digest(graph, target)
        key = module_key(digest)
        timings["cache key"] = time.perf_counter() - start
        built = _cached(graph, target, digest, use_cache, timings)
        if built is not None:
            return built
    from .module_builder import build_module  # the lowerings: imported on the first module actually built
    start = time.perf_counter()
    built = build_module(graph, target=target, lower=lower)
    timings["build IR"] = time.perf_counter() - start
    meta = layout_meta(built) if key is not None else None
    library = compile_ir(built.module, target=built.target, use_cache=use_cache, cache_key=key, meta=meta)
    timings.update(library.timings)
    return built, library


def _cached(graph: Graph, target: Target, digest: str, use_cache: bool | None,
            timings: dict[str, float]) -> tuple[BuiltModule, CompiledLibrary] | None:
    """The module and library from the entry of the graph's `digest`; None when there is none or its layout does
    not fit the graph and the object's exports (exactly the entry and the prepare function, named for this graph,
    target and builder: module_names): the entry is then rebuilt, never linked."""
    found: list[BuiltModule] = []
    start = time.perf_counter()
    name, entry, prepare = module_names(digest)

    def accept(meta: dict, symbols: tuple[str, ...]) -> bool:
        built = built_from_meta(graph, target, meta)
        if built is None or (built.name, built.entry) != (name, entry) or built.prepare not in (None, prepare):
            return False
        if set(symbols) != {built.entry, *((built.prepare,) if built.prepare else ())}:
            return False
        found.append(built)
        return True
    library = load_cached(module_key(digest), target, lambda: _source_ir(graph, target), use_cache=use_cache,
                          accept=accept)
    if library is None:
        return None
    if found:  # read and linked now; a library linked earlier in this process was accepted then
        timings.update(library.timings)
        return found[0], library
    timings["linked before"] = time.perf_counter() - start
    built = built_from_meta(graph, target, library.meta)
    return (built, library) if built is not None else None


def _source_ir(graph: Graph, target: Target) -> str:
    """The LLVM IR of a graph's module, built again when a library linked from the cache is inspected."""
    from .module_builder import build_module
    return str(build_module(graph, target=target).module)
