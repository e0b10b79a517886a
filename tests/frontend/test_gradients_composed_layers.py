"""Gradients of the composed layer functions (activations, norms, transposed and 1-d convolution, interpolation,
copying pads, losses, an LSTM) match central finite differences in float64 (relative error < 1e-6), torch-free."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from tests.frontend.test_gradients import _scalar, check_gradients

RNG = np.random.default_rng(11)


def away(*shape: int) -> np.ndarray:
    """Values with |x| in [0.2, 2]: no kink of leaky_relu, elu, hardswish or the pads' ties sits near them."""
    return RNG.uniform(0.2, 2.0, shape) * RNG.choice([-1.0, 1.0], shape)


def projected(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *xs: _scalar(fn(*xs))


CASES = [
    ("elu", lambda a: F.elu(a, 0.7), [away(3, 4)]),
    ("leaky_relu", lambda a: F.leaky_relu(a, 0.1), [away(3, 4)]),
    ("softplus", lambda a: F.softplus(a, beta=1.5, threshold=2.0), [away(3, 4)]),
    ("mish", F.mish, [away(3, 4)]),
    ("hardswish", F.hardswish, [away(3, 4) * 2]),
    ("glu", lambda a: F.glu(a, 0), [away(4, 3)]),
    ("prelu", F.prelu, [away(2, 3, 2), RNG.uniform(0.1, 0.5, 3)]),
    ("group_norm", lambda a, w, b: F.group_norm(a, 2, w, b), [away(2, 4, 3), away(4), away(4)]),
    ("rms_norm", lambda a, w: F.rms_norm(a, 3, w), [away(2, 3), away(3)]),
    ("normalize", F.normalize, [away(2, 3)]),
    ("conv1d", lambda a, w, b: F.conv1d(a, w, b, stride=2, padding=1), [away(1, 2, 7), away(3, 2, 3), away(3)]),
    ("conv_transpose2d", lambda a, w: F.conv_transpose2d(a, w, stride=2, padding=1, output_padding=1, groups=2),
     [away(1, 4, 2, 3), away(4, 1, 3, 2)]),
    ("interpolate_bilinear", lambda a: F.interpolate(a, scale_factor=1.5, mode="bilinear"), [away(1, 1, 3, 4)]),
    ("pad_reflect", lambda a: F.pad(a, (2, 1, 1, 0), mode="reflect"), [away(1, 3, 4)]),
    ("pad_circular", lambda a: F.pad(a, (1, 2), mode="circular"), [away(2, 3)]),
    ("smooth_l1", lambda a, b: F.smooth_l1_loss(a, b, beta=0.7), [away(3, 4), away(3, 4)]),
    ("bce_with_logits", lambda a, t: F.binary_cross_entropy_with_logits(a, t, pos_weight=braze.tensor([2.0, 0.5])),
     [away(3, 2), RNG.uniform(0.1, 0.9, (3, 2))]),
    ("kl_div", lambda a, t: F.kl_div(a, t, reduction="batchmean"), [away(3, 2), RNG.uniform(0.1, 0.9, (3, 2))]),
]


@pytest.mark.parametrize("fn,arrays", [pytest.param(fn, arrays, id=name) for name, fn, arrays in CASES])
def test_composed_gradient_matches_finite_differences(fn: Callable[..., Any], arrays: list[np.ndarray]) -> None:
    check_gradients(projected(fn), *arrays)


def test_lstm_input_gradient_matches_finite_differences() -> None:
    braze.manual_seed(0)
    lstm = nn.LSTM(2, 3, dtype=braze.float64)
    check_gradients(projected(lambda a: lstm(a)[0]), away(3, 1, 2))
