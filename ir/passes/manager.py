"""The pass manager: passes registered by name run as a pipeline; after each one the graph's temporaries are
renumbered, the verifier runs, the time and node counts are recorded, and the IR can be printed or saved.

A pass is `fn(graph, ctx) -> Graph`; it never changes its input (graphs are immutable; weights mappings are
replaced, not edited) and `ctx` carries the run's options and collects the pass's notes for the report. A pass
declares the options it reads; a run given an option no pass of its pipeline declares is refused:

    @register_pass("strip_casts", options=("keep_float64",))
    def strip_casts(graph: Graph, ctx: PassContext) -> Graph:
        ...

Built-in passes live in modules of this package named after them (braze.ir.passes.dce, ...; _MODULES lists the
exceptions) and are imported the first time their name is asked for, so a pipeline names passes without
importing them.
"""
from __future__ import annotations

import importlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, TextIO

from ..errors import BrazeError, VerifyError
from ..graph import Graph
from ..verify import VerifiedNodes, verify as verify_graph

PassFn = Callable[[Graph, "PassContext"], Graph]

PIPELINES: dict[str, tuple[str, ...]] = {
    "inference": ("drop_buffer_updates", "specialize_flags", "fold_reparameterizations", "fold_batchnorm",
                  "decompose", "constant_fold", "simplify", "cse", "dce", "fuse_attention", "fuse", "plan_memory"),
    # a graph with its gradients (ir/autodiff.py): its buffer updates are kept, ops without kernels decomposed
    "training": ("specialize_flags", "decompose", "fold_reparameterizations", "constant_fold", "simplify", "cse",
                 "dce", "fuse", "plan_memory"),
}
BUILTIN_PASSES = tuple(dict.fromkeys(name for names in PIPELINES.values() for name in names))
_MODULES = {"fold_reparameterizations": "fold_reparam"}  # built-in passes whose module is not named after them

_PASSES: dict[str, PassFn] = {}
_OPTIONS: dict[str, tuple[str, ...]] = {}


def register_pass(name: str, *, options: Sequence[str] = (), replace: bool = False) -> Callable[[PassFn], PassFn]:
    """Decorator: register `fn(graph, ctx) -> Graph` as the pass `name` reading the run options `options` (once,
    unless replace=True)."""
    def wrap(fn: PassFn) -> PassFn:
        if name in _PASSES and not replace and _PASSES[name] is not fn:
            raise BrazeError(f"pass {name!r} is already registered; pass replace=True to override it")
        _PASSES[name], _OPTIONS[name] = fn, tuple(options)
        return fn
    return wrap


def _load_builtin(name: str) -> None:
    """Import the module of built-in pass `name` if it exists (registration happens on import)."""
    module = f"{__package__}.{_MODULES.get(name, name)}"
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise


def get_pass(name: str) -> PassFn:
    """The pass registered as `name`; raises BrazeError listing the known passes."""
    if name not in _PASSES and name in BUILTIN_PASSES:
        _load_builtin(name)
    if name not in _PASSES:
        raise BrazeError(f"unknown pass {name!r}; known passes: {', '.join(pass_names()) or 'none'}")
    return _PASSES[name]


def pass_names() -> list[str]:
    """Every registered pass name (built-in ones included), sorted."""
    for name in BUILTIN_PASSES:
        if name not in _PASSES:
            _load_builtin(name)
    return sorted(_PASSES)


def resolve_pipeline(pipeline: str | Sequence[str]) -> tuple[str, ...]:
    """A pipeline's pass names: a named pipeline ("inference"), a comma-separated string, or a list of names."""
    if isinstance(pipeline, str):
        if pipeline in PIPELINES:
            return PIPELINES[pipeline]
        names = tuple(p.strip() for p in pipeline.split(",") if p.strip())
    else:
        names = tuple(pipeline)
    if not names:
        raise BrazeError(f"empty pipeline {pipeline!r}; name passes or one of the pipelines {sorted(PIPELINES)}")
    return names


def pipeline_options(names: Sequence[str]) -> tuple[str, ...]:
    """The options the passes `names` declare, sorted."""
    for name in names:
        get_pass(name)
    return tuple(sorted({option for name in names for option in _OPTIONS[name]}))


def check_options(names: Sequence[str], options: Mapping[str, Any], caller: str,
                  keywords: Sequence[str] = ()) -> None:
    """Raise a BrazeError naming every option none of the passes `names` declares, with the valid keywords (the
    caller's own `keywords` first, then the passes' options). No options need no pass loaded to check them."""
    if not options:
        return
    valid = pipeline_options(names)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        listed = ", ".join([*keywords, *valid]) or "none"
        raise BrazeError(f"{caller}: unknown keyword argument(s) {', '.join(map(repr, unknown))}; valid keywords "
                         f"(with the options of the passes {', '.join(names) or '(none run)'}): {listed}")


class Options(Mapping[str, Any]):
    """The run's options as a read-only mapping that remembers which keys the passes read."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = dict(values)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return self._values[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


@dataclass
class PassContext:
    """What a running pass gets besides the graph: the options of the run, and notes for the report."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def option(self, key: str, default: Any = None) -> Any:
        return self.options.get(key, default)

    def note(self, text: str) -> None:
        """A line for the report (what the pass did or chose)."""
        self.notes.append(text)


