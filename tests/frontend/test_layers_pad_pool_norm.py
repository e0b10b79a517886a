"""The 1-d and 2-d padding layers, Softmax2d, UpsamplingNearest2d/Bilinear2d, AdaptiveMaxPool1d, LPPool1d/2d and
LocalResponseNorm against PyTorch through the harness of test_layers_vs_torch (float32 to 1e-5, float64 to 1e-10;
batched and unbatched forms), plus their repr, their errors, and a model of them compiled (equal to eager)."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
import braze.nn as nn  # noqa: E402
import braze.nn.functional as F  # noqa: E402
from tests.frontend.test_layers_vs_torch import Case, check_against_torch, r  # noqa: E402

RNG = np.random.default_rng(7)


def away_from_zero(*shape: int) -> np.ndarray:
    """Values in [0.3, 2]: a power average of them is positive, so every p-th root has a finite gradient."""
    return RNG.uniform(0.3, 2.0, shape)


CASES = [
    Case("zeropad1d", lambda lib: lib.nn.ZeroPad1d((1, 2)), [r(2, 3, 5)]),
    Case("zeropad1d_unbatched_1d", lambda lib: lib.nn.ZeroPad1d(2), [r(5)]),
    Case("zeropad1d_crop", lambda lib: lib.nn.ZeroPad1d((-1, 2)), [r(3, 5)]),
    Case("constantpad1d", lambda lib: lib.nn.ConstantPad1d(2, 3.5), [r(2, 3, 4)]),
    Case("constantpad1d_int_value", lambda lib: lib.nn.ConstantPad1d((0, 3), -1), [r(3, 4)]),
    Case("zeropad2d_unbatched", lambda lib: lib.nn.ZeroPad2d((0, 1, 2, 1)), [r(3, 4, 5)]),
    Case("reflectionpad1d", lambda lib: lib.nn.ReflectionPad1d(2), [r(2, 3, 5)]),
    Case("reflectionpad1d_unbatched", lambda lib: lib.nn.ReflectionPad1d((3, 1)), [r(3, 5)]),
    Case("reflectionpad2d_unbatched", lambda lib: lib.nn.ReflectionPad2d((1, 2, 0, 3)), [r(2, 4, 5)]),
    Case("replicationpad1d", lambda lib: lib.nn.ReplicationPad1d((2, 4)), [r(2, 3, 4)]),
    Case("replicationpad1d_unbatched_wider_than_input", lambda lib: lib.nn.ReplicationPad1d(3), [r(3, 2)]),
    Case("replicationpad2d_unbatched", lambda lib: lib.nn.ReplicationPad2d((1, 0, 2, 3)), [r(2, 3, 4)]),
    Case("circularpad1d", lambda lib: lib.nn.CircularPad1d((2, 1)), [r(2, 3, 4)]),
    Case("circularpad1d_unbatched_whole", lambda lib: lib.nn.CircularPad1d(4), [r(3, 4)]),
    Case("circularpad2d", lambda lib: lib.nn.CircularPad2d((1, 2, 2, 0)), [r(2, 3, 4, 5)]),
    Case("circularpad2d_unbatched", lambda lib: lib.nn.CircularPad2d(1), [r(3, 4, 5)]),
    Case("softmax2d", lambda lib: lib.nn.Softmax2d(), [r(2, 3, 4, 5)]),
    Case("softmax2d_unbatched", lambda lib: lib.nn.Softmax2d(), [r(3, 4, 5)]),
    Case("upsampling_nearest2d_scale", lambda lib: lib.nn.UpsamplingNearest2d(scale_factor=2), [r(2, 3, 3, 4)]),
    Case("upsampling_nearest2d_size", lambda lib: lib.nn.UpsamplingNearest2d(size=(5, 7)), [r(1, 2, 3, 4)]),
    Case("upsampling_bilinear2d_scale", lambda lib: lib.nn.UpsamplingBilinear2d(scale_factor=2), [r(2, 3, 3, 4)]),
    Case("upsampling_bilinear2d_size_down", lambda lib: lib.nn.UpsamplingBilinear2d(size=(5, 3)), [r(2, 2, 3, 4)]),
    Case("upsampling_bilinear2d_tuple_scale", lambda lib: lib.nn.UpsamplingBilinear2d(scale_factor=(1.5, 2.0)),
         [r(1, 2, 4, 3)]),
    Case("adaptive_maxpool1d", lambda lib: lib.nn.AdaptiveMaxPool1d(3), [r(2, 3, 7)]),
    Case("adaptive_maxpool1d_unbatched_overlapping", lambda lib: lib.nn.AdaptiveMaxPool1d(4), [r(3, 9)]),
    Case("adaptive_maxpool1d_identity", lambda lib: lib.nn.AdaptiveMaxPool1d((5,)), [r(2, 2, 5)]),
    Case("adaptive_maxpool1d_upsampling", lambda lib: lib.nn.AdaptiveMaxPool1d(6), [r(1, 2, 4)]),
    Case("lppool1d", lambda lib: lib.nn.LPPool1d(2, 3), [r(2, 3, 7)]),
    Case("lppool1d_fractional_stride_ceil", lambda lib: lib.nn.LPPool1d(1.5, 3, stride=2, ceil_mode=True),
         [away_from_zero(2, 3, 8)]),
    Case("lppool1d_unbatched", lambda lib: lib.nn.LPPool1d(3, 2, stride=1), [away_from_zero(3, 6)]),
    Case("lppool1d_inf", lambda lib: lib.nn.LPPool1d(math.inf, 3, stride=2), [r(2, 3, 7)]),
    Case("lppool2d", lambda lib: lib.nn.LPPool2d(2, (2, 3)), [r(2, 3, 6, 7)]),
    Case("lppool2d_stride_ceil", lambda lib: lib.nn.LPPool2d(2, 3, stride=2, ceil_mode=True), [r(1, 2, 7, 7)]),
    Case("lppool2d_int_norm", lambda lib: lib.nn.LPPool2d(1, 2), [away_from_zero(2, 2, 4, 6)]),
    Case("lppool2d_unbatched", lambda lib: lib.nn.LPPool2d(4, 2, stride=(1, 2)), [r(3, 4, 6)]),
    Case("lppool2d_minus_inf", lambda lib: lib.nn.LPPool2d(-math.inf, 2), [r(1, 2, 4, 4)]),
    Case("local_response_norm_3d", lambda lib: lib.nn.LocalResponseNorm(3), [r(2, 5, 4)]),
    Case("local_response_norm_4d_even", lambda lib: lib.nn.LocalResponseNorm(2, alpha=0.1, beta=0.5, k=2.0),
         [r(2, 6, 3, 4)]),
    Case("local_response_norm_5d_wide", lambda lib: lib.nn.LocalResponseNorm(6, alpha=0.5, beta=1.2),
         [r(1, 4, 2, 3, 2)]),
]

PARAMS = [pytest.param(c, bits, id=f"{c.id}-f{bits}") for c in CASES for bits in c.bits]


@pytest.mark.parametrize("case,bits", PARAMS)
def test_layer_matches_torch(case: Case, bits: int) -> None:
    check_against_torch(case, bits, train=True)


@pytest.mark.parametrize("make", [
    lambda nn: nn.ZeroPad1d(2), lambda nn: nn.ZeroPad1d((1, 3)), lambda nn: nn.ConstantPad1d(2, 3),
    lambda nn: nn.ConstantPad1d((1, 2), 0.5), lambda nn: nn.ConstantPad2d(1, 3), lambda nn: nn.ZeroPad2d((1, 2, 3, 4)),
    lambda nn: nn.ReflectionPad1d(3), lambda nn: nn.ReflectionPad2d((1, 0, 2, 1)), lambda nn: nn.ReplicationPad1d(2),
    lambda nn: nn.ReplicationPad2d(1), lambda nn: nn.CircularPad1d((2, 1)), lambda nn: nn.CircularPad2d(2),
    lambda nn: nn.Softmax2d(), lambda nn: nn.UpsamplingNearest2d(scale_factor=2),
    lambda nn: nn.UpsamplingNearest2d(size=(3, 4)), lambda nn: nn.UpsamplingBilinear2d(scale_factor=(2, 3)),
    lambda nn: nn.UpsamplingBilinear2d(size=5), lambda nn: nn.Upsample(scale_factor=1.5, mode="bilinear"),
    lambda nn: nn.AdaptiveMaxPool1d(3), lambda nn: nn.LPPool1d(2, 3), lambda nn: nn.LPPool1d(1.5, 3, 2, True),
    lambda nn: nn.LPPool2d(2, (2, 3), stride=1), lambda nn: nn.LocalResponseNorm(3),
    lambda nn: nn.LocalResponseNorm(2, alpha=0.1, beta=0.5, k=2),
])
def test_repr_matches_torch(make: Callable[[Any], Any]) -> None:
    assert repr(make(braze.nn)) == repr(make(torch.nn))


def test_attributes_match_torch() -> None:
    for name, args in (("UpsamplingBilinear2d", (None, 2)), ("UpsamplingNearest2d", ((4, 5),)),
                       ("LPPool2d", (2, 3)), ("LocalResponseNorm", (3,)), ("AdaptiveMaxPool1d", (4,)),
                       ("ZeroPad1d", (2,)), ("ConstantPad1d", ((1, 2), 0.5)), ("CircularPad2d", (1,))):
        ours, theirs = getattr(braze.nn, name)(*args), getattr(torch.nn, name)(*args)
        for attr in ("size", "scale_factor", "mode", "align_corners", "name", "norm_type", "kernel_size", "stride",
                     "ceil_mode", "alpha", "beta", "k", "output_size", "return_indices", "padding", "value"):
            if hasattr(theirs, attr):
                assert getattr(ours, attr) == getattr(theirs, attr), (name, attr)


def test_class_relations_match_torch() -> None:
    names = ["ZeroPad1d", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "ReflectionPad1d", "ReflectionPad2d",
             "ReplicationPad1d", "ReplicationPad2d", "CircularPad1d", "CircularPad2d", "Upsample",
             "UpsamplingNearest2d", "UpsamplingBilinear2d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
             "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "LPPool1d", "LPPool2d", "Softmax", "Softmax2d",
             "LocalResponseNorm"]
    for a in names:
        for b in names:
            assert issubclass(getattr(braze.nn, a), getattr(braze.nn, b)) == \
                issubclass(getattr(torch.nn, a), getattr(torch.nn, b)), (a, b)


@pytest.mark.parametrize("call,error,message", [
    (lambda: nn.ReflectionPad1d(2)(braze.randn(5)), ValueError, "expected 2D or 3D input"),
    (lambda: nn.CircularPad2d(1)(braze.randn(4, 5)), ValueError, "expected 3D or 4D input"),
    (lambda: nn.ReplicationPad1d(1)(braze.randn(1, 2, 3, 4)), ValueError, "expected 2D or 3D input"),
    (lambda: nn.ReflectionPad1d(3)(braze.randn(2, 3)), ValueError, "within"),
    (lambda: nn.ConstantPad1d((1, 2, 3), 0.0), ValueError, "2 values"),
    (lambda: nn.Softmax2d()(braze.randn(3, 4)), ValueError, "expected input to be 3D or 4D"),
    (lambda: nn.AdaptiveMaxPool1d(2, return_indices=True), ValueError, "return_indices=True is not supported"),
    (lambda: F.adaptive_max_pool1d(braze.randn(1, 2, 3, 4), 2), ValueError, "2 to 3 dimensions"),
    (lambda: F.local_response_norm(braze.randn(2, 3), 2), ValueError, "3D or higher"),
])
def test_errors(call: Callable[[], Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        call()


def test_local_response_norm_of_an_empty_input_is_the_input() -> None:
    x = braze.randn(0, 3, 4)
    assert F.local_response_norm(x, 2) is x


def test_compiled_models_match_eager() -> None:
    planes = nn.Sequential(nn.CircularPad2d(1), nn.ReplicationPad2d((1, 0, 0, 1)), nn.ReflectionPad2d(1),
                           nn.LocalResponseNorm(3, alpha=0.2), nn.Softmax2d(), nn.LPPool2d(2, 2),
                           nn.UpsamplingBilinear2d(scale_factor=2), nn.UpsamplingNearest2d(size=(9, 11)),
                           nn.ConstantPad2d((1, 0, 0, 2), 0.5), nn.ZeroPad2d(1))
    rows = nn.Sequential(nn.ReflectionPad1d(2), nn.CircularPad1d(1), nn.ZeroPad1d((1, 0)), nn.ConstantPad1d(1, 2.0),
                         nn.LPPool1d(2, 3, stride=1), nn.AdaptiveMaxPool1d(2), nn.ReplicationPad1d((3, 4)))
    for model, x in ((planes, braze.randn(2, 4, 5, 6)), (rows, braze.randn(2, 3, 7))):
        model.eval()
        compiled = braze.compile(model, x)
        for scale in (1.0, -0.5):
            np.testing.assert_allclose(compiled(x * scale).numpy(), model(x * scale).numpy(), rtol=1e-5, atol=1e-6)
