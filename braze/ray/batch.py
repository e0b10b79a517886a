"""`braze.ray.predictor`: a .braze artifact as the callable class Ray Data's `Dataset.map_batches` runs in actors.

    ds.map_batches(braze.ray.predictor("model.braze"), batch_format="numpy", concurrency=4)

Each actor loads and compiles the artifact once (the compiled code comes from the disk cache when another worker
on the machine compiled it first) with one thread per CPU Ray gave the actor (`num_cpus=` of map_batches, 1 by
default) unless `threads` is given. A batch is a dict of numpy arrays with a column per artifact input, named as in
the manifest; any number of rows runs as calls of the artifact's compiled batch (braze/ray/rows.py). The result
has a column per output, beside the batch's other columns (ids, labels), which pass through unchanged.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from braze.ir.errors import BrazeError

from .workers import checked_source, load_in_worker


class Predictor:
    """Runs a .braze artifact on numpy batches; `predictor` makes a subclass naming the file (see the module doc)."""

    path: str
    threads: int | None

    def __init__(self) -> None:
        self.compiled, self.rows = load_in_worker(self.path, self.threads)
        self._inputs = {c.name for c in self.rows.inputs}

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The batch's output columns, and its columns other than inputs as they are."""
        if not isinstance(batch, Mapping):
            raise BrazeError(f"braze.ray.predictor: a batch is a dict of numpy arrays, got a {type(batch).__name__}; "
                             f"pass batch_format='numpy' to map_batches")
        what = f"{self.path}: batch"
        rows = self.rows.check(batch, what)
        kept = {name: column for name, column in batch.items() if name not in self._inputs}
        clashes = sorted(set(kept) & {c.name for c in self.rows.outputs})
        if clashes:
            raise BrazeError(f"{what}: column(s) {', '.join(map(repr, clashes))} would be overwritten by the "
                             f"artifact's outputs of the same name; rename them first")
        return {**kept, **self.rows.run(self.compiled.executable, batch, rows)}


def predictor(path: str | os.PathLike[str], threads: int | None = None) -> type[Predictor]:
    """A callable class for `Dataset.map_batches` running the .braze file at `path` (validated now); `threads`
    per call overrides the count Ray's assigned CPUs give."""
    source = checked_source(path, threads)
    return type("BrazePredictor", (Predictor,), {"path": source, "threads": threads, "__doc__": Predictor.__doc__})
