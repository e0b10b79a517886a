"""The one compile path: an IR graph (traced, parsed or loaded from a file) to an Executable, step by step.

    graph -> drop_buffer_updates -> the pass pipeline -> plan_memory -> build module -> JIT -> Executable

A traced graph optimized before by the same passes (in any process, with the same weights) finds its optimized,
planned graph on disk without running a pass (runtime/pass_cache.py), and the native code of a planned graph
compiled before is found by the graph's text (codegen/graph_cache.py) without building its LLVM module. Every
stage's wall time is recorded in a CompileTimings (runtime/timings.py), kept as Executable.timings.

braze.compile (after tracing), `braze dump --stage llvm|asm` and artifact loading all come through compile_graph,
so what one of them compiles is what the others would. drop_buffer_updates always runs first: an inference graph
loses its buffer updates there, a training graph (with gradients, ir/autodiff.py) keeps them. Memory is always
planned afresh by plan_memory, so a memory plan found in a graph's meta is never what codegen reads. Every pass is
verified by the pass manager, the input graph included.

pipeline=None states that the graph is the output of braze.optimize already; a trusted graph is then compiled as it
is, while an untrusted one (from a file or from IR text, untrusted=True) is still verified and re-planned, and its
fresh plan is checked twice: by an independent liveness-overlap check and against this machine's memory (the arena,
inputs, outputs and weights together). `verified=True` says the caller has just verified the untrusted graph (an
artifact's reader does): it is then re-planned without verifying it again, since plan_memory only adds the plan and
the plan is checked on its own. planned_graph is the one place where the plan codegen reads is made.
"""
from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from braze.codegen import conv_tuning
from braze.ir.errors import TensorSizeError
from braze.ir.graph import Graph
from braze.ir.passes import PassReport, optimize
from braze.ir.passes.manager import resolve_pipeline
from braze.ir.passes.plan_check import check_memory_plan
from braze.ir.types import physical_memory

from . import cpu_load
from .timings import CompileTimings

if TYPE_CHECKING:  # codegen loads LLVM: imported on the first compile, not with braze
    from braze.codegen.described import Described
    from braze.codegen.library import CompiledLibrary
    from braze.codegen.module_layout import BuiltModule
    from .executable import Executable

HEAD, TAIL = "drop_buffer_updates", "plan_memory"

_pause_lock = threading.Lock()
_pauses = 0  # compiles running with the collector paused
_resume = False  # whether the collector was on when the first of them began


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the duration of a compile. Tracing, the passes and code
    generation allocate hundreds of thousands of objects that live until the compile ends (IR graphs, llvmlite
    modules), and every collection their allocations trigger scans them all again to free almost nothing: a
    quarter of the time spent building and printing ResNet-18's LLVM IR. Nested and concurrent compiles share one
    pause; the collector is switched back on (if it was on) when the last of them ends, and frees their cycles
    then."""
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


def compile_passes(pipeline: str | Sequence[str] | None, *, untrusted: bool = False) -> tuple[str, ...]:
    """The passes compile_graph runs: the pipeline's, between drop_buffer_updates and plan_memory (each once)."""
    if pipeline is None:
        return (TAIL,) if untrusted else ()
    names = resolve_pipeline(pipeline)
    return (*((HEAD,) if names[0] != HEAD else ()), *names, *((TAIL,) if names[-1] != TAIL else ()))


def planned_graph(graph: Graph, *, pipeline: str | Sequence[str] | None = "inference", untrusted: bool = False,
                  verified: bool = False, options: Mapping[str, Any] | None = None,
                  timings: CompileTimings | None = None, on_miss: Callable[[], None] | None = None) -> Graph:
    """The graph codegen builds: `graph` through compile_passes(pipeline), every step verified, or the result of
    the same passes found in the disk cache for a trusted graph; for an untrusted graph the fresh plan is also
    checked (see the module doc) before codegen reads it. `verified` (with pipeline=None and untrusted=True only)
    skips verifying the graph again. `timings` receives each pass's time and the rest (verification, checks) as
    "verify", or the cache lookup as "cached passes". `on_miss()` is called before the passes run when their
    result was looked up and not found, or with the disk cache off."""
    return _planned(graph, pipeline, untrusted, verified, options, timings, on_miss)[0]


def _planned(graph: Graph, pipeline: str | Sequence[str] | None, untrusted: bool, verified: bool,
             options: Mapping[str, Any] | None, timings: CompileTimings | None,
             on_miss: Callable[[], None] | None) -> tuple[Graph, str | None]:
    """planned_graph, and the pass-cache key of its result (None when the passes are not cached): the key names
    the planned graph's weights, whose prepared forms runtime/prepared_cache.py keeps under it."""
    start = time.perf_counter()
    passes = compile_passes(pipeline, untrusted=untrusted)
    options = dict(options or {})
    key = _pass_cache_key(graph, passes, options) if passes and not untrusted else None
    if key is not None:
        from . import pass_cache  # loads the code generator's cache: imported on the first compile, not with braze
        found = pass_cache.load(key, graph)
        if found is not None:
            if timings is not None:
                timings.add("cached passes", time.perf_counter() - start)
            return found, key
    if on_miss is not None and (key is not None or not _caching()):
        on_miss()  # the code of a graph whose passes are not looked up (an artifact's) is most likely cached
    replan_only = verified and untrusted and passes == (TAIL,)
    reports: list[PassReport] = []
    planned = optimize(graph, passes, report=reports, verify=not replan_only, **options) if passes else graph
    if key is not None:
        pass_cache.store(key, graph, planned)
    if untrusted:
        check_memory_plan(planned)
        check_fits_memory(planned)
    if timings is not None:
        records = [r for report in reports for r in report.records]
        timings.update({f"pass {r.name}": r.seconds for r in records})
        timings.add("verify", time.perf_counter() - start - sum(r.seconds for r in records))
    return planned, key


