"""softplus, mish, elu and binary_cross_entropy_with_logits keep their tails: the tiny values far left (log1p, not
log(1 + e), which rounds 1 + e to 1 there), elu's near 0 (expm1, not exp(x) - 1) and plain x far right, eager and
compiled, with finite gradients (expm1's and elu's exact far left)."""
from __future__ import annotations

import numpy as np
import pytest

import braze
import braze.nn.functional as F

# float32 results against float64 references: a few roundings of an exp, a log1p or a division
RTOL = 1e-6


def _softplus64(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _mish64(x: np.ndarray) -> np.ndarray:
    return x * np.tanh(_softplus64(x))


def _both(fn, x: np.ndarray) -> list[np.ndarray]:
    """fn's eager and compiled results for x."""
    return [fn(braze.tensor(x)).numpy(), np.asarray(braze.compile(fn, x)(x))]


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=RTOL, atol=0)


def test_softplus_keeps_the_tiny_values_of_very_negative_inputs() -> None:
    x = np.float32([-87.0, -50.0, -30.0, -20.0, -17.0, -10.0, -1.0, 0.0, 1.0, 10.0, 19.5])
    for got in _both(F.softplus, x):
        _close(got, _softplus64(x.astype(np.float64)))
    assert F.softplus(braze.tensor(np.float32([-20.0]))).numpy()[0] > 2e-9  # log(1 + e) gave 0


@pytest.mark.parametrize("beta", [0.5, 3.0])
def test_softplus_with_beta_keeps_its_tail_and_its_threshold(beta: float) -> None:
    x = np.float32([-25.0, -8.0, 0.5, 6.0, 6.8, 30.0])  # beta * x stays above float32 exp's underflow
    for got in _both(lambda v: F.softplus(v, beta=beta, threshold=20.0), x):
        z = beta * x.astype(np.float64)
        _close(got, np.where(z > 20.0, x, _softplus64(z) / beta))


def test_mish_matches_float64_from_the_left_tail_to_the_linear_part() -> None:
    x = np.concatenate([np.linspace(-90, 40, 2601, dtype=np.float32), np.float32([-1e-30, 1e-30, 9.1, 20.0, 3e38])])
    want = _mish64(x.astype(np.float64))
    for got in _both(F.mish, x):
        _close(got, want)


def test_mish_special_values_follow_torch() -> None:
    x = np.float32([np.inf, -np.inf, np.nan, 0.0])
    for got in _both(F.mish, x):
        assert got[0] == np.inf
        assert np.isnan(got[1])  # -inf * tanh(softplus(-inf)) = -inf * 0, as torch computes it
        assert np.isnan(got[2])
        assert got[3] == 0.0


def test_mish_gradient_is_finite_in_both_tails() -> None:
    x = np.array([-200.0, -40.0, -3.0, 0.7, 15.0, 20.5, 50.0, 100.0, 1e30])
    t = braze.tensor(x, requires_grad=True)
    F.mish(t).sum().backward()
    sp = _softplus64(x)
    th = np.tanh(sp)
    sigmoid = np.exp(-np.logaddexp(0.0, -x))
    want = th + x * (1 - th ** 2) * sigmoid
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("alpha", [1.0, 0.7])
def test_elu_is_exact_near_zero_and_saturates_far_left(alpha: float) -> None:
    x = np.float32([-1e-30, -1e-7, -1e-5, -1e-3, -0.1, -5.0, -100.0, 0.0, 2.0])
    x64 = x.astype(np.float64)
    for got in _both(lambda v: F.elu(v, alpha), x):
        _close(got, np.where(x64 > 0, x64, alpha * np.expm1(x64)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_expm1_and_elu_gradients_keep_the_left_tail(dtype: type) -> None:
    """d/dx expm1(x) = exp(x): from expm1(x) + 1 it cancels to 0 (float32) or to a few correct digits (float64)."""
    x = np.array([-80.0, -30.0, -20.0, -1e-3, 0.0, 3.0], dtype)
    want = np.exp(x.astype(np.float64))
    for fn in (braze.expm1, F.elu):
        t = braze.tensor(x, requires_grad=True)
        fn(t).sum().backward()
        got = t.grad.numpy().astype(np.float64)
        np.testing.assert_allclose(got[:-1], want[:-1], rtol=2e-7 if dtype == np.float32 else 1e-15, atol=0)


def test_bce_with_logits_keeps_the_loss_of_confident_right_answers() -> None:
    # (torch's form (1 - t) x + max(-x, 0) + log1p(exp(-|x|)) cancels to 0 for x = -30, t = 0, in torch too)
    x = np.float32([30.0, 17.0, 0.3, -2.0])
    target = np.float32([1.0, 1.0, 1.0, 1.0])
    fn = lambda v, t: F.binary_cross_entropy_with_logits(v, t, reduction="none")  # noqa: E731
    eager = fn(braze.tensor(x), braze.tensor(target)).numpy()
    compiled = np.asarray(braze.compile(fn, x, target)(x, target))
    want = _softplus64(-x.astype(np.float64) * (2 * target - 1))
    for got in (eager, compiled):
        _close(got, want)
