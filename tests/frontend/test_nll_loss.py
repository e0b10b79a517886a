"""F.nll_loss over F.log_softmax: the numpy reference, finite-difference gradients, and torch's values and
gradients (float64, to 1e-12) for weights, ignore_index, every reduction and spatial inputs."""
from __future__ import annotations

import numpy as np
import pytest

import braze
import braze.nn.functional as F

from .test_gradients import check_gradients

RNG = np.random.default_rng(3)
X = RNG.standard_normal((5, 4))
T = np.array([0, 3, -100, 2, 1])
W = np.array([0.5, 1.0, 2.0, 3.0])


def reference(x, t, w=None, ignore_index=-100, reduction="mean"):
    logp = x - x.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    w = np.ones(x.shape[1]) if w is None else w
    keep = t != ignore_index
    weights = np.where(keep, w[np.where(keep, t, 0)], 0.0)
    loss = -logp[np.arange(len(t)), np.where(keep, t, 0)] * weights
    return {"none": loss, "sum": loss.sum(), "mean": loss.sum() / weights.sum()}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weight", [None, W])
def test_nll_loss_matches_the_numpy_reference(reduction, weight):
    out = F.nll_loss(F.log_softmax(braze.tensor(X), dim=1), braze.tensor(T),
                     weight=None if weight is None else braze.tensor(weight), reduction=reduction)
    np.testing.assert_allclose(np.asarray(out), reference(X, T, weight, reduction=reduction), rtol=1e-12)


def test_nll_loss_gradients_match_finite_differences():
    target = braze.tensor(T)
    check_gradients(lambda x: F.nll_loss(F.log_softmax(x, 1), target, weight=braze.tensor(W)), X)
    other = braze.tensor(np.where(T == -100, 3, T))
    check_gradients(lambda x: F.nll_loss(F.log_softmax(x, 1), other, ignore_index=3, reduction="sum"), X)


CASES = [
    ((5, 4), T, {}),
    ((5, 4), T, {"weight": W, "reduction": "sum"}),
    ((5, 4), np.array([1, 1, 0, 2, 3]), {"ignore_index": 1, "weight": W}),
    ((2, 4, 3), np.array([[0, 1, 2], [3, -100, 0]]), {"reduction": "none"}),
    ((2, 4, 2, 2), np.array([[[0, 1], [2, 3]], [[3, 2], [1, 0]]]), {"weight": W}),
    ((4,), np.array(2), {}),
    ((5, 4), T, {"size_average": False}),
]


@pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated")
@pytest.mark.parametrize("shape, target, kwargs", CASES)
def test_nll_loss_matches_torch(shape, target, kwargs):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal(shape)
    dim = 1 if len(shape) > 1 else 0
    ours_x = braze.tensor(x, requires_grad=True)
    theirs_x = torch.tensor(x, requires_grad=True)
    ours_kw = {k: braze.tensor(v) if k == "weight" else v for k, v in kwargs.items()}
    theirs_kw = {k: torch.tensor(v) if k == "weight" else v for k, v in kwargs.items()}
    ours = F.nll_loss(F.log_softmax(ours_x, dim), braze.tensor(target), **ours_kw)
    theirs = torch.nn.functional.nll_loss(torch.log_softmax(theirs_x, dim), torch.tensor(target), **theirs_kw)
    np.testing.assert_allclose(np.asarray(ours), theirs.detach().numpy(), rtol=1e-12, atol=1e-14)
    ours.sum().backward()
    theirs.sum().backward()
    np.testing.assert_allclose(np.asarray(ours_x.grad), theirs_x.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_nll_loss_rejects_float_targets_and_bad_shapes():
    logp = F.log_softmax(braze.tensor(X), 1)
    with pytest.raises(braze.DTypeError, match="nll_loss: expected class-index targets"):
        F.nll_loss(logp, braze.tensor(X))
    with pytest.raises(braze.ShapeError, match="nll_loss: expected a target of shape \\(5,\\)"):
        F.nll_loss(logp, braze.tensor(np.zeros(4, dtype=np.int64)))
    with pytest.raises(braze.ShapeError, match="weight must have shape \\(4,\\)"):
        F.nll_loss(logp, braze.tensor(T), weight=braze.ones(3, dtype=braze.float64))
    with pytest.raises(ValueError, match="average is not a valid value for reduction"):
        F.nll_loss(logp, braze.tensor(T), reduction="average")
