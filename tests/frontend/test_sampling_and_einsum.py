"""multinomial's draws follow the weights; einsum's refusals name what is unsupported."""
from __future__ import annotations

import numpy as np
import pytest

import braze


def test_multinomial_with_replacement_follows_the_weights() -> None:
    braze.manual_seed(0)
    drawn = braze.multinomial(braze.tensor([[0.1, 0.0, 0.9], [1.0, 1.0, 0.0]]), 4000, replacement=True)
    assert drawn.shape == (2, 4000) and drawn.dtype == braze.int64
    assert abs(float((drawn[0] == 2).double().mean()) - 0.9) < 0.03 and int((drawn[0] == 1).sum()) == 0
    assert set(np.unique(drawn[1].numpy())) == {0, 1}


def test_multinomial_without_replacement_draws_each_category_once() -> None:
    braze.manual_seed(1)
    drawn = braze.tensor([1.0, 2.0, 3.0, 4.0]).multinomial(4)
    assert sorted(drawn.tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("weights, count, match", [([[-1.0, 2.0]], 1, "non-negative"), ([0.0, 0.0], 1, "positive sum"),
                                                   ([1.0, 0.0], 2, "without replacement")])
def test_multinomial_refuses_bad_weights(weights, count, match) -> None:
    with pytest.raises(braze.BrazeError, match=match):
        braze.multinomial(braze.tensor(weights), count)


def test_multinomial_is_eager_only() -> None:
    with pytest.raises(braze.TraceError, match="test_sampling_and_einsum.py"):
        braze.trace(lambda p: braze.multinomial(p, 1), braze.tensor([1.0, 2.0]))


def test_einsum_matches_numpy() -> None:
    r = np.random.default_rng(0)
    a, b = r.standard_normal((2, 3, 4)), r.standard_normal((2, 4, 5))
    np.testing.assert_allclose(braze.einsum("bij,bjk->bik", braze.tensor(a), braze.tensor(b)).numpy(),
                               np.einsum("bij,bjk->bik", a, b), rtol=1e-12)


@pytest.mark.parametrize("equation, match", [("ii->i", "repeated within one operand"), ("...ij->ij", r"'\.\.\.'")])
def test_einsum_names_unsupported_forms(equation: str, match: str) -> None:
    with pytest.raises(NotImplementedError, match=match):
        braze.einsum(equation, braze.ones(3, 3))


def test_einsum_rejects_mismatched_sizes() -> None:
    with pytest.raises(braze.ShapeError, match="dimension 'j' has sizes 3 and 4"):
        braze.einsum("ij,jk->ik", braze.ones(2, 3), braze.ones(4, 2))


def test_bmm_requires_rank_3() -> None:
    with pytest.raises(braze.ShapeError, match="bmm: expects two rank-3 tensors"):
        braze.bmm(braze.ones(2, 3), braze.ones(3, 2))
