"""Native code for a whole optimized graph, found by the graph's text or assembled from kernels compiled before.

`compile_module(graph)` looks in the disk cache at two levels:
- the whole graph, keyed by module_layout.module_key (the graph's text, the target, the builder version): on a hit
  the entry holds every object of the module (its kernels and its entry), the layout and, where a linker was found
  when it was stored, the objects linked into one shared object (codegen/shared_object.py), so the BuiltModule is
  rebuilt from the layout and the graph and the shared object is opened with ctypes, without loading LLVM (or,
  where it cannot be opened, the objects are linked by MCJIT): no kernel is lowered and no LLVM IR is built,
  printed, parsed or optimized;
- each kernel, keyed by module_layout.kernel_part_key (the node's kernel key, the target, the builder version):
  on a graph miss, a kernel some earlier graph compiled (another batch size, another model with the same layer
  shapes) is declared from its entry instead of lowered, so only new kernels are built and compiled.
Each new kernel is lowered and compiled whole, here or in a compile worker process (compile_workers.py,
kernel_worker.py: the worker parses the node's IR text and runs the same lowering), the costliest first, so the
Python work of building and printing LLVM IR is spread over the cores as well as LLVM's; then the entry is built
and compiled here. Each new kernel is stored under its key, then the graph entry is stored. Only the default lowering uses the keys: a custom
lowering's module is compiled (and cached) by its LLVM IR text. Each step's wall time goes to the `timings` dict.
"""
from __future__ import annotations

import functools
import hashlib
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from braze.ir.errors import CodegenError
from braze.ir.graph import Graph, Node
from braze.ir.registry import is_leaf

from . import cache, described, shared_object
from .described import Described
from .library import CompiledLibrary, dump, known_library, pack_objects, register, unpack_objects
from .batch_chunks import chunk_rows
from .module_layout import BuiltModule, KernelPart, built_from_meta, graph_digest, layout_meta, module_key, \
    module_names, part_from_meta, part_meta
from .target import Target, host_target

if TYPE_CHECKING:  # the JIT and the compile workers load LLVM: imported when something is compiled or linked by MCJIT
    from .compile_workers import Result
    from .module_builder import Lowering, PendingPart

Objects = list[tuple[tuple[str, ...], bytes]]
PARALLEL_KERNELS = 3  # graphs with fewer computing nodes compile in this process alone: a worker would not pay off


def compile_module(graph: Graph, *, target: Target | None = None, use_cache: bool | None = None,
                   lower: Lowering | None = None, timings: dict[str, float] | None = None,
                   beside: Callable[[], Sequence[Described]] | None = None
                   ) -> tuple[BuiltModule, CompiledLibrary]:
    """The built module and linked library of an optimized graph, from the cache where it can (see the module
    doc). When its kernels are compiled on the compile workers, the runtime modules `beside()` lists that are not
    compiled yet (described.wanted) are compiled with them, for compile_described to link when the runtime asks."""
    timings = {} if timings is None else timings
    target = target or host_target()
    if lower is not None:
        return _compile_custom(graph, target, use_cache, lower, timings)
    caching = cache.enabled() if use_cache is None else use_cache
    start = time.perf_counter()
    rows = chunk_rows(graph)
    digest = graph_digest(graph, target, rows)
    key = module_key(digest)
    timings["cache key"] = time.perf_counter() - start
    found = _linked(graph, target, key, digest, caching, timings)
    if found is not None:
        return found
    from . import compile_workers
    from .jit import link_objects
    parallel = _parallel(graph)
    if parallel:
        compile_workers.warm_up()  # the workers start while the first kernels are lowered
    stored: dict[str, bytes] = {}
    runtime = described.wanted(beside(), target) if parallel and beside is not None else []
    built, new, entry = _build_and_compile(graph, target, _known_parts(caching, stored), timings, parallel, rows,
                                           runtime)
    objects = {p.key: (p.symbols, stored[p.key]) for p in built.parts if p.key in stored}
    objects.update((key, (result.symbols, result.payload)) for key, result in new.items())
    ordered = [objects[p.key] for p in built.parts] + [(entry.symbols, entry.payload)]
    if caching:
        with _timed(timings, "cache write"):
            for part in built.parts:
                if part.key in new:
                    cache.store(part.key, new[part.key].payload, part.symbols, part_meta(part))
            payload, index = pack_objects(ordered)
        with _timed(timings, "link shared object"):
            shared = shared_object.link([p for _, p in ordered])
        with _timed(timings, "cache write"):
            payload, meta = shared_object.attach(payload, shared, {**layout_meta(built), "objects": index})
            cache.store(key, payload, tuple(s for syms, _ in ordered for s in syms), meta)
    optimized = [new[p.key].optimized if p.key in new else None for p in built.parts] + [entry.optimized]
    library = link_objects(built.name, key, target, ordered, _sources(graph, target, built), from_cache=False,
                           optimized=optimized, timings=timings, meta=layout_meta(built))
    return built, library


