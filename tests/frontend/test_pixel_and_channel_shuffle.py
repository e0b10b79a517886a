"""F.pixel_unshuffle, nn.PixelUnshuffle, F.channel_shuffle and nn.ChannelShuffle against torch: values bit for bit
(leading dims, unbatched), pixel_unshuffle as pixel_shuffle's inverse, gradients (float64 to 1e-12), reprs and
argument errors, and both compiled (equal to eager)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F

torch = pytest.importorskip("torch")
tF = torch.nn.functional

R = np.random.default_rng(21)


@pytest.mark.parametrize("shape,r", [((2, 3, 4, 6), 2), ((3, 6, 9), 3), ((2, 2, 1, 4, 4), 2), ((1, 2, 3, 5), 1)],
                         ids=str)
def test_pixel_unshuffle_matches_torch_and_inverts_pixel_shuffle(shape: tuple[int, ...], r: int) -> None:
    x = R.standard_normal(shape).astype(np.float32)
    got = F.pixel_unshuffle(braze.tensor(x), r)
    np.testing.assert_array_equal(got.numpy(), tF.pixel_unshuffle(torch.tensor(x), r).numpy())
    np.testing.assert_array_equal(F.pixel_shuffle(got, r).numpy(), x)
    np.testing.assert_array_equal(nn.PixelUnshuffle(r)(braze.tensor(x)).numpy(), got.numpy())


@pytest.mark.parametrize("shape,groups", [((2, 6, 3, 4), 3), ((2, 6, 5), 2), ((1, 8, 2, 2, 2), 4), ((3, 4, 5), 1)],
                         ids=str)
def test_channel_shuffle_matches_torch(shape: tuple[int, ...], groups: int) -> None:
    x = R.standard_normal(shape).astype(np.float32)
    want = tF.channel_shuffle(torch.tensor(x), groups).numpy()
    np.testing.assert_array_equal(F.channel_shuffle(braze.tensor(x), groups).numpy(), want)
    np.testing.assert_array_equal(nn.ChannelShuffle(groups)(braze.tensor(x)).numpy(), want)


def test_gradients_match_torch() -> None:
    x, w1, w2 = R.standard_normal((2, 4, 6, 4)), R.standard_normal((2, 16, 3, 2)), R.standard_normal((2, 4, 6, 4))
    grads = []
    for lib, fns in ((torch, tF), (braze, F)):
        xs = lib.tensor(x, requires_grad=True)
        loss = (fns.pixel_unshuffle(xs, 2) * lib.tensor(w1)).sum() + \
            (fns.channel_shuffle(xs, 2) * lib.tensor(w2)).sum()
        loss.backward()
        grads.append(xs.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12, atol=1e-12)


def test_reprs_match_torch() -> None:
    assert repr(nn.PixelUnshuffle(2)) == repr(torch.nn.PixelUnshuffle(2))
    assert repr(nn.ChannelShuffle(3)) == repr(torch.nn.ChannelShuffle(3))


@pytest.mark.parametrize("call,message", [
    (lambda: F.pixel_unshuffle(braze.randn(1, 3, 5, 6), 2), r"height to be divisible .* input.size\(-2\)=5"),
    (lambda: F.pixel_unshuffle(braze.randn(1, 3, 6, 5), 2), r"width to be divisible .* input.size\(-1\)=5"),
    (lambda: F.pixel_unshuffle(braze.randn(6, 4), 2), "at least 3 dimensions"),
    (lambda: F.pixel_unshuffle(braze.randn(1, 2, 4, 4), 0), "positive downscale_factor"),
    (lambda: F.channel_shuffle(braze.randn(1, 6, 5, 6), 4), "Got 6 channels and 4 groups"),
    (lambda: F.channel_shuffle(braze.randn(6, 5), 2), "> 2 dims"),
    (lambda: F.channel_shuffle(braze.randn(1, 6, 5), 0), "must be positive"),
])
def test_bad_arguments_raise_clear_errors(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_compiled_shuffles_equal_eager() -> None:
    model = nn.Sequential(nn.PixelUnshuffle(2), nn.ChannelShuffle(4)).valid()
    x = braze.randn(2, 2, 6, 4)
    compiled = braze.compile(model, x)
    for value in (x, braze.randn(2, 2, 6, 4)):
        np.testing.assert_array_equal(compiled(value).numpy(), model(value).numpy())
