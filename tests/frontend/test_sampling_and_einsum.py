"""multinomial's draws follow the weights; einsum's ellipsis and diagonal forms match numpy, bad equations are refused
with torch's messages."""
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


@pytest.mark.parametrize("equation, operands", [
    ("...ij,...jk->...ik", ((2, 1, 3, 4), (5, 4, 2))), ("...ij", ((2, 3, 4),)), ("ii->i", ((3, 3),)),
    ("ii", ((4, 4),)), ("iji->j", ((3, 2, 3),)),
    ("i...i->...", ((3, 5, 3),)), ("bii,bi->b", ((2, 3, 3), (2, 3))), ("i,i->i", ((1,), (3,))),
    ("ii->i", ((0, 0),)), ("...,...", ((3,), (2, 3)))])
def test_einsum_ellipsis_and_diagonals_match_numpy(equation: str, operands) -> None:
    r = np.random.default_rng(1)
    arrays = [r.standard_normal(shape) for shape in operands]
    got = braze.einsum(equation, *(braze.tensor(a) for a in arrays)).numpy()
    want = np.einsum(equation, *(np.broadcast_to(a, (3,)) if equation == "i,i->i" else a for a in arrays))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_einsum_sums_ellipsis_dims_left_out_of_the_output() -> None:
    x = np.random.default_rng(2).standard_normal((2, 3, 4))
    np.testing.assert_allclose(braze.einsum("...ij->ij", braze.tensor(x)).numpy(), x.sum(0), rtol=1e-12)


@pytest.mark.parametrize("equation, shapes, match", [
    ("ij,jk->ik", ((2, 3), (4, 2)), "subscript j has size 4 for operand 1 which does not broadcast with previously "
                                    "seen size 3"),
    ("ii->i", ((3, 4),), "subscript i is repeated for operand 0 but the sizes don't match, 4 != 3"),
    ("ij->ii", ((3, 3),), "output subscript i appears more than once"),
    ("ij->k", ((3, 3),), "output subscript k of 'ij->k' appears in no input operand"),
    ("....ij", ((3, 3),), "does not match operand 0 of rank 2"),
    ("ijk", ((3, 3),), "does not match operand 0 of rank 2"),
    ("...ij,...j->...i", ((2, 3, 4), (3, 4)), r"subscript \.\.\. has size 3 for operand 1")])
def test_einsum_rejects_bad_equations(equation: str, shapes, match: str) -> None:
    with pytest.raises(braze.ShapeError, match=match):
        braze.einsum(equation, *(braze.ones(*s) for s in shapes))


def test_bmm_requires_rank_3() -> None:
    with pytest.raises(braze.ShapeError, match="bmm: expects two rank-3 tensors"):
        braze.bmm(braze.ones(2, 3), braze.ones(3, 2))


def test_einsum_diagonal_and_ellipsis_compile_and_match_eager() -> None:
    def f(x: braze.Tensor, y: braze.Tensor) -> braze.Tensor:
        return braze.einsum("bii,b...i->b...", x, y)
    r = np.random.default_rng(3)
    x, y = braze.tensor(r.standard_normal((2, 3, 3)).astype(np.float32)), braze.tensor(
        r.standard_normal((2, 4, 3)).astype(np.float32))
    np.testing.assert_allclose(braze.compile(f, x, y)(x, y).numpy(), f(x, y).numpy(), rtol=1e-5, atol=1e-6)
