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
    assert {s.op for s in SAMPLES} == {"cross_entropy", "mse_loss", "batch_norm_train", "conv2d_grad_input",
                                       "conv2d_grad_weight", "scale_grad", "slice_scatter"}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_decomposition_matches_the_reference(sample) -> None:
    op = ir.get_op(sample.op)
    attrs = op.check_attrs(dict(sample.attrs))
    want = evaluate(sample.op, sample.args, attrs)
    got = op.decomposition(NumpyEmitter(), *(Concrete(np.asarray(a)) for a in sample.args), **attrs)
    if got is None:  # the op states where its decomposition applies (grouped convolutions keep their own op)
        assert attrs.get("groups", 1) > 1
        return
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for have, expected in zip(got, want):
        assert have.array.dtype == expected.dtype and have.array.shape == expected.shape
        np.testing.assert_allclose(have.array, expected, rtol=1e-12, atol=1e-12, equal_nan=True)


GEOMETRIES = [(size, k, s, p, d) for size in (4, 5, 7) for k in (1, 2, 3) for s in (1, 2, 3) for p in (0, 1, 3)
              for d in (1, 2) if size + 2 * p >= d * (k - 1) + 1 and p <= d * (k - 1) + 2]


@pytest.mark.parametrize("size,k,stride,padding,dilation", GEOMETRIES)
def test_conv_gradient_decompositions_match_the_references_for_every_geometry(size, k, stride, padding,
                                                                              dilation) -> None:
    """Strides that leave input rows past the last window, padding wider than the kernel's reach, dilations."""
    rng = np.random.default_rng(size * 100 + k * 10 + stride)
    out = (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    x, g, w = rng.standard_normal((2, 2, size, size)), rng.standard_normal((2, 3, out, out)), rng.standard_normal(
        (3, 2, k, k))
    geometry = dict(stride=(stride, stride), padding=(padding, padding), dilation=(dilation, dilation))
    for name, args, shape in (("conv2d_grad_input", (g, w), {"input_shape": x.shape}),
                              ("conv2d_grad_weight", (x, g), {"weight_shape": w.shape})):
        op = ir.get_op(name)
        attrs = op.check_attrs({**shape, **geometry})
        got = op.decomposition(NumpyEmitter(), *(Concrete(a) for a in args), **attrs)
        np.testing.assert_allclose(got.array, evaluate(name, args, attrs)[0], rtol=1e-12, atol=1e-12, err_msg=name)
