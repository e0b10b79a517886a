"""Embedding's gradient options against torch: scale_grad_by_freq divides by the index counts, sparse=True gives
torch's sparse gradient as a dense tensor (so SGD with momentum steps as torch's), both together are refused."""
from __future__ import annotations

import numpy as np
import pytest

import braze

torch = pytest.importorskip("torch")

INDEX = np.array([[1, 3, 1], [1, 0, 3]])
WEIGHT = np.random.default_rng(0).standard_normal((5, 3))
COTANGENT = np.random.default_rng(1).standard_normal((2, 3, 3))


def _pair(**options):
    return (braze.nn.Embedding(5, 3, _weight=WEIGHT, dtype=braze.float64, **options),
            torch.nn.Embedding(5, 3, _weight=torch.tensor(WEIGHT), **options))


def _backward(ours, theirs) -> None:
    (ours(braze.tensor(INDEX)) * braze.tensor(COTANGENT)).sum().backward()
    (theirs(torch.tensor(INDEX)) * torch.tensor(COTANGENT)).sum().backward()


def test_embedding_scale_grad_by_freq_divides_by_index_counts() -> None:
    ours, theirs = _pair(scale_grad_by_freq=True)
    _backward(ours, theirs)
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_embedding_sparse_gradient_is_torch_sparse_gradient_densified() -> None:
    ours, theirs = _pair(sparse=True)
    _backward(ours, theirs)
    assert theirs.weight.grad.is_sparse
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.to_dense().numpy(), rtol=1e-12)


def test_embedding_sparse_trains_with_sgd_momentum_as_torch() -> None:
    ours, theirs = _pair(sparse=True)
    opt_b = braze.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    opt_t = torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        index = INDEX[:, step:]   # rows looked up change between steps: untouched rows keep their momentum
        opt_b.zero_grad()
        opt_t.zero_grad()
        (ours(braze.tensor(index)) ** 2).sum().backward()
        (theirs(torch.tensor(index)) ** 2).sum().backward()
        opt_b.step()
        opt_t.step()
    np.testing.assert_allclose(ours.weight.detach().numpy(), theirs.weight.detach().numpy(), rtol=1e-12)


def test_embedding_refuses_scale_grad_by_freq_with_sparse_under_autodiff() -> None:
    ours, _ = _pair(scale_grad_by_freq=True, sparse=True)
    with pytest.raises(ValueError, match="scale_grad_by_freq=True is not supported with sparse=True"):
        ours(braze.tensor(INDEX))
    with braze.no_grad():
        np.testing.assert_array_equal(ours(braze.tensor(INDEX)).numpy(), WEIGHT[INDEX])


def test_embedding_scale_grad_by_freq_compiles_to_the_plain_lookup() -> None:
    model = braze.nn.Embedding(5, 3, scale_grad_by_freq=True).eval()
    index = braze.tensor(INDEX)
    np.testing.assert_array_equal(braze.compile(model, index)(index).numpy(), model(index).detach().numpy())

