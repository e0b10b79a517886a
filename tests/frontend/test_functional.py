"""braze.nn.functional: each function's eager result matches an independent numpy computation."""
from __future__ import annotations

import math

import numpy as np
import pytest

import braze
import braze.nn.functional as F
from braze.nn import functional as F_from

RNG = np.random.default_rng(0)
X4 = RNG.standard_normal((2, 3, 5, 5))
T = braze.tensor


def _softmax(a: np.ndarray, axis: int) -> np.ndarray:
    z = np.exp(a - a.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


def _conv(x: np.ndarray, w: np.ndarray, stride: int, pad: tuple[int, int, int, int]) -> np.ndarray:
    """Naive cross-correlation; pad = (top, bottom, left, right)."""
    xp = np.pad(x, ((0, 0), (0, 0), pad[:2], pad[2:]))
    kh, kw = w.shape[2:]
    oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return out


def test_import_forms_give_one_module() -> None:
    import braze.nn
    assert F is F_from is braze.nn.functional is braze.frontend.nn.functional


def test_functional_shows_only_its_api() -> None:
    star: dict = {}
    exec("from braze.nn.functional import *", star)
    assert sorted(set(star) - {"__builtins__"}) == dir(F) == sorted(F.__all__)
    assert "np" not in dir(F) and "apply" not in dir(F) and all(callable(getattr(F, n)) for n in F.__all__)


def test_linear() -> None:
    x, w, b = RNG.standard_normal((2, 3)), RNG.standard_normal((4, 3)), RNG.standard_normal(4)
    np.testing.assert_allclose(F.linear(T(x), T(w), T(b)).numpy(), x @ w.T + b)
    np.testing.assert_allclose(F.linear(T(x), T(w)).numpy(), x @ w.T)


@pytest.mark.parametrize("padding,stride,pads", [(0, 1, (0, 0, 0, 0)), (1, 2, (1, 1, 1, 1)), ((2, 0), 1, (2, 2, 0, 0)),
                                                 ("valid", 1, (0, 0, 0, 0)), ("same", 1, (0, 1, 0, 1))])
def test_conv2d(padding: object, stride: int, pads: tuple[int, int, int, int]) -> None:
    w, b = RNG.standard_normal((4, 3, 2, 2)), RNG.standard_normal(4)
    got = F.conv2d(T(X4), T(w), T(b), stride=stride, padding=padding).numpy()
    np.testing.assert_allclose(got, _conv(X4, w, stride, pads) + b[None, :, None, None], rtol=1e-12, atol=1e-12)


def test_conv2d_unbatched_input() -> None:
    w = RNG.standard_normal((4, 3, 3, 3))
    np.testing.assert_allclose(F.conv2d(T(X4[0]), T(w)).numpy(), _conv(X4[:1], w, 1, (0,) * 4)[0], atol=1e-12)


def test_conv2d_same_rejects_stride() -> None:
    with pytest.raises(ValueError, match="same"):
        F.conv2d(T(X4), T(RNG.standard_normal((4, 3, 3, 3))), stride=2, padding="same")


def test_max_and_avg_pool2d() -> None:
    windows = X4[:, :, :4, :4].reshape(2, 3, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 2, 2, 4)
    np.testing.assert_allclose(F.max_pool2d(T(X4), 2).numpy(), windows.max(-1))
    np.testing.assert_allclose(F.avg_pool2d(T(X4), (2, 2)).numpy(), windows.mean(-1))


def test_avg_pool2d_padding_counts_zeros() -> None:
    got = F.avg_pool2d(T(X4), 3, stride=2, padding=1).numpy()
    padded = np.pad(X4, ((0, 0), (0, 0), (1, 1), (1, 1)))
    assert got[0, 0, 0, 0] == pytest.approx(padded[0, 0, :3, :3].sum() / 9)


def test_adaptive_avg_pool2d() -> None:
    got = F.adaptive_avg_pool2d(T(X4), (1, None)).numpy()
    np.testing.assert_allclose(got, X4.mean(2, keepdims=True))
    np.testing.assert_allclose(F.adaptive_avg_pool2d(T(X4), 1).numpy(), X4.mean((2, 3), keepdims=True))


def test_activations() -> None:
    x = RNG.standard_normal((3, 4))
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(F.relu(T(x)).numpy(), np.maximum(x, 0))
    np.testing.assert_allclose(F.gelu(T(x)).numpy(), 0.5 * x * (1 + erf(x / math.sqrt(2))))
    tanh_gelu = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(F.gelu(T(x), approximate="tanh").numpy(), tanh_gelu)
    np.testing.assert_allclose(F.silu(T(x)).numpy(), x / (1 + np.exp(-x)))
    np.testing.assert_allclose(F.sigmoid(T(x)).numpy(), 1 / (1 + np.exp(-x)))
    np.testing.assert_allclose(F.tanh(T(x)).numpy(), np.tanh(x))
    np.testing.assert_allclose(F.softmax(T(x), dim=0).numpy(), _softmax(x, 0))
    np.testing.assert_allclose(F.log_softmax(T(x), dim=1).numpy(), np.log(_softmax(x, 1)))


def test_softmax_without_dim_warns_and_uses_legacy_dim() -> None:
    x = RNG.standard_normal((3, 4))
    with pytest.warns(UserWarning, match="implicit dim"):
        np.testing.assert_allclose(F.softmax(T(x)).numpy(), _softmax(x, 1))


def test_layer_norm() -> None:
    x, w, b = RNG.standard_normal((2, 3, 4)), RNG.standard_normal(4), RNG.standard_normal(4)
    norm = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(F.layer_norm(T(x), (4,), T(w), T(b)).numpy(), norm * w + b)
    np.testing.assert_allclose(F.layer_norm(T(x), 4).numpy(), norm)


def test_batch_norm_eval_uses_running_stats() -> None:
    x, rm, rv = X4, RNG.standard_normal(3), RNG.uniform(0.5, 2, 3)
    w, b = RNG.standard_normal(3), RNG.standard_normal(3)
    got = F.batch_norm(T(x), T(rm), T(rv), T(w), T(b), eps=1e-3).numpy()
    c = (slice(None), None, None)
    np.testing.assert_allclose(got, (x - rm[c]) / np.sqrt(rv[c] + 1e-3) * w[c] + b[c])


def test_batch_norm_training_updates_running_stats_like_torch() -> None:
    rm, rv = T(np.zeros(3)), T(np.ones(3))
    y = F.batch_norm(T(X4), rm, rv, training=True, momentum=0.2)
    mean, var = X4.mean((0, 2, 3)), X4.var((0, 2, 3))
    n = X4.size // 3
    np.testing.assert_allclose(rm.numpy(), 0.2 * mean)
    np.testing.assert_allclose(rv.numpy(), 0.8 + 0.2 * var * n / (n - 1))
    c = (slice(None), None, None)
    np.testing.assert_allclose(y.numpy(), (X4 - mean[c]) / np.sqrt(var[c] + 1e-5))


def test_dropout_scales_kept_elements_and_repeats_with_seed() -> None:
    x = braze.ones(1000)
    braze.manual_seed(4)
    a = F.dropout(x, 0.25).numpy()
    braze.manual_seed(4)
    b = F.dropout(x, 0.25).numpy()
    assert np.array_equal(a, b) and set(np.unique(a)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.18 < (a == 0).mean() < 0.32


def test_dropout_off_is_identity() -> None:
    x = RNG.standard_normal(10)
    np.testing.assert_array_equal(F.dropout(T(x), 0.5, training=False).numpy(), x)
    np.testing.assert_array_equal(F.dropout(T(x), 0.0).numpy(), x)


def test_dropout_training_flag_can_be_a_tensor() -> None:
    x = RNG.standard_normal(10)
    np.testing.assert_array_equal(F.dropout(T(x), 0.9, training=T(False)).numpy(), x)


def test_dropout_rejects_bad_probability() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(braze.ones(2), 1.5)


def test_embedding() -> None:
    w, idx = RNG.standard_normal((5, 3)), np.array([[4, 0], [1, 1]])
    np.testing.assert_array_equal(F.embedding(T(idx), T(w)).numpy(), w[idx])


def test_one_hot() -> None:
    got = F.one_hot(T([2, 0, 1]))
    assert got.dtype == braze.int64 and got.tolist() == [[0, 0, 1], [1, 0, 0], [0, 1, 0]]
    assert F.one_hot(T([0]), num_classes=4).shape == (1, 4)


def test_pad_last_dim_first_and_cropping() -> None:
    x = RNG.standard_normal((2, 3, 4))
    np.testing.assert_array_equal(F.pad(T(x), (1, 2)).numpy(), np.pad(x, ((0, 0), (0, 0), (1, 2))))
    np.testing.assert_array_equal(F.pad(T(x), (0, 1, 2, 0), value=7.0).numpy(),
                                  np.pad(x, ((0, 0), (2, 0), (0, 1)), constant_values=7.0))
    np.testing.assert_array_equal(F.pad(T(x), (-1, 1, 0, -2)).numpy(), np.pad(x, ((0, 0), (0, 0), (0, 1)))[:, :1, 1:])


@pytest.mark.parametrize("mode,numpy_mode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
def test_pad_copying_modes_match_numpy(mode: str, numpy_mode: str) -> None:
    x = RNG.standard_normal((2, 3, 4))
    np.testing.assert_array_equal(F.pad(T(x), (2, 3, 0, 2), mode=mode).numpy(),
                                  np.pad(x, ((0, 0), (0, 2), (2, 3)), mode=numpy_mode))


def test_pad_rejects_unknown_modes_naming_the_supported_ones() -> None:
    with pytest.raises(ValueError, match="pad: mode='symmetric' is not supported; supported: 'constant', 'reflect'"):
        F.pad(braze.ones(2, 2), (1, 1), mode="symmetric")


def test_pad_reflect_rejects_padding_as_large_as_the_dim() -> None:
    with pytest.raises(ValueError, match=r"pad: mode='reflect' needs padding \(3, 0\) within \[0, 2\]"):
        F.pad(braze.ones(2, 3), (3, 0), mode="reflect")


def test_cross_entropy_class_indices() -> None:
    x, t = RNG.standard_normal((4, 3)), np.array([0, 2, 1, 2])
    logp = np.log(_softmax(x, 1))
    picked = -logp[np.arange(4), t]
    assert F.cross_entropy(T(x), T(t)).item() == pytest.approx(picked.mean())
    np.testing.assert_allclose(F.cross_entropy(T(x), T(t), reduction="none").numpy(), picked)
    assert F.cross_entropy(T(x), T(t), reduction="sum").item() == pytest.approx(picked.sum())


def test_cross_entropy_weight_and_ignore_index() -> None:
    x, t, w = RNG.standard_normal((4, 3)), np.array([0, 2, -100, 2]), np.array([1.0, 2.0, 0.5])
    logp = np.log(_softmax(x, 1))
    keep = t != -100
    per = -w[t[keep]] * logp[np.arange(4)[keep], t[keep]]
    assert F.cross_entropy(T(x), T(t), weight=T(w)).item() == pytest.approx(per.sum() / w[t[keep]].sum())


def test_cross_entropy_probability_targets() -> None:
    x, p = RNG.standard_normal((4, 3)), _softmax(RNG.standard_normal((4, 3)), 1)
    want = -(p * np.log(_softmax(x, 1))).sum(1).mean()
    assert F.cross_entropy(T(x), T(p)).item() == pytest.approx(want)


def test_cross_entropy_legacy_reduce_flags() -> None:
    x, t = RNG.standard_normal((2, 3)), T([1, 0])
    assert F.cross_entropy(T(x), t, reduce=False).shape == (2,)
    assert F.cross_entropy(T(x), t, size_average=False).item() == pytest.approx(
        F.cross_entropy(T(x), t, reduction="sum").item())


def test_mse_loss() -> None:
    x, y = RNG.standard_normal((3, 4)), RNG.standard_normal(4)
    assert F.mse_loss(T(x), T(y)).item() == pytest.approx(((x - y) ** 2).mean())
    np.testing.assert_allclose(F.mse_loss(T(x), T(y), reduction="none").numpy(), (x - y) ** 2)


def test_scaled_dot_product_attention() -> None:
    q, k, v = (RNG.standard_normal((2, 3, 4)) for _ in range(3))
    scores = q @ k.swapaxes(-1, -2) / 2.0
    np.testing.assert_allclose(F.scaled_dot_product_attention(T(q), T(k), T(v)).numpy(), _softmax(scores, -1) @ v)
    causal = np.where(np.tril(np.ones((3, 3), bool)), scores, -np.inf)
    np.testing.assert_allclose(F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=True).numpy(),
                               _softmax(causal, -1) @ v)
    mask = np.array([[True, False, True]] * 3)
    masked = np.where(mask, q @ k.swapaxes(-1, -2) * 0.1, -np.inf)
    np.testing.assert_allclose(F.scaled_dot_product_attention(T(q), T(k), T(v), T(mask), scale=0.1).numpy(),
                               _softmax(masked, -1) @ v)


def test_scaled_dot_product_attention_is_one_attention_node_when_traced() -> None:
    q, k, v = (RNG.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(3))
    graph = braze.trace(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), q, k, v)
    (node,) = [n for n in graph.nodes if n.op != "constant"]
    assert node.op == "attention" and node.attr["causal"] and node.attr["zero_masked_rows"]


def test_scaled_dot_product_attention_rows_masked_everywhere_are_zero_with_and_without_dropout() -> None:
    q, k, v = (RNG.standard_normal((2, 3, 4)) for _ in range(3))
    keep = np.array([[True, False, True], [False, False, False], [True, True, True]])
    for p in (0.0, 0.5):
        out = F.scaled_dot_product_attention(T(q), T(k), T(v), T(keep), dropout_p=p).numpy()
        assert (out[:, 1] == 0).all() and np.isfinite(out).all()


def test_scaled_dot_product_attention_grouped_query_heads() -> None:
    q, k, v = RNG.standard_normal((1, 4, 3, 2)), RNG.standard_normal((1, 2, 3, 2)), RNG.standard_normal((1, 2, 3, 2))
    got = F.scaled_dot_product_attention(T(q), T(k), T(v), enable_gqa=True).numpy()
    kk, vv = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    np.testing.assert_allclose(got, _softmax(q @ kk.swapaxes(-1, -2) / math.sqrt(2), -1) @ vv)
