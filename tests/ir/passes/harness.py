"""Shared pieces of the pass tests: golden-file reading, seeded random inputs and weights, and the equivalence check."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from braze import ir

EXPECT = "# EXPECT:\n"


class GoldenCase(NamedTuple):
    """One golden file: the passes and options of its RUN line, the input IR and the expected IR."""

    passes: list[str]
    options: dict[str, Any]
    source: str
    expected: str


def read_golden(path: Path) -> GoldenCase:
    text = path.read_text()
    head, _, expected = text.partition(EXPECT)
    run = next(line for line in head.splitlines() if line.startswith("# RUN:"))[len("# RUN:"):]
    names, brace, options = run.partition("{")
    passes = [n.strip() for n in names.split(",") if n.strip()]
    return GoldenCase(passes, json.loads(brace + options) if brace else {}, head, expected)


def random_array(t: ir.TensorType, rng: np.random.Generator, positive: bool = False) -> np.ndarray:
    """A seeded array of type `t`: normal floats (0.5..1.5 when positive), small integers, random bools."""
    if t.dtype.is_float:
        data = rng.uniform(0.5, 1.5, t.shape) if positive else rng.standard_normal(t.shape)
        return np.asarray(data, dtype=t.dtype.numpy)
    if t.dtype.kind == "bool":
        return rng.random(t.shape) < 0.5
    low = 0 if t.dtype.kind == "uint" else -3
    return rng.integers(low, 4, t.shape).astype(t.dtype.numpy)


def random_weights(graph: ir.Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """An array per param leaf; variances (paths ending in "var") are positive."""
    rng = np.random.default_rng(seed)
    return {p.path: random_array(p.type, rng, positive=p.path.endswith("var")) for p in graph.params()}


def weights_for(path: Path, graph: ir.Graph) -> dict[str, np.ndarray]:
    """The weights of a golden file's input graph: from <name>.npz beside it, else generated (seed 0)."""
    side = path.with_suffix(".npz")
    if side.exists():
        with np.load(side) as data:
            return {k: data[k] for k in data.files}
    return random_weights(graph)


def assert_equivalent(before: ir.Graph, after: ir.Graph, seed: int = 1, rtol: float = 1e-5,
                      flags: bool | dict[str, bool] | None = None) -> None:
    """Both graphs compute the same outputs on seeded random inputs (NaN where the other has NaN); `before` runs
    with `flags` (one bool for all, or path -> bool), as specialize_flags was asked to fix them."""
    rng = np.random.default_rng(seed)
    inputs = [random_array(v.type, rng) for v in before.inputs]
    if isinstance(flags, bool):
        flags = {f.path: flags for f in before.flags()}
    for want, got in zip(ir.interpret(before, inputs, flags=flags), ir.interpret(after, inputs), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6, equal_nan=True)
