"""What a Ray worker holds: the artifact loaded once, compiled for as many threads as Ray gave the worker CPUs."""
from __future__ import annotations

import os

from braze.artifacts import load, read
from braze.compiled import CompiledModule
from braze.runtime.threads import check_threads

from .rows import Rows


def checked_source(path: str | os.PathLike[str], threads: int | None) -> str:
    """The artifact's absolute path (workers do not run in the caller's folder), after validating the file and
    its batch axis here, so that a bad file fails in the caller rather than in every worker."""
    check_threads(threads)
    source = os.path.abspath(os.fspath(path))
    Rows.of(read(source).graph, source)
    return source


def load_in_worker(source: str, threads: int | None) -> tuple[CompiledModule, Rows]:
    """The compiled artifact and its columns, with `threads` per call, else one per CPU Ray assigned the worker."""
    compiled = load(source, threads=threads if threads is not None else assigned_threads())
    return compiled, Rows.of(compiled.graph, source)


def assigned_threads() -> int | None:
    """The whole CPUs Ray assigned the calling worker (at least 1), or None outside a worker or with no CPU
    assigned (braze then chooses: BRAZE_NUM_THREADS, else by the graph's size)."""
    import ray
    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    if context.worker.mode != ray.WORKER_MODE:
        return None
    cpus = context.get_assigned_resources().get("CPU", 0.0)
    return max(1, int(cpus)) if cpus > 0 else None
