"""The one compile path: an IR graph (traced, parsed or loaded from a file) to an Executable, step by step.

    graph -> drop_buffer_updates -> the pass pipeline -> plan_memory -> build module -> JIT -> Executable

braze.compile (after tracing), `braze dump --stage llvm|asm` and artifact loading all come through compile_graph,
so what one of them compiles is what the others would. drop_buffer_updates always runs first: an inference graph
loses its buffer updates there, a training graph (with gradients, ir/autodiff.py) keeps them. Memory is always
planned afresh by plan_memory, so a memory plan found in a graph's meta is never what codegen reads. Every pass is
verified by the pass manager, the input graph included.

pipeline=None states that the graph is the output of braze.optimize already; a trusted graph is then compiled as it
is, while an untrusted one (from a file or from IR text, untrusted=True) is still verified and re-planned.
planned_graph is the one place where the plan codegen reads is made.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from braze.codegen.jit import compile_ir
from braze.codegen.module_builder import build_module
from braze.ir.graph import Graph
from braze.ir.passes import optimize
from braze.ir.passes.manager import resolve_pipeline
from braze.ir.passes.plan_check import check_memory_plan

from .executable import Executable

HEAD, TAIL = "drop_buffer_updates", "plan_memory"


def compile_passes(pipeline: str | Sequence[str] | None, *, untrusted: bool = False) -> tuple[str, ...]:
    """The passes compile_graph runs: the pipeline's, between drop_buffer_updates and plan_memory (each once)."""
    if pipeline is None:
        return (TAIL,) if untrusted else ()
    names = resolve_pipeline(pipeline)
    return (*((HEAD,) if names[0] != HEAD else ()), *names, *((TAIL,) if names[-1] != TAIL else ()))


def planned_graph(graph: Graph, *, pipeline: str | Sequence[str] | None = "inference", untrusted: bool = False,
                  options: Mapping[str, Any] | None = None) -> Graph:
    """The graph codegen builds: `graph` through compile_passes(pipeline), every step verified; for an untrusted
    graph the fresh plan is also checked by an independent liveness-overlap check before codegen reads it."""
    passes = compile_passes(pipeline, untrusted=untrusted)
    planned = optimize(graph, passes, **dict(options or {})) if passes else graph
    if untrusted:
        check_memory_plan(planned)
    return planned


def compile_graph(graph: Graph, *, pipeline: str | Sequence[str] | None = "inference", threads: int | None = None,
                  untrusted: bool = False, options: Mapping[str, Any] | None = None) -> Executable:
    """Optimize, plan, generate code for, compile and load `graph` (see the module doc); options go to the passes."""
    # optimize and plan memory: verified before and after every pass
    graph = planned_graph(graph, pipeline=pipeline, untrusted=untrusted, options=options)
    # one LLVM module: a kernel per node and the entry point of the whole graph (codegen/abi.py)
    built = build_module(graph)
    # machine code for the host, through the process-wide JIT and the disk cache
    library = compile_ir(built.module, target=built.target)
    # the runtime object: aligned weights, prepared weights, arena, thread count, input checks
    return Executable(built, library, threads=threads)