def expect_compile(graph: Graph) -> None:
    """A graph (or the graph it is about to be optimized into) is going to be compiled without a cache to find
    it in: start the compile workers now if it will use them, so their start overlaps the work before."""
    if _parallel(graph):
        from . import compile_workers
        compile_workers.warm_up()


def _parallel(graph: Graph) -> bool:
    """Whether a graph's kernels are worth spreading over worker processes."""
    return sum(1 for n in graph.nodes if not is_leaf(n)) >= PARALLEL_KERNELS


def _known_parts(caching: bool, stored: dict[str, bytes]) -> Callable[[str], KernelPart | None]:
    """build_module's `known`: the kernel part cached under a key (its object put in `stored`), or None. An entry
    whose description is malformed, names another kernel than its key gives, or exports other functions than it
    describes is discarded and the kernel built again."""
    def known(part_key: str) -> KernelPart | None:
        entry = cache.load(part_key) if caching else None
        part = part_from_meta(part_key, entry.meta) if entry is not None else None
        if entry is None or part is None or set(entry.symbols) != set(part.symbols) or \
                not part.name.startswith(f"k_{part_key[:16]}_"):  # kernel_name: the key names the kernel
            if entry is not None:
                cache.discard(part_key)
            return None
        cache.count("hits")
        stored[part_key] = entry.payload
        return part
    return known


def _build_and_compile(graph: Graph, target: Target, known: Callable[[str], KernelPart | None],
                       timings: dict[str, float], parallel: bool, rows: int | None,
                       runtime: Sequence[tuple[str, Described]] = ()) -> tuple[BuiltModule, dict[str, Result], Result]:
    """Build the graph's module, the costliest new kernels first, each lowered here and compiled here or in a
    worker, or lowered and compiled whole by a worker (compile_workers.run_tasks), then compile the entry: the built
    module, the new kernels' compile results by part key, and the entry's. The `runtime` modules (with their keys)
    are built here first and compiled with the kernels (described.compile_beside)."""
    from .compile_workers import Result, Task
    from .jit import compile_here, run_tasks
    from .module_builder import build_module  # the lowerings: imported on the first module actually built
    new: dict[str, Result] = {}
    spent = [0.0, 0.0]  # wall time of the kernel work; of the work done here
    started: set[str] = set()  # the runtime modules handed to run_tasks

    def lower(pending: PendingPart, lower_here: Callable[[PendingPart], KernelPart]) -> tuple[KernelPart, str]:
        start = time.perf_counter()
        with _timed(timings, "build IR"):
            part = lower_here(pending)
        with _timed(timings, "print IR"):
            text = str(part.module)
        spent[1] += time.perf_counter() - start
        return part, text

    def account(result: Result) -> None:
        if result.optimized is not None:  # compiled here
            spent[1] += sum(result.timings.values())
            for stage, seconds in result.timings.items():
                timings[stage] = timings.get(stage, 0.0) + seconds

    def finish(part: KernelPart, result: Result) -> tuple[KernelPart, Result]:
        if set(result.symbols) != set(part.symbols):
            raise _exports_error(part.name, result.symbols, part.symbols)
        account(result)
        return part, result

    def keep(key: str) -> Callable[[tuple[str, str], Result], None]:
        """run_tasks' `finish` of a runtime module: its object kept for compile_described."""
        def kept(named: tuple[str, str], result: Result) -> None:
            account(result)
            described.compile_beside(key, *named, result)
        return kept

    def lower_parts(pending: list[PendingPart], lower_here: Callable[[PendingPart], KernelPart]
                    ) -> dict[str, KernelPart]:
        start = time.perf_counter()
        order = sorted(pending, key=lambda p: -_compile_cost(p.node))
        if parallel:
            from .kernel_worker import part_request
            first = [Task(module.description, None, functools.partial(_built_text, module), keep(key),
                          _built_here_only) for key, module in runtime if key not in started]
            started.update(key for key, _ in runtime)
            done = run_tasks(first + [Task(p.key, {"kind": "lower", "part": part_request(p, target)},
                                           functools.partial(lower, p, lower_here), finish,
                                           functools.partial(_from_worker, p)) for p in order], target)[len(first):]
        else:
            done = [finish(*_compiled_here(*lower(p, lower_here), target)) for p in order]
        new.update((part.key, result) for part, result in done)
        spent[0] += time.perf_counter() - start
        return {part.key: part for part, _ in done}
    start = time.perf_counter()
    built = build_module(graph, target=target, known=known, lower_parts=lower_parts, rows=rows)
    timings["build IR"] = timings.get("build IR", 0.0) + time.perf_counter() - start - spent[0]
    if parallel:
        timings["waiting for workers"] = max(0.0, spent[0] - spent[1])
    with _timed(timings, "print IR"):
        text = str(built.module)
    return built, new, compile_here(text, built.name, target, timings)