def _caching() -> bool:
    from braze.codegen import cache
    return cache.enabled()


def _pass_cache_key(graph: Graph, passes: Sequence[str], options: Mapping[str, Any]) -> str | None:
    """The optimized-graph cache key of this optimization, or None when the disk cache is off or the options cannot
    be keyed."""
    from braze.codegen import cache

    from . import pass_cache
    return pass_cache.key(graph, passes, options) if cache.enabled() else None


def check_fits_memory(graph: Graph, memory_limit: int | None = None) -> None:
    """Raise TensorSizeError when a planned graph's arena, inputs, outputs and weights together need more than
    `memory_limit` bytes (default: this machine's memory)."""
    limit = (physical_memory() or 1 << 40) if memory_limit is None else memory_limit
    arena = int(graph.attributes["memory_plan"]["arena_bytes"])
    values = [*graph.inputs, *graph.outputs]
    total = arena + sum(v.type.nbytes for v in values) + sum(int(a.nbytes) for a in graph.weights.values())
    if total > limit:
        raise TensorSizeError(f"graph @{graph.name}: running it needs {total} bytes (arena {arena}), more than "
                              f"this machine's {limit} bytes of memory")


def _runtime_modules(graph: Graph, threads: int | None) -> list[Described]:
    """The runtime's own modules an executable of `graph` will call: the call stub, and the worker pool when it
    runs on more than one thread."""
    from . import call_frame, pool
    from .threads import choose_threads, estimate_work
    stub = call_frame.stub_module()
    parallel = choose_threads(estimate_work(graph), threads) > 1
    return [*([stub] if stub is not None else []), *([pool.pool_module()] if parallel else [])]


def compile_graph(graph: Graph, *, pipeline: str | Sequence[str] | None = "inference", threads: int | None = None,
                  untrusted: bool = False, verified: bool = False, options: Mapping[str, Any] | None = None,
                  timings: CompileTimings | None = None) -> Executable:
    """Optimize, plan, generate code for, compile and load `graph` (see the module doc; `verified` as in
    planned_graph); options go to the passes.
    The stages' times are added to `timings` (a new CompileTimings if None), kept as the result's `timings`."""
    with collector_paused():
        executable = _compiled(graph, pipeline, threads, untrusted, verified, options,
                               timings if timings is not None else CompileTimings())
    # the compile's workers and linker ran as child processes, which the thread cap would read as others' load
    cpu_load.forget_own_work()
    return executable


def _compiled(graph: Graph, pipeline: str | Sequence[str] | None, threads: int | None, untrusted: bool,
              verified: bool, options: Mapping[str, Any] | None, timings: CompileTimings) -> Executable:
    from braze.codegen.graph_cache import compile_module, expect_compile

    from . import prepared_cache
    from .executable import Executable
    # optimize and plan memory: verified before and after every pass; when the passes must run, the code surely
    # has to be generated too, so the compile workers start now, beside the passes
    graph, pass_key = _planned(graph, pipeline, untrusted, verified, options, timings,
                               on_miss=lambda: expect_compile(graph))
    # with BRAZE_TUNE=1, the convs this machine has no measured kernel choice for are timed on every kernel first
    # (codegen/conv_search.py): the choices, and the cache keys, are then settled before any code is generated
    if conv_tuning.enabled():
        from braze.codegen.conv_search import tune
        with timings.stage("tune"):
            tune(graph)
    # one LLVM module (a kernel per distinct node and the entry point of the whole graph, codegen/abi.py) compiled
    # for the host, or its object found in the disk cache by the graph's text
    steps: dict[str, float] = {}
    built, library = compile_module(graph, timings=steps, beside=lambda: _runtime_modules(graph, threads))
    timings.update(steps)
    timings.cache_hit = built.module is None
    # the runtime object: aligned weights, prepared weights (large ones found in the disk cache when the pass key
    # names the weights), arena, thread count, input checks
    with timings.stage("prepare"):
        prepared_key = _prepared_key(built, library, pass_key)
        found = None if prepared_key is None else prepared_cache.load(prepared_key, built.prepared)
        executable = Executable(built, library, threads=threads, prepared=found)
    if prepared_key is not None and found is None:
        with timings.stage("cache write"):
            prepared_cache.store(prepared_key, built.prepared, executable.prepared)
    executable.timings = timings
    return executable


def _prepared_key(built: BuiltModule, library: CompiledLibrary, pass_key: str | None) -> str | None:
    """The disk-cache key of the module's prepared weights, or None when they are not kept there (no pass key to
    name the weights by, or too small to be worth it)."""
    from . import prepared_cache
    return prepared_cache.key(pass_key, library.key) if pass_key is not None and prepared_cache.wanted(
        built.prepared) else None
