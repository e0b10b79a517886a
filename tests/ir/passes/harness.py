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
    with `flags` (one bool for all, or path -> bool), as specialize_flags was asked to fix them. Outputs pair up
    by their "outputs" attribute roles when both graphs have them: a buffer update `after` dropped must leave the
    buffer as it was."""
    rng = np.random.default_rng(seed)
    inputs = [random_array(v.type, rng) for v in before.inputs]
    if isinstance(flags, bool):
        flags = {f.path: flags for f in before.flags()}
    wanted = ir.interpret(before, inputs, flags=flags)
    got = ir.interpret(after, inputs)
    roles = before.attributes.get("outputs"), after.attributes.get("outputs")
    if roles[0] is not None and roles[1] is not None and tuple(roles[0]) != tuple(roles[1]):
        by_role = dict(zip(roles[1], got, strict=True))
        assert set(by_role) <= set(roles[0]), f"outputs {roles[1]} are not among {roles[0]}"
        got = tuple(by_role[r] if r in by_role else np.asarray(before.weights[r.split(":", 1)[1]]) for r in roles[0])
    for want, have in zip(wanted, got, strict=True):
        assert have.dtype == want.dtype and have.shape == want.shape
        np.testing.assert_allclose(have, want, rtol=rtol, atol=1e-6, equal_nan=True)
