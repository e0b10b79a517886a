"""braze.nn.utils: clip_grad_norm_ returns torch's norm and scales as torch does; clip_grad_value_, and the
parameter-vector round trip."""
from __future__ import annotations

import math

import numpy as np
import pytest

import braze
from braze import nn
from braze.nn.utils import clip_grad_norm_, clip_grad_value_, parameters_to_vector, vector_to_parameters

RNG = np.random.default_rng(7)
GRADS = [RNG.standard_normal((3, 4)), RNG.standard_normal(5), RNG.standard_normal((2, 2, 2))]


def params_with_grads(lib, grads=GRADS):
    ps = [lib.nn.Parameter(lib.zeros(g.shape, dtype=lib.float64)) for g in grads]
    for p, g in zip(ps, grads):
        p.grad = lib.tensor(g)
    return ps


@pytest.mark.parametrize("max_norm, norm_type", [(1.0, 2.0), (100.0, 2.0), (0.5, 1), (0.3, math.inf), (2.0, 3.0),
                                                 (1.0, "inf")])
def test_clip_grad_norm_matches_torch(max_norm, norm_type):
    torch = pytest.importorskip("torch")
    ours, theirs = params_with_grads(braze), params_with_grads(torch)
    norm = clip_grad_norm_(ours, max_norm, norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    np.testing.assert_allclose(float(norm), float(expected), rtol=1e-13)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(p.grad), q.grad.numpy(), rtol=1e-13, atol=1e-15)


def test_clip_grad_norm_scales_to_max_norm_and_returns_the_norm_before():
    ps = params_with_grads(braze)
    total = math.sqrt(sum((g ** 2).sum() for g in GRADS))
    assert float(clip_grad_norm_(ps, 1.0, foreach=True)) == pytest.approx(total, rel=1e-14)
    after = math.sqrt(sum((np.asarray(p.grad) ** 2).sum() for p in ps))
    assert after == pytest.approx(1.0 * total / (total + 1e-6), rel=1e-12)


def test_clip_grad_norm_leaves_small_gradients_and_skips_params_without_grad():
    ps = params_with_grads(braze) + [nn.Parameter(braze.zeros(2))]
    clip_grad_norm_(ps, 1e6)
    for p, g in zip(ps, GRADS):
        np.testing.assert_array_equal(np.asarray(p.grad), g)


def test_clip_grad_norm_without_gradients_is_zero():
    assert float(clip_grad_norm_([nn.Parameter(braze.zeros(2))], 1.0)) == 0.0


def test_clip_grad_norm_on_a_model_clips_in_place():
    model = nn.Linear(4, 3)
    model(braze.randn(8, 4)).sum().backward()
    grad = model.weight.grad
    clip_grad_norm_(model.parameters(), 0.1)
    assert model.weight.grad is grad
    assert math.sqrt(sum((np.asarray(p.grad, np.float64) ** 2).sum() for p in model.parameters())) < 0.1 + 1e-6


def test_clip_grad_norm_nonfinite_raises_only_when_asked():
    ps = params_with_grads(braze, [np.array([1.0, np.inf])])
    with pytest.raises(braze.BrazeError, match="clip_grad_norm_: the total norm of order 2.0 .* non-finite"):
        clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)
    assert math.isinf(float(clip_grad_norm_(ps, 1.0)))


def test_clip_grad_value_clamps_elementwise():
    ps = params_with_grads(braze)
    assert clip_grad_value_(ps, 0.5) is None
    for p, g in zip(ps, GRADS):
        np.testing.assert_array_equal(np.asarray(p.grad), np.clip(g, -0.5, 0.5))


def test_parameters_to_vector_and_back_round_trips():
    model = nn.Linear(3, 2)
    vec = parameters_to_vector(model.parameters())
    assert vec.shape == (8,)
    np.testing.assert_array_equal(np.asarray(vec), np.concatenate([np.asarray(model.weight).ravel(),
                                                                   np.asarray(model.bias)]))
    vector_to_parameters(braze.arange(8, dtype=braze.float32), model.parameters())
    assert np.asarray(model.weight).ravel().tolist() == list(range(6)) and model.bias.tolist() == [6.0, 7.0]
    assert model.weight.requires_grad


def test_parameters_to_vector_is_differentiable():
    model = nn.Linear(3, 2)
    (parameters_to_vector(model.parameters()) * 2.0).sum().backward()
    assert (np.asarray(model.weight.grad) == 2.0).all()


def test_vector_to_parameters_checks_its_input():
    model = nn.Linear(3, 2)
    with pytest.raises(TypeError, match="expected torch.Tensor"):
        vector_to_parameters(np.zeros(8), model.parameters())
    with pytest.raises(braze.BrazeError, match="hold 8 elements, got a vector of shape \\(7,\\)"):
        vector_to_parameters(braze.zeros(7), model.parameters())