def _built_text(module: Described) -> tuple[tuple[str, str], str]:
    """run_tasks' `lower_here` of a runtime module: ((its name, its LLVM IR text), the text)."""
    built = module.build()
    text = str(built)
    return (built.name, text), text


def _built_here_only(header: dict[str, Any], payload: bytes) -> None:
    """run_tasks' `from_worker` of a runtime module, which no worker is asked to build."""
    raise ValueError("a runtime module is built in the compiling process only")


def _compiled_here(part: KernelPart, text: str, target: Target) -> tuple[KernelPart, Result]:
    """A part lowered here, compiled here (its stage times in the result, as a worker's)."""
    from .compile_workers import Result
    from .jit import compile_here
    stages: dict[str, float] = {}
    result = compile_here(text, part.name, target, stages)
    return part, Result(result.symbols, result.payload, result.optimized, stages)


# Ops whose kernels are GEMMs take several times longer to lower and compile than the rest: they are started first.
_COSTLY = ("conv", "matmul", "linear", "gemm")


def _compile_cost(node: Node) -> int:
    what = node.attr.get("kind", "") if node.op == "fused" else node.op
    return 2 if any(word in str(what) for word in _COSTLY) else 1


def _from_worker(pending: PendingPart, header: dict[str, Any], payload: bytes) -> tuple[KernelPart, Result]:
    """A kernel part a worker lowered and compiled, from its answer; ValueError unless the answer describes the
    part the key names with the exports it lists."""
    meta = header.get("part")
    part = part_from_meta(pending.key, meta) if isinstance(meta, dict) else None
    symbols = header.get("symbols")
    if part is None or not part.name.startswith(f"k_{pending.key[:16]}_") or not isinstance(symbols, list) \
            or set(map(str, symbols)) != set(part.symbols):
        raise ValueError(f"a worker's answer for {pending.node.op} does not describe its kernel part")
    from .compile_workers import Result
    return part, Result(part.symbols, payload)


def _linked(graph: Graph, target: Target, key: str, digest: str, caching: bool,
            timings: dict[str, float]) -> tuple[BuiltModule, CompiledLibrary] | None:
    """The module and library from the graph's entry (or the library linked from it earlier in this process);
    None when there is none or its layout does not fit the graph and the objects' exports (the entry and prepare
    functions named for this graph, target and builder, and exactly the kernels the layout names): the graph is
    then built again, never linked."""
    start = time.perf_counter()
    library = known_library(key)
    if library is not None:
        built = built_from_meta(graph, target, library.meta)
        timings["linked before"] = time.perf_counter() - start
        return (built, library) if built is not None else None
    if not caching:
        return None
    with _timed(timings, "cache read"):
        entry = cache.load(key)
    if entry is None:
        return None
    built = built_from_meta(graph, target, entry.meta)
    try:
        rest, shared = shared_object.detach(entry.payload, entry.meta)
        objects = unpack_objects(rest, entry.meta.get("objects"))
        if built is None or objects is None or not _fits(built, digest, objects):
            raise ValueError("the entry does not fit the graph")
        library = None if shared is None else _opened(graph, built, key, target, shared, objects, timings,
                                                      entry.meta)
        if library is None:
            from .jit import link_objects
            library = link_objects(built.name, key, target, objects, lambda: _source_ir(graph, target, built.rows),
                                   from_cache=True, timings=timings, meta=entry.meta)
    except Exception:  # noqa: BLE001 - an entry that does not fit, open or link is rebuilt, never called
        cache.discard(key)
        return None
    cache.count("hits")
    return built, library


def _opened(graph: Graph, built: BuiltModule, key: str, target: Target, shared: bytes | memoryview,
            objects: Objects, timings: dict[str, float], meta: dict[str, Any]) -> CompiledLibrary | None:
    """The library of an entry's shared object, opened without LLVM; None when this machine cannot open one (the
    objects are then linked by MCJIT). ValueError for a shared object that is not the module's."""
    symbols = tuple(s for syms, _ in objects for s in syms)
    with _timed(timings, "open shared object"):
        try:
            code = shared_object.open_shared(shared, symbols, cache.cache_dir(), built.name)
        except OSError:
            return None
    library = CompiledLibrary(built.name, key, target, lambda: _source_ir(graph, target, built.rows), symbols,
                              (code, code.addresses), True, None, timings, meta)
    dump(register(library))
    return library


