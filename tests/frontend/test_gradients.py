"""Gradients of frontend compositions match central finite differences in float64 (relative error < 1e-6)."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import braze
import braze.nn.functional as F

EPS = 1e-6
RTOL = 1e-6


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def check_gradients(fn: Callable[..., braze.Tensor], *arrays: np.ndarray) -> None:
    """Compare backward's gradient of the scalar fn(*tensors) with central differences for every input."""
    tensors = [braze.tensor(a, requires_grad=True) for a in arrays]
    grads = fn(*tensors).backward()

    def value(values: list[np.ndarray]) -> float:
        with braze.no_grad():
            return fn(*(braze.tensor(v) for v in values)).item()

    for k, a in enumerate(arrays):
        numeric = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus, minus = [v.copy() for v in arrays], [v.copy() for v in arrays]
            plus[k][idx] += EPS
            minus[k][idx] -= EPS
            numeric[idx] = (value(plus) - value(minus)) / (2 * EPS)
        analytic = grads[tensors[k]].numpy()
        error = np.linalg.norm(analytic - numeric) / max(np.linalg.norm(numeric), np.linalg.norm(analytic), 1e-12)
        assert error < RTOL, f"input {k}: relative error {error:.2e}\nanalytic {analytic}\nnumeric {numeric}"


def _projection(shape: tuple[int, ...], seed: int = 7) -> braze.Tensor:
    return braze.tensor(_rng(seed).standard_normal(shape))


def _scalar(out: braze.Tensor) -> braze.Tensor:
    """A generic scalar of a tensor: a fixed random projection, so every output element matters."""
    return (out * _projection(out.shape)).sum()


def test_linear_gradient() -> None:
    r = _rng(1)
    check_gradients(lambda x, w, b: _scalar(F.linear(x, w, b)),
                    r.standard_normal((3, 4)), r.standard_normal((5, 4)), r.standard_normal(5))


def test_layer_norm_gradient() -> None:
    r = _rng(2)
    check_gradients(lambda x, w, b: _scalar(F.layer_norm(x, (4,), w, b)),
                    r.standard_normal((2, 3, 4)), r.standard_normal(4), r.standard_normal(4))


def test_layer_norm_bias_only_gradient() -> None:
    r = _rng(3)
    check_gradients(lambda x, b: _scalar(F.layer_norm(x, [2, 3], bias=b)),
                    r.standard_normal((2, 2, 3)), r.standard_normal((2, 3)))


def test_softmax_gradient() -> None:
    check_gradients(lambda x: _scalar(braze.softmax(x, -1) + F.log_softmax(x, 0)), _rng(4).standard_normal((3, 5)))


def test_mlp_cross_entropy_gradient() -> None:
    r = _rng(5)
    target = braze.tensor([0, 2, 1, 2])

    def mlp(x, w1, b1, w2, b2):
        return F.cross_entropy(F.linear(braze.tanh(F.linear(x, w1, b1)), w2, b2), target)
    check_gradients(mlp, r.standard_normal((4, 3)), r.standard_normal((6, 3)), r.standard_normal(6),
                    r.standard_normal((3, 6)), r.standard_normal(3))


def test_weighted_cross_entropy_gradient() -> None:
    r = _rng(6)
    target, weight = braze.tensor([0, 2, -100, 1]), braze.tensor(np.array([0.5, 2.0, 1.0]))
    check_gradients(lambda x: F.cross_entropy(x, target, weight=weight, label_smoothing=0.1),
                    r.standard_normal((4, 3)))


def test_elementwise_composition_gradient() -> None:
    r = _rng(7)
    check_gradients(lambda x, y: _scalar(braze.sqrt(x * x + 1) / (1 + braze.exp(-y)) - braze.log(x * x + 2) ** 1.5
                                         + braze.maximum(x, y * 3) + braze.where(x > 0, y, x).abs()),
                    r.standard_normal((3, 4)), r.standard_normal((3, 4)))


