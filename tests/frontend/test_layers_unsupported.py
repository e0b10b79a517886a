"""Unsupported argument values of the layers and functions braze adds for torch model files raise a ValueError
naming the function, the argument and the supported values; plus torch-free numeric checks of the compositions
against direct numpy formulas (float64, rtol 1e-12)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F

RNG = np.random.default_rng(3)


def x(*shape: int) -> braze.Tensor:
    return braze.tensor(RNG.standard_normal(shape))


@pytest.mark.parametrize("call,message", [
    (lambda: F.interpolate(x(1, 2, 3, 3), scale_factor=2, mode="bicubic"),
     "interpolate: mode='bicubic' is not supported; supported: 'nearest', 'linear', 'bilinear'"),
    (lambda: F.interpolate(x(1, 2, 3, 3), scale_factor=2, antialias=True),
     "interpolate: antialias=True is not supported; supported: False"),
    (lambda: F.interpolate(x(1, 2, 3), scale_factor=2, mode="bilinear"), "interpolate: mode='bilinear' expects a 4-d"),
    (lambda: F.interpolate(x(1, 2, 3, 3)), "interpolate: exactly one of size or scale_factor"),
    (lambda: nn.Upsample(scale_factor=2, mode="area"), "Upsample: mode='area' is not supported; supported:"),
    (lambda: F.l1_loss(x(2), x(2), reduction="avg"),
     "l1_loss: reduction='avg' is not supported; expected one of 'none', 'mean', 'sum'"),
    (lambda: F.kl_div(x(2), x(2), reduction="batch"), "kl_div: reduction='batch' is not supported; expected one of"),
    (lambda: F.instance_norm(x(1, 2, 3), running_mean=braze.zeros(2), running_var=braze.ones(2)),
     "instance_norm: running statistics are not supported; supported: running_mean=None"),
    (lambda: nn.InstanceNorm2d(3, track_running_stats=True),
     "InstanceNorm2d: track_running_stats=True is not supported; supported: False"),
    (lambda: nn.LSTM(3, 4, proj_size=2), "LSTM: proj_size=2 is not supported; supported: 0"),
    (lambda: nn.RNN(3, 4, nonlinearity="gelu"), "RNN: nonlinearity='gelu' is not supported; supported: 'tanh', 'relu'"),
    (lambda: nn.ConvTranspose2d(2, 2, 3)(x(1, 2, 4, 4), output_size=(9, 9)),
     "ConvTranspose2d.forward: output_size is not supported; supported: None"),
    (lambda: nn.ConvTranspose2d(2, 2, 3, padding_mode="reflect"), 'Only "zeros" padding mode is supported'),
    (lambda: F.adaptive_max_pool2d(x(1, 2, 4, 4), 2, return_indices=True),
     "adaptive_max_pool2d: return_indices=True is not supported; supported: False"),
    (lambda: F.normalize(x(2, 3), out=x(2, 3)), "normalize: out= is not supported; supported: out=None"),
    (lambda: F.pad(x(2, 3), (1, 1), mode="reflect", value=2.0), "pad: value=2.0 applies to mode='constant' only"),
    (lambda: F.group_norm(x(2, 6, 3), 4), r"group_norm: num_channels \(6\) must be divisible by num_groups \(4\)"),
    (lambda: F.glu(x(2, 5)), "glu: halving dimension must be even"),
    (lambda: F.prelu(x(2, 3, 4), braze.ones(2)), "prelu: weight has 2 slopes"),
    (lambda: F.conv_transpose2d(x(1, 2, 3, 3), x(2, 2, 3, 3), stride=2, output_padding=2),
     "conv_transpose2d: output_padding"),
])
def test_unsupported_argument_is_named(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_group_norm_matches_the_formula() -> None:
    a = RNG.standard_normal((2, 6, 3, 2))
    w, b = RNG.standard_normal(6), RNG.standard_normal(6)
    groups = a.reshape(2, 3, -1)
    normed = (groups - groups.mean(-1, keepdims=True)) / np.sqrt(groups.var(-1, keepdims=True) + 1e-5)
    want = normed.reshape(a.shape) * w[:, None, None] + b[:, None, None]
    got = F.group_norm(braze.tensor(a), 3, braze.tensor(w), braze.tensor(b)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_rms_norm_default_eps_is_the_dtype_epsilon() -> None:
    a = np.zeros((2, 4), dtype=np.float32)
    a[0, 0] = 1e-4
    got = F.rms_norm(braze.tensor(a), 4).numpy()
    want = a / np.sqrt((a * a).mean(-1, keepdims=True) + np.finfo(np.float32).eps)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_bilinear_align_corners_keeps_the_corners() -> None:
    a = RNG.standard_normal((1, 1, 3, 4))
    got = F.interpolate(braze.tensor(a), size=(5, 7), mode="bilinear", align_corners=True).numpy()
    np.testing.assert_allclose(got[0, 0, [0, 0, -1, -1], [0, -1, 0, -1]], a[0, 0, [0, 0, -1, -1], [0, -1, 0, -1]],
                               rtol=1e-12)


def test_conv_transpose2d_is_the_adjoint_of_conv2d() -> None:
    """<conv2d(u, w), v> == <u, conv_transpose2d(v, w)> for the same stride, padding, dilation and groups."""
    u, w = RNG.standard_normal((2, 4, 7, 6)), RNG.standard_normal((6, 2, 3, 2))
    geometry = dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
    y = F.conv2d(braze.tensor(u), braze.tensor(w), **geometry).numpy()
    v = RNG.standard_normal(y.shape)
    back = F.conv_transpose2d(braze.tensor(v), braze.tensor(w), output_padding=(0, 0), **geometry).numpy()
    assert back.shape == u.shape
    np.testing.assert_allclose(np.sum(y * v), np.sum(u * back), rtol=1e-12)


def test_lstm_state_dict_names_follow_torch() -> None:
    names = list(nn.LSTM(3, 4, num_layers=2, bidirectional=True).state_dict())
    assert names[:4] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    assert names[4:8] == ["weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse"]
    assert len(names) == 16 and names[-1] == "bias_hh_l1_reverse"


def test_softplus_does_not_overflow() -> None:
    got = F.softplus(braze.tensor(np.array([-800.0, 0.0, 15.0, 800.0]))).numpy()
    np.testing.assert_allclose(got, [0.0, np.log(2.0), np.log1p(np.exp(15.0)), 800.0], rtol=1e-12, atol=1e-300)


def test_encoder_clones_start_equal_with_their_own_param_ids() -> None:
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 3)
    first, second = (dict(layer.named_parameters()) for layer in list(encoder.layers)[:2])
    ids = [p.id for _, p in encoder.named_parameters()]
    assert len(set(ids)) == len(ids)
    weights = [layer["linear1.weight"] for layer in (first, second)]
    np.testing.assert_array_equal(*(w.detach().numpy() for w in weights))
    weights[0].assign(weights[0].detach().numpy() * 2.0)
    assert not np.array_equal(*(w.detach().numpy() for w in weights))