def _fits(built: BuiltModule, digest: str, objects: Objects) -> bool:
    """The objects export exactly what the layout calls: each part's kernel and prepare functions, then the entry
    and prepare functions of this graph's names."""
    name, entry, prepare = module_names(digest)
    if (built.name, built.entry) != (name, entry) or built.prepare not in (None, prepare):
        return False
    wanted = [p.symbols for p in built.parts] + [(entry, *((prepare,) if built.prepare else ()))]
    if len(objects) != len(wanted) or any(set(s) != set(w) for (s, _), w in zip(objects, wanted)):
        return False
    return {k.name for k in built.kernels} <= {p.name for p in built.parts}


def _compile_custom(graph: Graph, target: Target, use_cache: bool | None, lower: Lowering,
                    timings: dict[str, float]) -> tuple[BuiltModule, CompiledLibrary]:
    """A custom lowering's module: every part and the entry found in the cache by its IR text, or compiled."""
    from .module_builder import build_module
    start = time.perf_counter()
    built = build_module(graph, target=target, lower=lower)
    timings["build IR"] = time.perf_counter() - start
    return built, compile_built(built, use_cache=use_cache, timings=timings)


def compile_built(built: BuiltModule, *, use_cache: bool | None = None,
                  timings: dict[str, float] | None = None) -> CompiledLibrary:
    """The library of a module built by build_module (every part and the entry module), each module found in the
    disk cache by its LLVM IR text or compiled."""
    from .compile_workers import Job
    from .jit import compile_objects, link_objects
    timings = {} if timings is None else timings
    target = built.target
    caching = cache.enabled() if use_cache is None else use_cache
    modules = [p.module for p in built.parts] + [built.module]
    if any(m is None for m in modules):
        raise _built_error(built.name)
    jobs = [Job(m.name, str(m)) for m in modules]
    exports = [p.symbols for p in built.parts] + [(built.entry, *((built.prepare,) if built.prepare else ()))]
    keys = [cache.make_key(job.text, target.identity) for job in jobs]
    objects: list[tuple[tuple[str, ...], bytes] | None] = [None] * len(jobs)
    for i, key in enumerate(keys):
        entry = cache.load(key) if caching else None
        if entry is not None and set(entry.symbols) == set(exports[i]):
            cache.count("hits")
            objects[i] = (entry.symbols, entry.payload)
    missing = [i for i, o in enumerate(objects) if o is None]
    for i, result in zip(missing, compile_objects([jobs[i] for i in missing], target, timings)):
        if set(result.symbols) != set(exports[i]):
            raise _exports_error(jobs[i].name, result.symbols, exports[i])
        objects[i] = (result.symbols, result.payload)
        if caching:
            cache.store(keys[i], result.payload, result.symbols)
    return link_objects(built.name, _custom_key(keys), target, [o for o in objects if o is not None],
                        [job.text for job in jobs], from_cache=not missing, timings=timings,
                        meta=layout_meta(built))


def _custom_key(keys: list[str]) -> str:
    return hashlib.sha256("\n".join(["braze-custom-module", *keys]).encode("utf-8")).hexdigest()


def _sources(graph: Graph, target: Target, built: BuiltModule) -> Callable[[], list[str]]:
    """The IR texts of a library's modules in link order, printed on first inspection: the modules built now (a
    kernel declared from the cache or lowered by a worker has none, so then the whole graph is built again)."""
    if all(p.module is not None for p in built.parts):
        return lambda: [str(p.module) for p in built.parts] + [str(built.module)]
    return lambda: _source_ir(graph, target, built.rows)


def _source_ir(graph: Graph, target: Target, rows: int | None) -> list[str]:
    """The LLVM IR of every module of a graph, built again when a library linked from the cache is inspected."""
    from .module_builder import build_module
    built = build_module(graph, target=target, rows=rows)
    return [str(p.module) for p in built.parts] + [str(built.module)]


def _built_error(name: str) -> Exception:
    return CodegenError(f"module {name!r} was linked from the cache: it has no LLVM modules to compile")


def _exports_error(name: str, got: tuple[str, ...], want: tuple[str, ...]) -> Exception:
    return CodegenError(f"kernel {name!r} exports {list(got)}; its lowering promised {list(want)}")


class _timed:
    """Add the wall time of a block to timings[stage]."""

    def __init__(self, timings: dict[str, float], stage: str) -> None:
        self.timings, self.stage = timings, stage

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timings[self.stage] = self.timings.get(self.stage, 0.0) + time.perf_counter() - self.start
