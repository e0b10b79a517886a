"""Rows: how an artifact compiled for one batch size runs batches and requests of any number of rows.

A loaded artifact is compiled for the shapes written in its graph, and it cannot be compiled for another batch
size: the graph's reshapes, broadcasts and the like have those shapes in them, and the model's code that could
re-trace it is not in the file. So a batch of n rows is split into calls of the compiled batch B, the last one
padded to B rows by repeating its last row (real data, so index inputs stay in range), and the padding's outputs
are dropped. The batch axis is axis 0: every input and output must have rank >= 1 and the same leading size B, and
a row of input `x` is `x[i]`. Splitting assumes rows are independent of each other, as they are in inference (an
exported graph has dropout off and batch norm on running statistics); an artifact whose outputs lack the batch
axis (a sum over the batch) is refused.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from braze.ir.errors import BrazeError, DTypeError, ShapeError
from braze.ir.graph import Graph, Value
from braze.runtime.signature import safe_conversion


@dataclass(frozen=True)
class Column:
    """One input or output of the artifact as a column: its name, element type and the shape of one row."""

    name: str
    dtype: np.dtype
    row_shape: tuple[int, ...]

    def describe(self) -> str:
        return f"'{self.name}' (rows of {self.dtype.name}{list(self.row_shape)})"


@dataclass(frozen=True)
class Rows:
    """An artifact's inputs and outputs as columns, and its compiled batch size (see the module doc)."""

    batch: int
    inputs: tuple[Column, ...]
    outputs: tuple[Column, ...]

    @classmethod
    def of(cls, graph: Graph, source: str) -> Rows:
        """The columns of a loaded graph; a BrazeError naming `source` when it has no batch axis."""
        values = [*graph.inputs, *graph.outputs]
        leading = {v.type.shape[0] if v.type.shape else None for v in values}
        if not graph.inputs or len(leading) != 1 or None in leading or 0 in leading:
            shown = ", ".join(f"{v.name}: {v.type}" for v in values)
            raise BrazeError(f"{source}: no batch axis to split rows on: the artifact needs an input, and every "
                             f"input and output the same leading dimension, at least 1 ({shown})")
        return cls(leading.pop(), tuple(map(_column, graph.inputs)), tuple(map(_column, graph.outputs)))

    def check(self, columns: Mapping[str, Any], what: str) -> int:
        """The number of rows in `columns` after checking that it holds every input column, as an array of rows
        of the input's shape and of its dtype (or one that converts safely); errors name `what`."""
        missing = [c.name for c in self.inputs if c.name not in columns]
        if missing:
            wanted = ", ".join(c.describe() for c in self.inputs)
            raise BrazeError(f"{what}: no column {', '.join(map(repr, missing))}; the artifact's inputs are {wanted}")
        counts = {c.name: _check_column(c, columns[c.name], what) for c in self.inputs}
        if len(set(counts.values())) > 1:
            shown = ", ".join(f"'{name}' {n}" for name, n in counts.items())
            raise ShapeError(f"{what}: the input columns have different numbers of rows ({shown})")
        return next(iter(counts.values()))

    def run(self, executable: Any, columns: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        """The output columns for `rows` checked rows: ceil(rows / batch) calls of `executable`, the last padded."""
        outputs = {c.name: np.empty((rows, *c.row_shape), c.dtype) for c in self.outputs}
        arrays = [columns[c.name] for c in self.inputs]
        for start in range(0, rows, self.batch):
            take = min(self.batch, rows - start)
            results = executable.run([_padded(a[start:start + take], self.batch) for a in arrays])
            for column, result in zip(self.outputs, results):
                outputs[column.name][start:start + take] = result[:take]
        return outputs

    def split(self, outputs: Mapping[str, np.ndarray], counts: Sequence[int]) -> list[dict[str, np.ndarray]]:
        """Output columns of several requests run as one: one dict per request, `counts[k]` rows each."""
        bounds = np.cumsum([0, *counts])
        return [{name: array[lo:hi] for name, array in outputs.items()} for lo, hi in zip(bounds[:-1], bounds[1:])]


def _column(value: Value) -> Column:
    return Column(value.name, value.type.dtype.numpy, tuple(value.type.shape[1:]))


def _check_column(column: Column, array: Any, what: str) -> int:
    if not isinstance(array, np.ndarray):
        raise BrazeError(f"{what}: column {column.describe()} is a {type(array).__name__}, not a numpy array")
    if array.ndim != 1 + len(column.row_shape) or array.shape[1:] != column.row_shape:
        raise ShapeError(f"{what}: column {column.describe()} got rows of shape {list(array.shape[1:])} "
                         f"(an array of shape {list(array.shape)})")
    if array.dtype != column.dtype and not safe_conversion(array.dtype, column.dtype):
        raise DTypeError(f"{what}: column {column.describe()} got dtype {array.dtype}, which does not convert "
                         f"safely to {column.dtype.name} (convert it explicitly)")
    return array.shape[0]


def _padded(chunk: np.ndarray, batch: int) -> np.ndarray:
    """A chunk of at most `batch` rows, filled up to `batch` by repeating its last row."""
    if len(chunk) == batch:
        return chunk
    return np.concatenate([chunk, np.repeat(chunk[-1:], batch - len(chunk), axis=0)])
