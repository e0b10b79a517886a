"""The decompose pass: every op stating a decomposition computes its reference on all of its registry samples
when written out (float64, rtol 1e-12), and the decomposed graph holds none of those ops."""
from __future__ import annotations

import numpy as np
import pytest

from braze.ir.builder import GraphBuilder
from braze.ir.interpret import interpret
from braze.ir.passes import optimize
from braze.ir.registry import get_op, op_names
from braze.ir.types import type_of
from tests.ir.samples import Sample, all_samples

DECOMPOSED = sorted(name for name in op_names() if get_op(name).decompose is not None)
SAMPLES = [s for s in all_samples() if s.op in DECOMPOSED]


def test_the_losses_state_decompositions() -> None:
    assert {"cross_entropy", "mse_loss"} <= set(DECOMPOSED)


def test_every_decomposed_op_has_samples() -> None:
    assert sorted(set(DECOMPOSED) - {s.op for s in SAMPLES}) == []


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_decomposition_equals_the_reference(sample: Sample) -> None:
    arrays = [np.asarray(a) for a in sample.args]
    builder = GraphBuilder("sample")
    inputs = [builder.input(f"in{i}", type_of(a)) for i, a in enumerate(arrays)]
    outs = builder.add_node(sample.op, inputs, dict(sample.attrs))
    graph = builder.finish(list(outs))
    decomposed = optimize(graph, ["decompose"])
    assert not {n.op for n in decomposed.nodes} & set(DECOMPOSED)
    for got, want in zip(interpret(decomposed, arrays), interpret(graph, arrays)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