def test_reduction_and_movement_gradient() -> None:
    x = _rng(8).standard_normal((2, 3, 4))

    def fn(t):
        parts = t.permute(2, 0, 1).reshape(4, -1).split([1, 3])
        stacked = braze.stack([parts[0].expand(3, 6), parts[1]], dim=1)
        return (stacked.mean(-1).var() + braze.cat([t.max(1).values, t.amin(-1)], 1).sum()
                + t.std(dim=(0, 2)).sum() + braze.logsumexp(t, 1).sum() + t[1, ::2, [3, 0]].T.sum() * 2)
    check_gradients(fn, x)


def test_einsum_ellipsis_and_diagonal_gradient() -> None:
    r = _rng(9)
    check_gradients(lambda a, b, d: _scalar(braze.einsum("...ij,...jk->...ik", a, b)) + braze.einsum("ii", d)
                    + _scalar(braze.einsum("bii,bi->b", braze.stack([d, d * 2]), d[:2])),
                    r.standard_normal((2, 1, 2, 3)), r.standard_normal((3, 3, 2)), r.standard_normal((3, 3)))


def test_matmul_broadcast_gradient() -> None:
    r = _rng(9)
    check_gradients(lambda a, b, v: _scalar((a @ b) @ v), r.standard_normal((2, 3, 4)), r.standard_normal((4, 5)),
                    r.standard_normal(5))


def test_conv_pool_gradient() -> None:
    r = _rng(10)

    def net(x, w, b):
        y = F.conv2d(x, w, b, stride=1, padding="same")
        return _scalar(F.adaptive_avg_pool2d(F.max_pool2d(braze.relu(y) + y, 2), 1) + F.avg_pool2d(y, 3, 1, 1).mean())
    check_gradients(net, r.standard_normal((1, 2, 4, 4)), r.standard_normal((3, 2, 2, 2)), r.standard_normal(3))


def test_batch_norm_training_gradient() -> None:
    r = _rng(11)
    check_gradients(lambda x, w, b: _scalar(F.batch_norm(x, None, None, w, b, training=True)),
                    r.standard_normal((4, 3, 2)), r.standard_normal(3), r.standard_normal(3))


def test_attention_gradient() -> None:
    r = _rng(12)
    mask = braze.tensor(r.standard_normal((3, 3)))
    check_gradients(lambda q, k, v: _scalar(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                                            + F.scaled_dot_product_attention(q, k, v, is_causal=True)),
                    r.standard_normal((2, 3, 4)), r.standard_normal((2, 3, 4)), r.standard_normal((2, 3, 4)))


def test_embedding_and_gelu_gradient() -> None:
    idx = braze.tensor([[0, 2], [2, 1]])
    check_gradients(lambda w: _scalar(F.gelu(F.embedding(idx, w), approximate="tanh") + F.silu(F.embedding(idx, w))
                                      + F.gelu(F.embedding(idx, w))), _rng(13).standard_normal((3, 4)))


def test_embedding_padding_row_gets_no_gradient() -> None:
    w = braze.tensor(_rng(16).standard_normal((3, 2)), requires_grad=True)
    _scalar(F.embedding(braze.tensor([[0, 2], [2, 1]]), w, padding_idx=-2)).backward()
    assert w.grad[1].tolist() == [0.0, 0.0] and np.all(w.grad[2].numpy() != 0)


def test_pad_and_mse_gradient() -> None:
    r = _rng(14)
    check_gradients(lambda x, y: F.mse_loss(F.pad(x, (1, 0, -1, 2)), y),
                    r.standard_normal((3, 2)), r.standard_normal((4, 3)))


def test_dropout_gradient_with_fixed_seed() -> None:
    def fn(x):
        braze.manual_seed(1)
        return _scalar(F.dropout(x, 0.3))
    check_gradients(fn, _rng(15).standard_normal((4, 4)))


@pytest.mark.parametrize("dtype", [braze.float32, braze.float64])
def test_gradient_dtype_matches_leaf(dtype: braze.DType) -> None:
    x = braze.ones(3, dtype=dtype, requires_grad=True)
    (braze.exp(x) * 2.0).sum().backward()
    assert x.grad.dtype == dtype
