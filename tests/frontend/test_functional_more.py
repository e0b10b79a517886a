"""The activations (selu, celu, softsign, logsigmoid, softmin, the shrinks, threshold, rrelu), distances
(cosine_similarity, pairwise_distance), channel-wise and alpha dropouts and margin/embedding/likelihood losses of
braze.nn.functional and their nn layers: numpy references, PyTorch's values and gradients, the layers' torch
construction and repr, dropout statistics, and compiled graphs equal to eager.

Tolerances: float32 values within rtol 2e-6 (a few roundings of an exp, a log1p or a division) and atol 1e-6
(tanhshrink's x - tanh(x) cancels), float64 gradients within rtol 1e-9; compiled graphs within rtol 1e-5, atol 1e-6.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze import ir

RNG = np.random.default_rng(20240611)
T = braze.tensor
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
RTOL32, ATOL32 = 2e-6, 1e-6
RTOL64 = 1e-9


def floats(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def signs(*shape: int) -> np.ndarray:
    return np.where(RNG.random(shape) < 0.5, -1.0, 1.0).astype(np.float32)


def _close32(got: Any, want: Any) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=RTOL32, atol=ATOL32)


def _torch() -> Any:
    return pytest.importorskip("torch")


# random values, lambd/threshold boundaries, tiny and huge magnitudes and the non-finite values
SPECIAL = np.float32([0.0, -0.0, 0.5, -0.5, 1e-7, -1e-7, 1e-30, -1e-30, 30.0, -30.0, 100.0, -100.0, 1e4, -1e4,
                      np.inf, -np.inf, np.nan])
X = np.concatenate([floats(400, scale=3.0), SPECIAL])


def _softplus64(z: np.ndarray) -> np.ndarray:
    return np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))


def _elu64(x: np.ndarray, alpha: float, scale: float = 1.0, input_scale: float = 1.0) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.where(x > 0, scale * x, alpha * scale * np.expm1(np.minimum(x, 0) * input_scale))


def _softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    z = np.exp(x - x.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


# (id, call with a functional module f, float64 numpy reference)
ACTIVATIONS: list[tuple[str, Callable[[Any, Any], Any], Callable[[np.ndarray], np.ndarray]]] = [
    ("selu", lambda f, x: f.selu(x), lambda x: _elu64(x, SELU_ALPHA, SELU_SCALE)),
    ("celu", lambda f, x: f.celu(x), lambda x: _elu64(x, 1.0)),
    ("celu_alpha", lambda f, x: f.celu(x, 0.7), lambda x: _elu64(x, 0.7, 1.0, 1 / 0.7)),
    ("softsign", lambda f, x: f.softsign(x), lambda x: x / (1 + np.abs(x))),
    ("logsigmoid", lambda f, x: f.logsigmoid(x), lambda x: -_softplus64(-x)),
    ("tanhshrink", lambda f, x: f.tanhshrink(x), lambda x: x - np.tanh(x)),
    ("softshrink", lambda f, x: f.softshrink(x), lambda x: np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5,
                                                                                                x * 0))),
    ("softshrink_lambd", lambda f, x: f.softshrink(x, 1.5),
     lambda x: np.where(x > 1.5, x - 1.5, np.where(x < -1.5, x + 1.5, x * 0))),
    ("hardshrink", lambda f, x: f.hardshrink(x), lambda x: np.where(np.abs(x) <= 0.5, 0.0, x)),
    ("hardshrink_lambd", lambda f, x: f.hardshrink(x, 2.0), lambda x: np.where(np.abs(x) <= 2.0, 0.0, x)),
    ("threshold", lambda f, x: f.threshold(x, 0.5, -2.0), lambda x: np.where(x <= 0.5, -2.0, x)),
    ("rrelu_eval", lambda f, x: f.rrelu(x, 0.1, 0.3), lambda x: np.where(x > 0, x, 0.2 * x)),
]
ACTIVATION_IDS = [a[0] for a in ACTIVATIONS]


@pytest.mark.parametrize("call,reference", [a[1:] for a in ACTIVATIONS], ids=ACTIVATION_IDS)
def test_activation_matches_numpy(call: Callable, reference: Callable) -> None:
    with np.errstate(invalid="ignore", over="ignore"):
        want = reference(X.astype(np.float64))
    _close32(call(F, T(X)).numpy(), want)


# torch's celu backward rounds 1/alpha to float32, even for float64 tensors
GRAD_RTOL = {"celu_alpha": 1e-6}


@pytest.mark.parametrize("name,call", [a[:2] for a in ACTIVATIONS], ids=ACTIVATION_IDS)
def test_activation_values_and_gradients_match_torch(name: str, call: Callable) -> None:
    torch = _torch()
    got, want = call(F, T(X)).numpy(), call(torch.nn.functional, torch.tensor(X)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    _close32(got, want)
    x = RNG.standard_normal(300) * 3
    x = x[np.abs(np.abs(x) - 0.5) > 1e-3]  # off the kinks at 0.5 (the shrinks, threshold)
    x = np.concatenate([x, [0.0, 30.0, -30.0, 200.0, -200.0]])
    mine = T(x, requires_grad=True)
    call(F, mine).sum().backward()
    theirs = torch.tensor(x, requires_grad=True)
    call(torch.nn.functional, theirs).sum().backward()
    # atol: expm1's derivative is formed as expm1(x) + 1, exact to 1e-16 absolute only (relatively poor far left)
    np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=GRAD_RTOL.get(name, RTOL64), atol=1e-15)


def test_softmin_matches_numpy_and_torch() -> None:
    x = floats(4, 6, 5, scale=3.0)
    for dim in (0, 1, -1):
        _close32(F.softmin(T(x), dim).numpy(), _softmax64(-x.astype(np.float64), dim))
    np.testing.assert_allclose(F.softmin(T(x), 1, dtype=braze.float64).numpy(), _softmax64(-x.astype(np.float64), 1),
                               rtol=1e-12)
    with pytest.warns(UserWarning, match="softmin: implicit dim"):
        _close32(F.softmin(T(x)).numpy(), _softmax64(-x.astype(np.float64), 0))  # torch's legacy choice for 3-d
    torch = _torch()
    _close32(F.softmin(T(x), 2).numpy(), torch.nn.functional.softmin(torch.tensor(x), 2).numpy())


def _eager_and_compiled(fn: Callable[[Any], Any], x: np.ndarray) -> list[np.ndarray]:
    return [fn(T(x)).numpy(), np.asarray(braze.compile(fn, x)(x))]


def test_logsigmoid_keeps_both_tails_eager_and_compiled() -> None:
    x = np.float32([-100.0, -30.0, 30.0, 50.0])
    for got in _eager_and_compiled(F.logsigmoid, x):
        assert got[0] == -100.0 and got[1] == -30.0
        np.testing.assert_allclose(got[2:], -np.exp(-np.float64([30.0, 50.0])), rtol=1e-6)  # 0 from log(sigmoid)


@pytest.mark.parametrize("name,alpha,scale,input_scale", [("selu", SELU_ALPHA, SELU_SCALE, 1.0),
                                                          ("celu", 1.0, 1.0, 1.0)])
def test_selu_and_celu_are_exact_near_zero(name: str, alpha: float, scale: float, input_scale: float) -> None:
    x = np.float32([-1e-30, -1e-7, -1e-5, -1e-3, -5.0, -100.0, 1e-7, 2.0])
    for got in _eager_and_compiled(getattr(F, name), x):
        np.testing.assert_allclose(got, _elu64(x.astype(np.float64), alpha, scale, input_scale), rtol=1e-6, atol=0)


@pytest.mark.parametrize("fn,slope", [
    (F.softplus, 0.5), (F.logsigmoid, 0.5),
    (lambda x: F.soft_margin_loss(x, T(np.ones(3)), reduction="sum"), -0.5),
    (lambda x: F.binary_cross_entropy_with_logits(x, T(np.zeros(3)), reduction="sum"), 0.5),
], ids=["softplus", "logsigmoid", "soft_margin_loss", "bce_with_logits"])
def test_softplus_family_has_the_true_slope_at_zero(fn: Callable, slope: float) -> None:
    x = T(np.zeros(3), requires_grad=True)
    fn(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), slope)  # the kink of max(z, 0) + log1p(exp(-|z|)) once gave 1


def test_activation_argument_checks() -> None:
    with pytest.raises(ValueError, match="alpha cannot be 0"):
        F.celu(T(X), 0.0)
    with pytest.raises(ValueError, match="lambda must be greater or equal to 0"):
        F.softshrink(T(X), -1.0)
    with pytest.raises(ValueError, match="lower bound"):
        F.rrelu(T(X), 0.5, 0.1)


# --- rrelu in training --------------------------------------------------------------------------------------


def test_rrelu_training_draws_one_slope_per_element_in_its_range() -> None:
    lower, upper = 0.1, 0.4
    x = np.concatenate([-RNG.uniform(0.5, 2.0, 2000), RNG.uniform(0.5, 2.0, 100)])
    braze.manual_seed(3)
    t = T(x, requires_grad=True)
    y = F.rrelu(t, lower, upper, training=True)
    y.sum().backward()
    out = y.detach().numpy()
    slopes = out[:2000] / x[:2000]
    assert lower <= slopes.min() < lower + 0.01 and upper - 0.01 < slopes.max() < upper
    np.testing.assert_array_equal(out[2000:], x[2000:])
    np.testing.assert_allclose(t.grad.numpy(), np.concatenate([slopes, np.ones(100)]), rtol=1e-12)
    braze.manual_seed(3)
    np.testing.assert_array_equal(F.rrelu(T(x), lower, upper, training=True).numpy(), out)


def test_rrelu_layer_follows_its_training_flag_eager_and_compiled() -> None:
    layer = nn.RReLU(0.1, 0.3)
    x = floats(5, 40)
    braze.manual_seed(0)
    train = layer(T(x)).numpy()
    negative = x < 0
    assert len(np.unique(np.round(train[negative] / x[negative], 5))) > 20
    want = np.where(x > 0, x, np.float32(0.2) * x)
    np.testing.assert_allclose(layer.eval()(T(x)).numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(braze.compile(layer, x)(x), want, rtol=1e-6)


# --- distances ------------------------------------------------------------------------------------------------


def _cosine64(a: np.ndarray, b: np.ndarray, dim: int, eps: float) -> np.ndarray:
    a, b = np.broadcast_arrays(a.astype(np.float64), b.astype(np.float64))
    na = np.maximum(np.linalg.norm(a, axis=dim, keepdims=True), eps)
    nb = np.maximum(np.linalg.norm(b, axis=dim, keepdims=True), eps)
    return np.sum(a / na * (b / nb), axis=dim)


def test_cosine_similarity_of_a_vector_shorter_than_eps() -> None:
    """Its value is torch's; its gradient is that of the computed value, where torch's clamp (under no_grad) also
    differentiates the norm it replaced."""
    x1, x2 = np.full((1, 4), 1e-10, np.float32), floats(1, 4)
    _close32(F.cosine_similarity(T(x1), T(x2)).numpy(), _cosine64(x1, x2, 1, 1e-8))
    t = T(x1.astype(np.float64), requires_grad=True)
    F.cosine_similarity(t, T(x2.astype(np.float64))).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), x2 / np.linalg.norm(x2.astype(np.float64)) / 1e-8, rtol=1e-9)


def _pairwise64(a: np.ndarray, b: np.ndarray, p: float, eps: float, keepdim: bool = False) -> np.ndarray:
    d = np.abs(a.astype(np.float64) - b + eps)
    axis = d.ndim - 1
    if p == 0:
        return np.sum(d != 0, axis=axis, keepdims=keepdim).astype(np.float64)
    if math.isinf(p):
        return (np.max if p > 0 else np.min)(d, axis=axis, keepdims=keepdim)
    return np.sum(d ** p, axis=axis, keepdims=keepdim) ** (1 / p)


COSINE_CASES = [  # x1, x2, dim
    (floats(5, 7), floats(5, 7), 1),
    (floats(5, 7), floats(5, 7), 0),
    (floats(4, 1, 6), floats(1, 3, 6), -1),  # broadcast
    (floats(5, 1), floats(5, 7), 1),  # a size-1 dim broadcast before the norm
    (np.concatenate([np.zeros((1, 4), np.float32), floats(2, 4)]), floats(3, 4), 1),  # a zero vector
]


@pytest.mark.parametrize("x1,x2,dim", COSINE_CASES)
def test_cosine_similarity_matches_numpy_and_torch(x1: np.ndarray, x2: np.ndarray, dim: int) -> None:
    got = F.cosine_similarity(T(x1), T(x2), dim=dim).numpy()
    _close32(got, _cosine64(x1, x2, dim, 1e-8))
    _close32(F.cosine_similarity(T(x1), T(x2), dim, eps=0.5).numpy(), _cosine64(x1, x2, dim, 0.5))
    torch = _torch()
    _close32(got, torch.nn.functional.cosine_similarity(torch.tensor(x1), torch.tensor(x2), dim=dim).numpy())
    a, b = (x.astype(np.float64) for x in (x1, x2))
    mine = [T(a, requires_grad=True), T(b, requires_grad=True)]
    (F.cosine_similarity(*mine, dim=dim) * T(np.arange(got.size).reshape(got.shape) + 1.0)).sum().backward()
    theirs = [torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)]
    weights = torch.arange(got.size, dtype=torch.float64).reshape(got.shape) + 1.0
    (torch.nn.functional.cosine_similarity(*theirs, dim=dim) * weights).sum().backward()
    for m, t in zip(mine, theirs):
        assert np.isfinite(m.grad.numpy()).all()
        np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), rtol=RTOL64, atol=1e-12)


PAIRWISE_ORDERS = [2.0, 1.0, 3.0, 0.5, 0.0, math.inf, -math.inf, -1.0]


@pytest.mark.parametrize("p", PAIRWISE_ORDERS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance_matches_numpy_and_torch(p: float, keepdim: bool) -> None:
    x1, x2 = floats(5, 6), floats(5, 6)
    x2[0] = x1[0]  # equal rows: the distance is eps's norm, with a finite gradient
    got = F.pairwise_distance(T(x1), T(x2), p=p, keepdim=keepdim).numpy()
    _close32(got, _pairwise64(x1, x2, p, 1e-6, keepdim))
    torch = _torch()
    tf = torch.nn.functional
    _close32(got, tf.pairwise_distance(torch.tensor(x1), torch.tensor(x2), p=p, keepdim=keepdim).numpy())
    if p == 0.0:
        return
    a, b = (x.astype(np.float64) for x in (x1, x2))
    mine = [T(a, requires_grad=True), T(b, requires_grad=True)]
    F.pairwise_distance(*mine, p=p, keepdim=keepdim).sum().backward()
    theirs = [torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)]
    tf.pairwise_distance(*theirs, p=p, keepdim=keepdim).sum().backward()
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), rtol=RTOL64, atol=1e-12)


@pytest.mark.parametrize("x1,x2", [(floats(7), floats(7)), (floats(4, 7), floats(7)),
                                   (floats(2, 3, 4), floats(2, 3, 4)), (np.float32(1.0), np.float32(3.0))],
                         ids=["1d", "broadcast", "3d", "0d"])
def test_pairwise_distance_shapes_match_torch(x1: np.ndarray, x2: np.ndarray) -> None:
    torch = _torch()
    for keepdim in (False, True):
        got = F.pairwise_distance(T(x1), T(x2), keepdim=keepdim).numpy()
        want = torch.nn.functional.pairwise_distance(torch.tensor(x1), torch.tensor(x2), keepdim=keepdim).numpy()
        assert got.shape == want.shape
        _close32(got, want)


# --- losses ----------------------------------------------------------------------------------------------------


def _unit(*shape: int) -> np.ndarray:
    return RNG.uniform(0.05, 2.0, shape).astype(np.float32)


VAR = _unit(4, 5)
VAR[0, :2] = (0.0, 1e-9)  # clamped to eps: the value changes, the gradient reaches var unclamped (as torch)

# (id, call with a functional module f and the tensors, inputs (the first `differentiable` get gradients))
LOSSES: list[tuple[str, Callable[..., Any], list[np.ndarray], int]] = [
    ("margin_ranking", lambda f, a, b, t, **k: f.margin_ranking_loss(a, b, t, margin=0.3, **k),
     [floats(6), floats(6), signs(6)], 2),
    ("hinge_embedding", lambda f, a, t, **k: f.hinge_embedding_loss(a, t, margin=0.8, **k),
     [floats(4, 5), signs(4, 5)], 1),
    ("soft_margin", lambda f, a, t, **k: f.soft_margin_loss(a, t, **k), [floats(4, 5, scale=3.0), signs(4, 5)], 1),
    ("cosine_embedding", lambda f, a, b, t, **k: f.cosine_embedding_loss(a, b, t, margin=0.2, **k),
     [floats(4, 5), floats(4, 5), signs(4)], 2),
    ("cosine_embedding_1d", lambda f, a, b, t, **k: f.cosine_embedding_loss(a, b, t, **k),
     [floats(5), floats(5), np.float32(-1.0)], 2),
    ("triplet", lambda f, a, b, c, **k: f.triplet_margin_loss(a, b, c, margin=0.7, **k),
     [floats(4, 5), floats(4, 5), floats(4, 5)], 3),
    ("triplet_p1_swap", lambda f, a, b, c, **k: f.triplet_margin_loss(a, b, c, p=1, swap=True, **k),
     [floats(4, 5), floats(4, 5), floats(4, 5)], 3),
    ("poisson_nll", lambda f, a, t, **k: f.poisson_nll_loss(a, t, **k),
     [floats(4, 5), RNG.poisson(2.0, (4, 5)).astype(np.float32)], 1),
    ("poisson_nll_rates_full", lambda f, a, t, **k: f.poisson_nll_loss(a, t, log_input=False, full=True, **k),
     [_unit(4, 5), RNG.poisson(2.0, (4, 5)).astype(np.float32)], 1),
    ("gaussian_nll", lambda f, a, t, v, **k: f.gaussian_nll_loss(a, t, v, **k), [floats(4, 5), floats(4, 5), VAR], 3),
    ("gaussian_nll_full_shared_var", lambda f, a, t, v, **k: f.gaussian_nll_loss(a, t, v, full=True, **k),
     [floats(4, 5), floats(4, 5), _unit(4)], 3),
    ("gaussian_nll_size1_var", lambda f, a, t, v, **k: f.gaussian_nll_loss(a, t, v, **k),
     [floats(4, 5), floats(4, 5), _unit(4, 1)], 3),
    ("multilabel_soft_margin", lambda f, a, t, **k: f.multilabel_soft_margin_loss(a, t, **k),
     [floats(4, 5, scale=3.0), (RNG.random((4, 5)) < 0.5).astype(np.float32)], 1),
    ("multilabel_soft_margin_weighted", lambda f, a, t, w, **k: f.multilabel_soft_margin_loss(a, t, weight=w, **k),
     [floats(4, 5), (RNG.random((4, 5)) < 0.5).astype(np.float32), _unit(5)], 1),
    ("multi_margin", lambda f, a, t, **k: f.multi_margin_loss(a, t, margin=0.9, **k),
     [floats(6, 5), RNG.integers(0, 5, 6)], 1),
    ("multi_margin_p2_weighted", lambda f, a, t, w, **k: f.multi_margin_loss(a, t, p=2, weight=w, **k),
     [floats(6, 5), RNG.integers(0, 5, 6), _unit(5)], 1),
    ("multi_margin_1d", lambda f, a, t, **k: f.multi_margin_loss(a, t, **k), [floats(5), np.int64(3)], 1),
]
LOSS_IDS = [c[0] for c in LOSSES]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("call,inputs,differentiable", [c[1:] for c in LOSSES], ids=LOSS_IDS)
def test_loss_values_and_gradients_match_torch(call: Callable, inputs: list[np.ndarray], differentiable: int,
                                               reduction: str) -> None:
    torch = _torch()
    got = call(F, *map(T, inputs), reduction=reduction).numpy()
    want = call(torch.nn.functional, *map(torch.tensor, inputs), reduction=reduction).numpy()
    assert got.shape == want.shape
    _close32(got, want)
    wide = [x.astype(np.float64) if x.dtype == np.float32 else x for x in inputs]
    mine = [T(x, requires_grad=k < differentiable) for k, x in enumerate(wide)]
    theirs = [torch.tensor(x, requires_grad=k < differentiable) for k, x in enumerate(wide)]
    call(F, *mine, reduction=reduction).sum().backward()
    call(torch.nn.functional, *theirs, reduction=reduction).sum().backward()
    for m, t in zip(mine[:differentiable], theirs):
        np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), rtol=RTOL64, atol=1e-12)


def test_simple_losses_match_numpy() -> None:
    a, b, t = floats(6), floats(6), signs(6)
    _close32(F.margin_ranking_loss(T(a), T(b), T(t), margin=0.3, reduction="none").numpy(),
             np.maximum(0, -t * (a - b) + 0.3))
    _close32(F.hinge_embedding_loss(T(a), T(t), reduction="sum").numpy(),
             np.sum(np.where(t == 1, a, np.maximum(0, 1.0 - a))))
    x = np.float32([-800.0, -30.0, 0.0, 2.0, 800.0])  # torch's log1p(exp(800)) is inf; this stays 800
    _close32(F.soft_margin_loss(T(x), T(-np.ones(5, np.float32)), reduction="none").numpy(),
             _softplus64(x.astype(np.float64)))
    logits, labels = floats(3, 4), (RNG.random((3, 4)) < 0.5).astype(np.float32)
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    _close32(F.multilabel_soft_margin_loss(T(logits), T(labels)).numpy(),
             np.mean(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p), axis=1)))
    rates, counts = floats(4), np.float32([0, 1, 3, 7])
    _close32(F.poisson_nll_loss(T(rates), T(counts), reduction="none").numpy(), np.exp(rates) - counts * rates)
    mean, target, var = floats(4), floats(4), _unit(4)
    _close32(F.gaussian_nll_loss(T(mean), T(target), T(var), reduction="none").numpy(),
             0.5 * (np.log(var) + (mean - target) ** 2 / var))


def test_loss_legacy_flags_and_argument_checks() -> None:
    a, b, t = floats(6), floats(6), signs(6)
    np.testing.assert_array_equal(F.margin_ranking_loss(T(a), T(b), T(t), reduce=False).numpy(),
                                  F.margin_ranking_loss(T(a), T(b), T(t), reduction="none").numpy())
    with pytest.raises(ValueError, match="reduction='max' is not supported"):
        F.soft_margin_loss(T(a), T(t), reduction="max")
    with pytest.raises(ValueError, match="same number of dimensions"):
        F.margin_ranking_loss(T(a), T(b), T(t[None]))
    with pytest.raises(ValueError, match="margin must be greater than 0"):
        F.triplet_margin_loss(T(a), T(b), T(t), margin=0.0)
    with pytest.raises(ValueError, match="only p == 1 and p == 2 supported"):
        F.multi_margin_loss(T(floats(2, 3)), T(np.int64([0, 1])), p=3)
    with pytest.raises(ValueError, match="inconsistent target size"):
        F.multi_margin_loss(T(floats(2, 3)), T(np.int64([0, 1, 2])))
    with pytest.raises(ValueError, match="1D target tensor expects 2D input tensors"):
        F.cosine_embedding_loss(T(a), T(b), T(t))
    with pytest.raises(ValueError, match="var has negative entry"):
        F.gaussian_nll_loss(T(a), T(b), T(-np.ones(6, np.float32)))
    with pytest.raises(ValueError, match="var has negative entry"):
        F.gaussian_nll_loss(T(a), T(b), -1.0)
    with pytest.raises(ValueError, match="var is of incorrect size"):
        F.gaussian_nll_loss(T(floats(4, 5)), T(floats(4, 5)), T(_unit(3)))
    _close32(F.gaussian_nll_loss(T(a), T(b), 0.5).numpy(), np.mean(0.5 * (np.log(0.5) + (a - b) ** 2 / 0.5)))


# --- layers ----------------------------------------------------------------------------------------------------

WEIGHT = _unit(5)
# (class name, positional args, keyword args, forward inputs)
LAYERS: list[tuple[str, tuple, dict, list[np.ndarray]]] = [
    ("SELU", (), {}, [X]),
    ("SELU", (), {"inplace": True}, [X]),
    ("CELU", (0.7,), {}, [X]),
    ("CELU", (), {"inplace": True}, [X]),
    ("Softsign", (), {}, [X]),
    ("LogSigmoid", (), {}, [X]),
    ("Softmin", (1,), {}, [floats(3, 4)]),
    ("Softmin", (), {"dim": 0}, [floats(3, 4)]),
    ("Tanhshrink", (), {}, [X]),
    ("Softshrink", (), {}, [X]),
    ("Softshrink", (1.5,), {}, [X]),
    ("Hardshrink", (0.25,), {}, [X]),
    ("Threshold", (0.1, 20.0), {}, [X]),
    ("Threshold", (0.1, -3.5, True), {}, [X]),
    ("RReLU", (), {}, [X]),
    ("RReLU", (0.05, 0.5, True), {}, [X]),
    ("CosineSimilarity", (), {}, [floats(3, 4), floats(3, 4)]),
    ("CosineSimilarity", (0, 1e-6), {}, [floats(3, 4), floats(3, 4)]),
    ("PairwiseDistance", (), {}, [floats(3, 4), floats(3, 4)]),
    ("PairwiseDistance", (1.0, 1e-5, True), {}, [floats(3, 4), floats(3, 4)]),
    ("Dropout1d", (0.2,), {}, [floats(2, 3, 4)]),
    ("Dropout2d", (), {"p": 0.3, "inplace": True}, [floats(2, 3, 4, 4)]),
    ("Dropout3d", (), {}, [floats(2, 3, 2, 2, 2)]),
    ("AlphaDropout", (0.1,), {}, [floats(3, 4)]),
    ("FeatureAlphaDropout", (), {}, [floats(2, 3, 4)]),
    ("MarginRankingLoss", (0.5,), {}, [floats(6), floats(6), signs(6)]),
    ("HingeEmbeddingLoss", (), {"margin": 2.0, "reduction": "sum"}, [floats(4, 5), signs(4, 5)]),
    ("SoftMarginLoss", (), {"reduction": "none"}, [floats(4, 5), signs(4, 5)]),
    ("CosineEmbeddingLoss", (0.1,), {}, [floats(4, 5), floats(4, 5), signs(4)]),
    ("TripletMarginLoss", (), {"margin": 2.0, "p": 1.0, "swap": True}, [floats(4, 5), floats(4, 5), floats(4, 5)]),
    ("PoissonNLLLoss", (), {"log_input": False, "full": True}, [_unit(4, 5), RNG.poisson(2.0, (4, 5)).astype(
        np.float32)]),
    ("GaussianNLLLoss", (), {"full": True, "eps": 1e-4, "reduction": "sum"}, [floats(4, 5), floats(4, 5),
                                                                              _unit(4, 5)]),
    ("MultiLabelSoftMarginLoss", (WEIGHT,), {}, [floats(4, 5), (RNG.random((4, 5)) < 0.5).astype(np.float32)]),
    ("MultiMarginLoss", (2, 0.5, WEIGHT), {}, [floats(6, 5), RNG.integers(0, 5, 6)]),
    ("MultiMarginLoss", (), {"reduction": "sum"}, [floats(6, 5), RNG.integers(0, 5, 6)]),
]


def _build(lib: Any, name: str, args: tuple, kwargs: dict, tensor: Callable) -> Any:
    convert = (lambda v: tensor(v) if isinstance(v, np.ndarray) else v)
    return getattr(lib.nn, name)(*map(convert, args), **{k: convert(v) for k, v in kwargs.items()})


@pytest.mark.parametrize("name,args,kwargs,inputs", LAYERS, ids=[f"{c[0]}-{k}" for k, c in enumerate(LAYERS)])
def test_layer_construction_repr_state_and_eval_output_match_torch(name: str, args: tuple, kwargs: dict,
                                                                   inputs: list[np.ndarray]) -> None:
    torch = _torch()
    mine, theirs = _build(braze, name, args, kwargs, T), _build(torch, name, args, kwargs, torch.tensor)
    assert repr(mine) == repr(theirs)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    for attribute in getattr(type(theirs), "__constants__", []):
        assert getattr(mine, attribute) == getattr(theirs, attribute), attribute
    mine.eval(), theirs.eval()
    got = mine(*map(T, inputs)).numpy()
    want = theirs(*map(torch.tensor, inputs)).numpy()
    _close32(got, want)


def test_new_names_are_exported() -> None:
    for name in ("selu", "celu", "softsign", "logsigmoid", "softmin", "tanhshrink", "softshrink", "hardshrink",
                 "threshold", "rrelu", "cosine_similarity", "pairwise_distance", "dropout1d", "dropout2d", "dropout3d",
                 "alpha_dropout", "feature_alpha_dropout", "margin_ranking_loss", "hinge_embedding_loss",
                 "soft_margin_loss", "cosine_embedding_loss", "triplet_margin_loss", "poisson_nll_loss",
                 "gaussian_nll_loss", "multilabel_soft_margin_loss", "multi_margin_loss"):
        assert name in F.__all__ and callable(getattr(F, name))
    for name in {c[0] for c in LAYERS}:
        assert name in nn.__dict__


# --- dropouts --------------------------------------------------------------------------------------------------


def _four_sigma(n: int, p: float) -> float:
    return 4 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("fn,shape", [(F.dropout1d, (40, 100, 3)), (F.dropout1d, (4000, 3)),
                                      (F.dropout2d, (40, 100, 2, 3)), (F.dropout3d, (40, 100, 2, 1, 2)),
                                      (F.dropout3d, (4000, 2, 1, 2))])
def test_channel_dropout_zeroes_whole_channels(fn: Callable, shape: tuple[int, ...]) -> None:
    p = 0.3
    x = RNG.uniform(0.5, 1.5, shape).astype(np.float32)
    braze.manual_seed(2)
    y = fn(T(x), p).numpy()
    channels = (y / x).reshape(4000, -1)
    kept = channels[:, 0] != 0
    np.testing.assert_allclose(channels[kept], np.float32(1 / (1 - p)), rtol=1e-6)
    assert (channels[~kept] == 0).all()
    assert abs(kept.mean() - (1 - p)) < _four_sigma(4000, p)
    np.testing.assert_array_equal(fn(T(x), p, training=False).numpy(), x)
    np.testing.assert_array_equal(fn(T(x), 0.0).numpy(), x)
    assert (fn(T(x), 1.0).numpy() == 0).all()


def test_channel_dropout_rank_checks_and_warnings() -> None:
    with pytest.raises(ValueError, match="dropout1d: Expected 2D or 3D input"):
        F.dropout1d(T(floats(2, 3, 4, 5)))
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout2d(T(floats(2, 3, 4, 5)), 1.5)
    with pytest.warns(UserWarning, match="assuming that channel-wise 1D dropout"):
        F.dropout2d(T(floats(2, 3, 4)))
    with pytest.warns(UserWarning, match="dropout3d: Received a 3-D input"):
        F.dropout3d(T(floats(2, 3, 4)))


@pytest.mark.parametrize("feature", [False, True])
def test_alpha_dropout_keeps_selu_statistics(feature: bool) -> None:
    p, alpha = 0.2, 1.7580993408473766
    a = 1 / math.sqrt((alpha ** 2 * p + 1) * (1 - p))
    x = floats(400, 100, 2)
    fn = F.feature_alpha_dropout if feature else F.alpha_dropout
    braze.manual_seed(5)
    y = fn(T(x), p, training=True).numpy().astype(np.float64)
    kept = np.isclose(y, a * x + alpha * a * p, rtol=1e-5, atol=1e-6)
    dropped = np.isclose(y, alpha * a * (p - 1), rtol=1e-6)
    assert (kept | dropped).all()
    if feature:
        assert (kept.all(axis=2) | dropped.all(axis=2)).all()
    n = 400 * 100 if feature else x.size
    assert abs(dropped.mean() - p) < _four_sigma(n, p)
    assert abs(y.mean()) < 0.05 and abs(y.var() - 1) < 0.05  # unit normal in, unit normal out (within 0.05)
    np.testing.assert_array_equal(fn(T(x), p).numpy(), x)  # training defaults to False, as torch
    assert (fn(T(x), 1.0, training=True).numpy() == 0).all()


@pytest.mark.parametrize("layer,shape", [(nn.Dropout1d(0.4), (4, 8, 5)), (nn.Dropout2d(0.4), (4, 8, 4, 5)),
                                         (nn.Dropout3d(0.4), (4, 8, 2, 3, 4)), (nn.AlphaDropout(0.4), (8, 8)),
                                         (nn.FeatureAlphaDropout(0.4), (4, 8, 3))])
def test_dropout_layers_train_then_compile_eval_to_the_identity(layer: nn.Module, shape: tuple[int, ...]) -> None:
    x = floats(*shape)
    braze.manual_seed(1)
    assert not np.array_equal(layer.train()(T(x)).numpy(), x)
    np.testing.assert_array_equal(layer.eval()(T(x)).numpy(), x)
    np.testing.assert_array_equal(braze.compile(layer, x)(x), x)
    np.testing.assert_array_equal(braze.compile(layer.train(), x, mode="eval")(x), x)


def test_traced_channel_dropout_keeps_the_flag_and_one_mask() -> None:
    layer = nn.Dropout2d(0.5)
    x = RNG.uniform(0.5, 1.5, (8, 16, 2, 2)).astype(np.float32)
    graph = braze.trace(layer, x)
    assert {"dropout", "flag"} <= {n.op for n in graph.nodes}
    (y,) = ir.interpret(graph, [x])
    channels = (y / x).reshape(8 * 16, -1)
    assert ((channels == 0) | np.isclose(channels, 2.0)).all() and (channels == channels[:, :1]).all()
    np.testing.assert_array_equal(ir.interpret(graph, [x], flags={"training": False})[0], x)


# --- compiled graphs -----------------------------------------------------------------------------------------


class Embedder(nn.Module):
    """Every new activation, a similarity to prototypes and a distance between two encodings."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.acts = nn.Sequential(nn.SELU(), nn.CELU(0.8), nn.Softshrink(0.1), nn.Hardshrink(0.05),
                                  nn.Threshold(-0.5, -0.25), nn.RReLU())
        self.prototypes = nn.Parameter(braze.randn(3, 8))
        self.cos, self.dist = nn.CosineSimilarity(dim=-1), nn.PairwiseDistance(p=1.5)
        self.drop = nn.Dropout1d(0.5)

    def forward(self, x: Any, y: Any) -> Any:
        h = self.acts(self.fc(x))
        h = F.logsigmoid(h) + F.softsign(h) + F.tanhshrink(h) + F.softmin(h, dim=-1)
        g = self.drop(self.fc(y).unsqueeze(-1)).squeeze(-1)
        sims = self.cos(h.unsqueeze(1), self.prototypes.unsqueeze(0))
        return sims * self.dist(h, g).unsqueeze(1) + F.cosine_similarity(h, g).unsqueeze(1)


