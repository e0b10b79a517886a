"""Every op that states a decomposition (OpDef.decomposition) computes with it what its reference computes, on
every registry sample of the op (float64; 1e-12 relative)."""
from __future__ import annotations

import numpy as np
import pytest

from braze import ir
from braze.ir.evaluate import Concrete, NumpyEmitter, evaluate

from .samples import all_samples

SAMPLES = [s for s in all_samples() if ir.get_op(s.op).decomposition is not None]


def test_decomposed_ops_have_samples() -> None:
    assert {s.op for s in SAMPLES} == {"cross_entropy", "mse_loss", "batch_norm_train", "scale_grad", "slice_scatter",
                                       "conv2d_grad_weight"}


def test_conv2d_grad_weight_decomposes_only_a_long_sum() -> None:
    """Over few images and positions the weight gradient stays one op (its decomposition returns None)."""
    covered = {s.label: _decomposed(s) is not None for s in SAMPLES if s.op == "conv2d_grad_weight"}
    assert covered == {"grouped": False, "pad1": False, "sliced": True}


def _decomposed(sample):
    op = ir.get_op(sample.op)
    attrs = op.check_attrs(dict(sample.attrs))
    return op.decomposition(NumpyEmitter(), *(Concrete(np.asarray(a)) for a in sample.args), **attrs)


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_decomposition_matches_the_reference(sample) -> None:
    got = _decomposed(sample)
    if got is None:  # operands the decomposition does not cover: the node stays
        return
    want = evaluate(sample.op, sample.args, ir.get_op(sample.op).check_attrs(dict(sample.attrs)))
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for have, expected in zip(got, want):
        assert have.array.dtype == expected.dtype and have.array.shape == expected.shape
        np.testing.assert_allclose(have.array, expected, rtol=1e-12, atol=1e-12, equal_nan=True)
