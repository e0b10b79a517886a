"""Behaviour of the neural-network ops beyond the per-sample rule checks: the dropout hash and mask, float32
results, tie-breaking, missing cotangents, and larger cases against torch when it is installed."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from braze import ir
from braze.ir.evaluate import evaluate, vjp_numpy
from braze.ir.ops.random import dropout_keep_mask, hash32

from .samples import conv, loss, norm, pool, random
from .samples.random import murmur3_32

NN_SAMPLES = conv.SAMPLES + pool.SAMPLES + norm.SAMPLES + loss.SAMPLES + random.SAMPLES
TRUE, FALSE = np.array(True), np.array(False)


def test_reference_murmur3_matches_published_vectors() -> None:
    assert murmur3_32(b"", 0) == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog", 0) == 0x2E4FF723


@pytest.mark.parametrize("seed", [0, 1, 42, -1, 2 ** 40 + 7, -(2 ** 63)])
def test_hash32_is_murmur3_of_seed_words_and_index(seed: int) -> None:
    index = np.array([0, 1, 2, 1000, 2 ** 31, 2 ** 32 - 1])
    bits = seed & (2 ** 64 - 1)
    want = [murmur3_32(struct.pack("<III", bits & 0xFFFFFFFF, bits >> 32, int(i))) for i in index]
    assert hash32(index, seed).tolist() == want


def test_hash32_known_values() -> None:
    assert hash32(np.arange(4), 42).tolist() == [3566957572, 2947407966, 620048514, 2408995135]


def test_hash32_index_wraps_modulo_2_pow_32() -> None:
    assert hash32(np.array([2 ** 32 + 5]), 9).tolist() == hash32(np.array([5]), 9).tolist()


def test_dropout_keeps_about_one_minus_p() -> None:
    y = evaluate("dropout", [np.ones(200_000), TRUE, np.array(3)], {"p": 0.3})[0]
    assert abs(np.count_nonzero(y) / y.size - 0.7) < 0.005
    np.testing.assert_allclose(y[y != 0], 1 / 0.7)


def test_dropout_masks_of_neighbouring_seeds_are_unrelated() -> None:
    a, b = dropout_keep_mask((100_000,), 11, 0.5), dropout_keep_mask((100_000,), 12, 0.5)
    assert abs(np.mean(a == b) - 0.5) < 0.01


def test_dropout_mask_depends_only_on_seed_and_shape() -> None:
    seed = np.array(5)
    first = evaluate("dropout", [np.full((3, 4), 2.0), TRUE, seed], {"p": 0.5})[0]
    second = evaluate("dropout", [np.full((3, 4), -1.0), TRUE, seed], {"p": 0.5})[0]
    np.testing.assert_array_equal(first == 0, second == 0)
    np.testing.assert_array_equal(first != 0, dropout_keep_mask((3, 4), 5, 0.5))


def test_dropout_vjp_reuses_the_mask() -> None:
    x, g = np.ones((4, 5)), np.arange(20.0).reshape(4, 5)
    (dx, d_training, d_seed) = vjp_numpy("dropout", g, [x, TRUE, np.array(8)], {"p": 0.25})
    np.testing.assert_allclose(dx, g * dropout_keep_mask((4, 5), 8, 0.25) / 0.75)
    assert d_training is None and d_seed is None


def test_dropout_keeps_nan_of_dropped_elements() -> None:
    assert np.isnan(evaluate("dropout", [np.array([np.nan]), TRUE, np.array(0)], {"p": 1.0})[0]).all()


def test_dropout_in_eval_is_identity() -> None:
    x = np.arange(6.0)
    np.testing.assert_array_equal(evaluate("dropout", [x, FALSE, np.array(1)], {"p": 0.9})[0], x)


def _as_float32(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype == np.float64 else a


@pytest.mark.parametrize("sample", NN_SAMPLES, ids=[s.id for s in NN_SAMPLES])
def test_nn_op_reference_keeps_float32(sample) -> None:
    op = ir.get_op(sample.op)
    attrs = op.check_attrs(sample.attrs)
    arrays = [_as_float32(a) for a in sample.args]
    inferred = op.infer_types([ir.type_of(a) for a in arrays], attrs)
    for raw, t in zip(op.run(arrays, attrs), inferred, strict=True):
        assert np.asarray(raw).dtype == np.float32 == t.dtype.numpy
        assert np.asarray(raw).shape == t.shape


def test_max_pool2d_ties_route_gradient_to_first_maximum() -> None:
    x = np.ones((1, 1, 2, 4))
    attrs = {"kernel_size": (2, 2), "stride": (2, 2)}
    dx = vjp_numpy("max_pool2d", np.array([[[[3.0, 5.0]]]]), [x], attrs)[0]
    np.testing.assert_array_equal(dx, [[[[3.0, 0.0, 5.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]])


def test_batch_norm_train_vjp_accepts_missing_cotangents() -> None:
    x, w, b = norm.normal((4, 3, 2), 1), norm.normal((3,), 2), norm.normal((3,), 3)
    gy, gm = norm.normal((4, 3, 2), 4), norm.normal((3,), 5)
    zeros = np.zeros(3)
    only_y = vjp_numpy("batch_norm_train", (gy, None, None), [x, w, b])
    for got, want in zip(only_y, vjp_numpy("batch_norm_train", (gy, zeros, zeros), [x, w, b])):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    only_mean = vjp_numpy("batch_norm_train", (None, gm, None), [x, w, b])
    np.testing.assert_allclose(only_mean[0], np.broadcast_to(gm[None, :, None] / 8, x.shape))
    assert only_mean[1] is None and only_mean[2] is None


def test_cross_entropy_mean_with_every_target_ignored_is_nan() -> None:
    out = evaluate("cross_entropy", [np.zeros((2, 3)), np.array([-100, -100])])[0]
    assert np.isnan(out)


def test_conv2d_larger_case_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(0)
    x, w, b = r.standard_normal((2, 6, 11, 9)), r.standard_normal((9, 2, 3, 4)), r.standard_normal(9)
    attrs = dict(stride=(2, 3), padding=(2, 1), dilation=(1, 2), groups=3)
    y = evaluate("conv2d", [x, w, b], attrs)[0]
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.conv2d(tx, tw, tb, **attrs)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    g = r.standard_normal(y.shape)
    ty.backward(torch.tensor(g))
    for ours, theirs in zip(vjp_numpy("conv2d", g, [x, w, b], attrs), (tx, tw, tb)):
        np.testing.assert_allclose(ours, theirs.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_pooling_larger_case_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((2, 3, 13, 10))
    tx = torch.tensor(x)
    cases = [("max_pool2d", dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), dilation=(2, 1), ceil_mode=True)),
             ("avg_pool2d", dict(kernel_size=(4, 3), stride=(3, 2), padding=(2, 1), ceil_mode=True,
                                 count_include_pad=False)),
             ("adaptive_avg_pool2d", dict(output_size=(4, 7)))]
    for name, attrs in cases:
        want = getattr(torch.nn.functional, name)(tx, **attrs).numpy()
        np.testing.assert_allclose(evaluate(name, [x], attrs)[0], want, rtol=1e-12, atol=1e-12, err_msg=name)