def test_compiled_activations_and_distances_equal_eager() -> None:
    model = Embedder().eval()
    x, y = floats(5, 6), floats(5, 6)
    with braze.no_grad():
        want = model(T(x), T(y)).numpy()
    np.testing.assert_allclose(braze.compile(model, x, y)(x, y), want, rtol=1e-5, atol=1e-6)


class Scored(nn.Module):
    """A linear head whose outputs feed a loss with the given extra inputs."""

    def __init__(self, loss: Callable[..., Any]) -> None:
        super().__init__()
        self.head = nn.Linear(6, 5)
        self.loss = loss

    def forward(self, x: Any, *rest: Any) -> Any:
        return self.loss(self.head(x), *rest)


COMPILED_LOSSES = [
    ("margin_ranking", lambda s, t: nn.MarginRankingLoss(0.2)(s[:, 0], s[:, 1], t), [signs(4)]),
    ("hinge_soft_margin", lambda s, t: nn.HingeEmbeddingLoss()(s, t) + nn.SoftMarginLoss()(s, t), [signs(4, 5)]),
    ("cosine_embedding", lambda s, o, t: nn.CosineEmbeddingLoss(0.1)(s, o, t), [floats(4, 5), signs(4)]),
    ("triplet", lambda s, o, n: nn.TripletMarginLoss(swap=True)(s, o, n), [floats(4, 5), floats(4, 5)]),
    ("poisson_gaussian", lambda s, t, v: nn.PoissonNLLLoss(full=True)(s, t) + nn.GaussianNLLLoss()(s, t, v),
     [RNG.poisson(2.0, (4, 5)).astype(np.float32), _unit(4, 5)]),
    ("multilabel_multi_margin", lambda s, t, c: nn.MultiLabelSoftMarginLoss(weight=T(WEIGHT))(s, t)
     + nn.MultiMarginLoss(p=2, weight=T(WEIGHT), reduction="sum")(s, c),
     [(RNG.random((4, 5)) < 0.5).astype(np.float32), RNG.integers(0, 5, 4)]),
]


@pytest.mark.parametrize("loss,rest", [c[1:] for c in COMPILED_LOSSES], ids=[c[0] for c in COMPILED_LOSSES])
def test_compiled_loss_graph_equals_eager(loss: Callable[..., Any], rest: list[np.ndarray]) -> None:
    model = Scored(loss).eval()
    x = floats(4, 6)
    with braze.no_grad():
        want = model(T(x), *map(T, rest)).numpy()
    np.testing.assert_allclose(braze.compile(model, x, *rest)(x, *rest), want, rtol=1e-5, atol=1e-6)