@dataclass(frozen=True)
class PassRecord:
    """One pass of a run: its name, wall time, node counts before and after, and its notes and details."""

    name: str
    seconds: float
    nodes_before: int
    nodes_after: int
    notes: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class PassReport:
    """The record of one pipeline run; `str(report)` is a table."""

    records: list[PassRecord] = field(default_factory=list)
    unused_options: tuple[str, ...] = ()

    def __getitem__(self, name: str) -> PassRecord:
        """The record of the (first) pass called `name`."""
        for r in self.records:
            if r.name == name:
                return r
        raise KeyError(name)

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.records)

    def __str__(self) -> str:
        width = max([len("pass"), len("total")] + [len(r.name) for r in self.records]) + 2
        lines = [f"{'#':>2}  {'pass':<{width}}{'time ms':>9}  {'nodes':>13}  notes"]
        for i, r in enumerate(self.records, 1):
            nodes = f"{r.nodes_before} -> {r.nodes_after}"
            notes = list(r.notes) or [""]
            lines.append(f"{i:>2}  {r.name:<{width}}{r.seconds * 1e3:>9.2f}  {nodes:>13}  {notes[0]}")
            lines += [f"{'':>2}  {'':<{width}}{'':>9}  {'':>13}  {n}" for n in notes[1:]]
        if self.records:
            total = f"{self.records[0].nodes_before} -> {self.records[-1].nodes_after}"
            lines.append(f"{'':>2}  {'total':<{width}}{self.seconds * 1e3:>9.2f}  {total:>13}")
        if self.unused_options:
            lines.append(f"options no pass read: {', '.join(self.unused_options)}")
        return "\n".join(line.rstrip() for line in lines)


class PassManager:
    """Runs a pipeline of named passes over a graph.

    dump: None; "after-each" prints the IR after every pass (to `out`, default stdout) under a `# after NN name`
    line; any other string or path is a directory that receives 00-input.bir and NN-passname.bir per pass.
    verify: run the verifier on the input and after every pass; a failure names the pass that broke the graph.
    options: read by the passes through `ctx.options` (e.g. flags= for specialize_flags, fold_params= for
    constant_fold); the report lists the ones no pass read.
    """

    def __init__(self, pipeline: str | Sequence[str] = "inference", *, dump: str | os.PathLike[str] | None = None,
                 verify: bool = True, options: Mapping[str, Any] | None = None, out: TextIO | None = None) -> None:
        self.names = resolve_pipeline(pipeline)
        self.passes = [(name, get_pass(name)) for name in self.names]
        self.dump, self.verify, self.out = dump, verify, out
        self.options = dict(options or {})
        check_options(self.names, self.options, "PassManager")
        self.report = PassReport()

    def run(self, graph: Graph) -> Graph:
        """The graph after every pass of the pipeline; `graph` itself is left as it was."""
        options = Options(self.options)
        self.report = PassReport()
        passed = VerifiedNodes()
        if self.verify:
            _verified(graph, "the input graph (before any pass)", passed)
        self._dump(0, "input", graph)
        current = graph
        for step, (name, fn) in enumerate(self.passes, 1):
            ctx = PassContext(name, options)
            start = time.perf_counter()
            result = fn(current, ctx)
            seconds = time.perf_counter() - start
            if not isinstance(result, Graph):
                raise BrazeError(f"pass '{name}' returned {type(result).__name__}, not a Graph")
            result = result.renumbered()
            if self.verify:
                _verified(result, f"pass '{name}' (step {step} of the pipeline) produced an invalid graph", passed)
            self.report.records.append(PassRecord(name, seconds, len(current.nodes), len(result.nodes),
                                                  tuple(ctx.notes), dict(ctx.details)))
            self._dump(step, name, result)
            current = result
        self.report.unused_options = tuple(sorted(set(self.options) - options.read))
        return current

    def _dump(self, step: int, name: str, graph: Graph) -> None:
        if self.dump is None:
            return
        if self.dump == "after-each":
            if step:
                out = self.out or sys.stdout
                out.write(f"# after {step:02d} {name}\n{graph}")
            return
        directory = Path(self.dump)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{step:02d}-{name}.bir").write_text(str(graph))


def _verified(graph: Graph, what: str, passed: VerifiedNodes) -> None:
    try:
        verify_graph(graph, passed)
    except VerifyError as exc:
        raise VerifyError(f"{what}: {exc}") from exc


def optimize(graph: Graph, pipeline: str | Sequence[str] = "inference", *,
             dump: str | os.PathLike[str] | None = None, verify: bool = True, report: list[PassReport] | None = None,
             **options: Any) -> Graph:
    """Run a pass pipeline over `graph` and return the new graph; the input graph is not changed.

    pipeline: "inference" (drop_buffer_updates, specialize_flags, fold_reparameterizations, fold_batchnorm,
    decompose, constant_fold, simplify, cse, dce, fuse_attention, fuse, plan_memory), "training" (for a graph with gradients:
    PIPELINES) or a list of pass names. dump: None, "after-each" (print the IR after each pass) or a directory for
    NN-passname.bir files. verify: check the graph after every pass.
    report: a list to which the run's PassReport (times, node counts, the passes' notes) is appended. Other keyword
    arguments are options for the passes, e.g. flags={"drop.training": False} or fold_params=True; one that no pass
    of the pipeline declares is refused with a BrazeError listing the valid ones.
    """
    check_options(resolve_pipeline(pipeline), options, "braze.optimize", ("pipeline", "dump", "verify", "report"))
    manager = PassManager(pipeline, dump=dump, verify=verify, options=options)
    result = manager.run(graph)
    if report is not None:
        report.append(manager.report)
    return result
