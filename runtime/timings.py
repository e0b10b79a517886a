"""Where compile time goes: the wall time of every stage of one compile, in the order the stages ran.

Stages: "trace" (braze.compile of a model), "pass <name>" for each pass of the pipeline, "verify" (the verifier and
plan checks around the passes), or instead of those "cached passes" (the optimized graph found on disk,
runtime/pass_cache.py), then "cache key", then either "cache read" and "link" (a warm hit: no LLVM IR is
built), or "linked before" (the same code is already linked in this process), or "build IR", "print IR", "LLVM parse", "LLVM optimize", "emit object", "cache write" and "link", and last
"prepare" (the runtime's weight copies, prepared weights and buffers). `str()` is a table with each stage's share;
`braze dump --timings` prints it and benchmarks/compile_time.py sums it over processes.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Mapping


@dataclass
class CompileTimings:
    """Seconds per stage of one compile, and whether its native code was found (in the whole-graph disk cache or
    linked before in this process) rather than compiled."""

    stages: dict[str, float] = field(default_factory=dict)
    cache_hit: bool = False

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the body as stage `name` (added to the stage's time if it ran before)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self.stages[name] = self.stages.get(name, 0.0) + seconds

    def update(self, stages: Mapping[str, float]) -> None:
        """Add every stage of `stages` (a library's or a pass report's times)."""
        for name, seconds in stages.items():
            self.add(name, seconds)

    @property
    def total(self) -> float:
        return sum(self.stages.values())

    def as_dict(self) -> dict[str, float]:
        return dict(self.stages)

    def __str__(self) -> str:
        width = max([len("total")] + [len(name) for name in self.stages]) + 2
        total = self.total or 1.0
        lines = [f"{'stage':<{width}}{'ms':>10}  {'share':>6}"]
        lines += [f"{name:<{width}}{s * 1e3:>10.2f}  {s / total:>6.1%}" for name, s in self.stages.items()]
        origin = "native code found, not compiled" if self.cache_hit else "native code compiled"
        lines.append(f"{'total':<{width}}{self.total * 1e3:>10.2f}  ({origin})")
        return "\n".join(lines)
