"""The pointwise functions (reciprocal, trunc/fix, frac, lerp, addcmul, addcdiv, logit, hypot, logaddexp(2), xlogy,
clamp_min/max, sgn, sinc, copysign) agree with float64 references within stated bounds over random and special
values, eager and compiled (host vectors and AVX2 forced with BRAZE_CPU=haswell); torch's values at infinities,
NaN, zeros and domain edges; Tensor methods, scalar operands, broadcasting and integer dtype rules as torch's;
gradients match central differences and analytic values at the special points (and torch's, when installed)."""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
from braze.frontend import pointwise
from tests.frontend.test_elementary import check_ulps, force_cpu, ulp_errors, weight_gradients

RNG = np.random.default_rng(11)
F32 = np.float32
EPS = 2.0 ** -23
inf, nan = np.inf, np.nan

SPECIAL = F32([0.0, -0.0, inf, -inf, nan, 1.0, -1.0, 0.5, -0.5, 0.25, 0.75, 2.0, -2.5, 3.0, 1e-30, -1e-30, 1e-45,
               3.4028235e38, -3.4028235e38, 2e38, 1e20, -1e20, 1e-20, 88.0, -100.0, 0.99999994, 1.0000001])


def _mixed(n: int) -> np.ndarray:
    """float32 values: normal (scale 3 and 30), magnitudes 1e-40 .. 1e38 of both signs, and [0, 1]."""
    magnitudes = 10.0 ** RNG.uniform(-40, 38, n) * RNG.choice([-1.0, 1.0], n)
    return np.concatenate([RNG.standard_normal(n) * 3, RNG.standard_normal(n) * 30, magnitudes,
                           RNG.uniform(0, 1, n)]).astype(F32)


def _pairs() -> tuple[np.ndarray, np.ndarray]:
    """Operand pairs: independent random values, every pair of special values, near-equal and near-opposite pairs."""
    a, b = _mixed(3000), _mixed(3000)
    sa, sb = (F32(list(v)) for v in zip(*itertools.product(SPECIAL, SPECIAL)))
    near = RNG.standard_normal(3000).astype(F32) * 5
    close = (near * (1 + RNG.uniform(-1e-5, 1e-5, 3000))).astype(F32)
    return np.concatenate([a, sa, near, near]), np.concatenate([b, sb, close, -close])


A, B = _pairs()
X = np.concatenate([SPECIAL, _mixed(4000), RNG.uniform(-8, 8, 8000).astype(F32),
                    np.arange(-50, 51, dtype=F32), np.arange(-50, 51, dtype=F32) + F32(0.5)])
P = np.concatenate([SPECIAL, RNG.uniform(0, 1, 8000), RNG.uniform(0.2, 0.3, 4000), RNG.uniform(0.45, 0.55, 4000),
                    10.0 ** RNG.uniform(-38, 0, 4000), 1 - 10.0 ** RNG.uniform(-7.2, 0, 4000)]).astype(F32)
W = np.concatenate([RNG.uniform(-0.5, 1.5, len(A) - 6), [0.0, 1.0, 0.5, -0.5, 0.49999997, 2.0]]).astype(F32)


def _f64(*arrays: np.ndarray) -> list[np.ndarray]:
    return [a.astype(np.float64) for a in arrays]


def _xlogy64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where((x == 0) & ~np.isnan(y), 0.0, x * np.log(y))


def _sinc64(x: np.ndarray) -> np.ndarray:
    """sin(pi x) / (pi x) with sin(pi x) = (-1)^n sin(pi (x - n)), x - n exact: correct near the integers too."""
    n = np.round(x)
    return np.where(x == 0, 1.0, np.sin(np.pi * (x - n)) * (1 - 2 * np.fmod(np.abs(n), 2)) / (np.pi * x))


def _lerp64(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The exact lerp, with torch's values at infinities (from its two forms: a + w (b - a) for |w| < 1/2, else
    b - (b - a)(1 - w))."""
    return np.where(np.abs(w) < 0.5, a + w * (b - a), b - (b - a) * (1 - w))


def _logit64(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1 - p))


# name: (braze expression over (x, a, b, w, p), float64 reference over the same, ulp bound); the maxima measured
# eager and compiled (the same on AVX2 and AVX-512) are in the comments.
ULP_CASES: dict[str, tuple[Callable[..., Any], Callable[..., np.ndarray], float]] = {
    "reciprocal": (lambda x, a, b, w, p: braze.reciprocal(x), lambda x, a, b, w, p: 1 / x, 0.5),  # 0.5, 0.5
    "logit": (lambda x, a, b, w, p: braze.logit(p), lambda x, a, b, w, p: _logit64(p), 4.5),      # 3.2, 3.0
    "hypot": (lambda x, a, b, w, p: braze.hypot(a, b), lambda x, a, b, w, p: np.hypot(a, b), 0.6),  # 0.5, 0.5
    "xlogy": (lambda x, a, b, w, p: braze.xlogy(a, b), lambda x, a, b, w, p: _xlogy64(a, b), 5.0),  # 3.4, 1.6
    "sinc": (lambda x, a, b, w, p: braze.sinc(x), lambda x, a, b, w, p: _sinc64(x), 4.0),          # 2.3, 2.3
}
# name: (expression, reference, scale of the absolute error, bound in float32 eps of that scale). lerp, addcmul and
# addcdiv round after each of torch's steps; logaddexp cancels where max(a, b) is near -log1p(exp(-|a - b|)).
ABS_CASES: dict[str, tuple[Callable[..., Any], Callable[..., np.ndarray], Callable[..., np.ndarray], float]] = {
    "lerp": (lambda x, a, b, w, p: braze.lerp(a, b, w), lambda x, a, b, w, p: _lerp64(a, b, w),
             lambda x, a, b, w, p: np.abs(b - a) * (1 + np.abs(w)) + np.abs(a) + np.abs(b), 2.0),  # 0.5, 0.5
    "addcmul": (lambda x, a, b, w, p: braze.addcmul(a, b, w, value=0.3), lambda x, a, b, w, p: a + 0.3 * b * w,
                lambda x, a, b, w, p: np.abs(a) + np.abs(0.3 * b) * np.maximum(np.abs(w), 1), 2.0),  # 1.2, 1.2
    "addcdiv": (lambda x, a, b, w, p: braze.addcdiv(a, b, w, value=-2), lambda x, a, b, w, p: a - 2 * b / w,
                lambda x, a, b, w, p: np.abs(a) + np.abs(2 * b) * np.maximum(1 / np.abs(w), 1), 2.0),  # 1.0, 1.0
    "logaddexp": (lambda x, a, b, w, p: braze.logaddexp(a, b), lambda x, a, b, w, p: np.logaddexp(a, b),
                  lambda x, a, b, w, p: np.maximum(np.maximum(np.abs(a), np.abs(b)), 1), 2.0),       # 1.2, 1.1
    "logaddexp2": (lambda x, a, b, w, p: braze.logaddexp2(a, b), lambda x, a, b, w, p: np.logaddexp2(a, b),
                   lambda x, a, b, w, p: np.maximum(np.maximum(np.abs(a), np.abs(b)), 1), 3.0),      # 1.5, 1.6
}
EXACT_CASES: dict[str, tuple[Callable[..., Any], Callable[..., np.ndarray]]] = {
    "trunc": (lambda x, a, b, w, p: braze.trunc(x), lambda x, a, b, w, p: np.trunc(x)),
    "fix": (lambda x, a, b, w, p: braze.fix(x), lambda x, a, b, w, p: np.trunc(x)),
    "frac": (lambda x, a, b, w, p: braze.frac(x), lambda x, a, b, w, p: x - np.trunc(x)),
    "copysign": (lambda x, a, b, w, p: braze.copysign(a, b), lambda x, a, b, w, p: np.copysign(a, b)),
    "sgn": (lambda x, a, b, w, p: braze.sgn(x), lambda x, a, b, w, p: np.sign(x)),
    "clamp_min": (lambda x, a, b, w, p: braze.clamp_min(a, 0.5), lambda x, a, b, w, p: np.maximum(a, F32(0.5))),
    "clamp_max": (lambda x, a, b, w, p: braze.clamp_max(a, b), lambda x, a, b, w, p: np.minimum(a, b)),
}
CASE_NAMES = [*ULP_CASES, *ABS_CASES, *EXACT_CASES]
ARGS = (X, A, B, W, P)


def every_function(*args: braze.Tensor) -> tuple[braze.Tensor, ...]:
    return tuple(cases[name][0](*args) for cases in (ULP_CASES, ABS_CASES, EXACT_CASES) for name in cases)


def check_abs(name: str, got: np.ndarray, want: np.ndarray, scale: np.ndarray, bound: float) -> None:
    """|got - want| <= bound eps scale, NaN where want is NaN and the same infinities; not checked where the scale
    overflows float32 (torch's steps overflow there too: b - a in lerp, value * tensor1 in addcdiv)."""
    keep = scale < np.finfo(F32).max
    got, want, scale = got[keep], want[keep], scale[keep]
    assert (np.isnan(got) == np.isnan(want)).all(), name
    with np.errstate(over="ignore"):
        want32 = want.astype(F32)
    infinite = np.isinf(want32)
    np.testing.assert_array_equal(got[infinite], want32[infinite], err_msg=name)
    finite = ~np.isnan(want) & ~infinite
    diff = np.abs(got[finite] - want[finite])
    err = diff / (EPS * scale[finite] + 2.0 ** -149)  # the quantum of subnormals: a tiny scale rounds to it
    worst = int(np.argmax(err)) if err.size else 0
    assert not err.size or err[worst] <= bound, f"{name}: error {err[worst]:.2f} eps x scale > {bound}"


def check_all(results: tuple[braze.Tensor, ...], label: str, eager: tuple[braze.Tensor, ...] | None = None) -> None:
    """Each result within its bound of the float64 reference, or of `eager`'s within twice the bound (both within
    the bound of the reference)."""
    wide = _f64(*ARGS)
    got = dict(zip(CASE_NAMES, (r.numpy() for r in results)))
    other = None if eager is None else dict(zip(CASE_NAMES, (e.numpy().astype(np.float64) for e in eager)))
    factor = 1 if eager is None else 2
    with np.errstate(all="ignore"):
        for name, (_, ref, bound) in ULP_CASES.items():
            assert got[name].dtype == F32
            want = ref(*wide) if other is None else other[name]
            check_ulps(f"{label} {name}", ARGS[0], got[name], want, factor * bound)
        for name, (_, ref, scale, bound) in ABS_CASES.items():
            want = ref(*wide) if other is None else other[name]
            check_abs(f"{label} {name}", got[name], want, scale(*wide), factor * bound)
        for name, (_, ref) in EXACT_CASES.items():
            want = ref(*ARGS)
            exact = ~np.isnan(B) if name == "copysign" else slice(None)  # a NaN's sign bit is not read
            np.testing.assert_array_equal(got[name][exact], want[exact], err_msg=f"{label} {name}")
            if not name.startswith("clamp"):  # the sign of min(0, -0) is unspecified
                assert (np.signbit(got[name]) == np.signbit(want))[exact][~np.isnan(want[exact])].all(), name


def test_eager_matches_float64_reference() -> None:
    check_all(every_function(*(braze.tensor(a) for a in ARGS)), "eager")


@pytest.fixture(params=["host", "haswell"])
def cpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    return force_cpu(request.param, monkeypatch)


def test_compiled_matches_float64_reference_and_eager(cpu: str) -> None:
    tensors = [braze.tensor(a) for a in ARGS]
    compiled = braze.compile(every_function, *tensors)(*tensors)
    check_all(compiled, f"compiled ({cpu})")
    check_all(compiled, f"compiled ({cpu}) against eager", every_function(*tensors))


def test_special_values() -> None:
    T = braze.tensor
    np.testing.assert_array_equal(braze.xlogy(T([0.0, -0.0, 0.0, 0.0, 1.0, 2.0]), T([0.0, inf, nan, 5.0, nan, 0.0])),
                                  F32([0.0, 0.0, nan, 0.0, nan, -inf]))
    assert not np.signbit(braze.xlogy(T([-0.0]), T([3.0])).numpy()).any()
    np.testing.assert_array_equal(braze.hypot(T([inf, nan, nan, 0.0, -0.0, 3e38, 1e-45, 2e38]),
                                              T([nan, -inf, 1.0, 0.0, 0.0, 3e38, 1e-45, -2e38])),
                                  F32([inf, inf, nan, 0.0, 0.0, inf, 1e-45, 2.828427e38]))
    np.testing.assert_array_equal(braze.logaddexp(T([-inf, inf, inf, nan, -inf, 1e38]), T([-inf, inf, -inf, 1.0, 1.0,
                                                                                          1e38])),
                                  F32([-inf, inf, inf, nan, 1.0, 1e38]))
    np.testing.assert_array_equal(braze.logaddexp2(T([-inf, inf, 3.0]), T([-inf, inf, 3.0])), F32([-inf, inf, 4.0]))
    np.testing.assert_array_equal(braze.logit(T([0.0, 1.0, -0.1, 1.1, nan, 0.5])), F32([-inf, inf, nan, nan, nan, 0]))
    np.testing.assert_allclose(braze.logit(T([0.0, 0.05, 0.5, 1.0]), eps=0.1).numpy(),
                               np.log(F32([1 / 9, 1 / 9, 1, 9])), rtol=1e-6)
    np.testing.assert_array_equal(braze.sinc(T([0.0, -0.0, 1.0, -3.0, 1e7, inf, nan, 1e-30])),
                                  F32([1, 1, 0, 0, 0, nan, nan, 1]))
    signs = braze.copysign(T([1.0, 1.0, -0.0, 2.0, 2.0, nan]), T([-0.0, 0.0, 1.0, -inf, -1e-45, -1.0])).numpy()
    np.testing.assert_array_equal(signs, F32([-1.0, 1.0, 0.0, -2.0, -2.0, nan]))
    np.testing.assert_array_equal(np.signbit(signs), [True, False, False, True, True, True])
    truncated = braze.trunc(T([-0.5, 2.7, -2.7, inf, nan])).numpy()
    np.testing.assert_array_equal(truncated, F32([-0.0, 2.0, -2.0, inf, nan]))
    assert np.signbit(truncated[0])
    np.testing.assert_array_equal(braze.frac(T([-2.5, 3.25, inf, -inf, nan])), F32([-0.5, 0.25, nan, nan, nan]))
    np.testing.assert_array_equal(braze.reciprocal(T([0.0, -0.0, inf, nan])), F32([inf, -inf, 0.0, nan]))
    np.testing.assert_array_equal(braze.clamp_min(T([nan, 1.0]), 2.0), F32([nan, 2.0]))


def test_lerp_is_exact_at_weights_0_and_1() -> None:
    a, b = (braze.tensor(RNG.standard_normal(500).astype(F32) * 10.0 ** RNG.uniform(-5, 5, 500)) for _ in "ab")
    for weight, want in ((0.0, a), (1.0, b), (braze.tensor(F32([0.0])), a), (braze.tensor(F32([1.0])), b)):
        np.testing.assert_array_equal(braze.lerp(a, b, weight).numpy(), want.numpy())


def test_tensor_methods_and_argument_names() -> None:
    assert set(pointwise.TENSOR_METHODS) == set(pointwise.__all__)
    x, y, z = (braze.tensor(RNG.uniform(0.1, 0.9, (2, 3)).astype(F32)) for _ in "xyz")
    pairs = [(x.lerp(y, 0.3), braze.lerp(x, y, 0.3)), (x.lerp(end=y, weight=z), braze.lerp(input=x, end=y, weight=z)),
             (x.addcmul(y, z, value=0.5), braze.addcmul(x, tensor1=y, tensor2=z, value=0.5)),
             (x.addcdiv(y, z, value=2), braze.addcdiv(input=x, tensor1=y, tensor2=z, value=2)),
             (x.logit(eps=1e-3), braze.logit(x, 1e-3)), (x.hypot(y), braze.hypot(input=x, other=y)),
             (x.logaddexp(y), braze.logaddexp(x, other=y)), (x.logaddexp2(y), braze.logaddexp2(x, y)),
             (x.xlogy(y), braze.xlogy(x, other=y)), (x.clamp_min(0.5), braze.clamp_min(x, min=0.5)),
             (x.clamp_max(y), braze.clamp_max(x, max=y)), (x.copysign(-1.0), braze.copysign(x, other=-1.0)),
             (x.reciprocal(), braze.reciprocal(x)), (x.trunc(), x.fix()), (x.frac(), braze.frac(x)),
             (x.sgn(), braze.sgn(x)), (x.sinc(), braze.sinc(x))]
    for method, function in pairs:
        np.testing.assert_array_equal(method.numpy(), function.numpy())
    np.testing.assert_array_equal(braze.addcmul(x, y, z, value=0.5).numpy(), x.numpy() + F32(0.5) * y.numpy()
                                  * z.numpy())
    np.testing.assert_array_equal(braze.addcdiv(x, y, z).numpy(), x.numpy() + y.numpy() / z.numpy())


def test_scalar_operands_and_broadcasting() -> None:
    row, col = braze.tensor(F32([[0.5, 2.0, 3.0]])), braze.tensor(F32([[1.0], [4.0]]))
    assert braze.hypot(row, col).shape == (2, 3) and braze.logaddexp(col, row).shape == (2, 3)
    np.testing.assert_allclose(braze.hypot(row, 4.0).numpy(), np.hypot(row.numpy(), 4.0), rtol=1e-7)
    np.testing.assert_allclose(braze.xlogy(2, row).numpy(), 2 * np.log(row.numpy()), rtol=1e-6)
    np.testing.assert_allclose(braze.xlogy(row, 3).numpy(), row.numpy() * np.log(3.0), rtol=1e-6)
    np.testing.assert_allclose(braze.logaddexp(row, 0.5).numpy(), np.logaddexp(row.numpy(), 0.5), rtol=1e-6)
    np.testing.assert_array_equal(braze.copysign(row, -1).numpy(), -row.numpy())
    np.testing.assert_array_equal(braze.copysign(2.0, col).numpy(), F32([[2.0], [2.0]]))
    np.testing.assert_allclose(braze.lerp(row, col, braze.tensor(F32([0.25, 0.75, 1.0]))).numpy(),
                               row.numpy() + F32([0.25, 0.75, 1.0]) * (col.numpy() - row.numpy()), rtol=1e-6)
    assert braze.addcmul(braze.zeros(3), row, col).shape == (2, 3)
    for result in (braze.hypot(row, 1.0), braze.lerp(row, col, 0.5), braze.xlogy(row, col), braze.copysign(row, 1)):
        assert result.dtype == braze.float32
    wide = braze.tensor(np.array([1.0, 2.0]))
    assert braze.hypot(wide, row[0, :2]).dtype == braze.float64
    assert braze.lerp(wide, wide, 0.5).dtype == braze.float64


def test_integer_inputs() -> None:
    ints = braze.tensor(np.array([3, -2, 0, 7]))
    for name in ("trunc", "fix"):
        out = getattr(braze, name)(ints)
        assert out.dtype == braze.int64 and out.tolist() == [3, -2, 0, 7]
    assert braze.frac(ints).dtype == braze.int64 and braze.frac(ints).tolist() == [0, 0, 0, 0]
    assert braze.sgn(ints).dtype == braze.int64 and braze.sgn(ints).tolist() == [1, -1, 0, 1]
    assert braze.clamp_min(ints, 1).dtype == braze.int64 and braze.clamp_min(ints, 1).tolist() == [3, 1, 1, 7]
    for fn in (braze.reciprocal, braze.sinc, braze.logit):
        out = fn(ints)
        assert out.dtype == braze.float32
        np.testing.assert_array_equal(out.numpy(), fn(ints.float()).numpy())
    for fn in (braze.hypot, braze.logaddexp, braze.logaddexp2, braze.xlogy, braze.copysign):
        out = fn(ints, ints + 1)
        assert out.dtype == braze.float32
        np.testing.assert_array_equal(out.numpy(), fn(ints.float(), (ints + 1).float()).numpy())
    assert braze.lerp(ints, ints * 3, 0.5).tolist() == [6.0, -4.0, 0.0, 14.0]
    summed = braze.addcmul(ints, ints, ints, value=2)
    assert summed.dtype == braze.int64 and summed.tolist() == [21, 6, 0, 105]
    assert braze.addcmul(ints, ints, ints, value=0.5).tolist() == [3, -2, 0, 7]  # the value truncates, as torch's
    with pytest.raises(braze.BrazeError, match="addcdiv: integer division is not supported"):
        braze.addcdiv(ints, ints, ints)


def _central_difference(fn: Callable[..., Any], arrays: list[np.ndarray], i: int, h: float = 1e-6) -> np.ndarray:
    plus, minus = list(arrays), list(arrays)
    plus[i], minus[i] = arrays[i] + h, arrays[i] - h
    return (fn(*(braze.tensor(a) for a in plus)).numpy() - fn(*(braze.tensor(a) for a in minus)).numpy()) / (2 * h)


# name: (function of float64 tensors, operand arrays at interior points)
GRADIENT_CASES: dict[str, tuple[Callable[..., Any], list[np.ndarray]]] = {
    "reciprocal": (braze.reciprocal, [np.array([-3.0, -0.4, 0.7, 2.0])]),
    "trunc": (braze.trunc, [np.array([-2.3, -0.4, 0.7, 2.5])]),
    "frac": (braze.frac, [np.array([-2.3, -0.4, 0.7, 2.5])]),
    "sinc": (braze.sinc, [np.array([-2.7, -1.2, -0.3, 0.1, 0.9, 1.4, 4.6])]),
    "logit": (braze.logit, [np.array([0.01, 0.2, 0.3, 0.5, 0.8, 0.99])]),
    "logit_eps": (lambda x: braze.logit(x, eps=0.05), [np.array([0.1, 0.3, 0.6, 0.9])]),
    "hypot": (braze.hypot, [np.array([3.0, -1.0, 0.2, -5.0]), np.array([4.0, 2.5, -0.1, 1e-3])]),
    "logaddexp": (braze.logaddexp, [np.array([0.3, -2.0, 5.0, 1.0]), np.array([-0.7, 1.5, -30.0, 1.2])]),
    "logaddexp2": (braze.logaddexp2, [np.array([0.3, -2.0, 5.0, 1.0]), np.array([-0.7, 1.5, -30.0, 1.2])]),
    "xlogy": (braze.xlogy, [np.array([0.5, -1.5, 2.0, 3.0]), np.array([0.3, 2.0, 1.0, 7.0])]),
    "copysign": (braze.copysign, [np.array([0.5, -1.5, 2.0, -3.0]), np.array([0.3, 2.0, -1.0, -7.0])]),
    "lerp": (braze.lerp, [np.array([0.5, -1.5, 2.0]), np.array([0.3, 2.0, -1.0]), np.array([0.2, 0.6, 1.3])]),
    "lerp_scalar": (lambda a, b: braze.lerp(a, b, 0.7), [np.array([0.5, -1.5, 2.0]), np.array([0.3, 2.0, -1.0])]),
    "addcmul": (lambda a, b, c: braze.addcmul(a, b, c, value=0.5), [np.array([0.5, -1.5]), np.array([0.3, 2.0]),
                                                                   np.array([1.2, -0.6])]),
    "addcdiv": (lambda a, b, c: braze.addcdiv(a, b, c, value=-3), [np.array([0.5, -1.5]), np.array([0.3, 2.0]),
                                                                   np.array([1.2, -0.6])]),
    "clamp_min": (lambda x: braze.clamp_min(x, 0.1), [np.array([-0.5, 0.3, 1.0])]),
    "clamp_max": (lambda x, y: braze.clamp_max(x, y), [np.array([-0.5, 0.3, 1.0]), np.array([0.0, 0.5, 0.2])]),
}


def _grad(leaf: braze.Tensor) -> np.ndarray:
    """The leaf's gradient, zeros when nothing reached it (copysign's `other`: torch gives zeros)."""
    return np.zeros(leaf.shape) if leaf.grad is None else leaf.grad.numpy()


@pytest.mark.parametrize("name", list(GRADIENT_CASES))
def test_gradients_match_central_differences(name: str) -> None:
    fn, arrays = GRADIENT_CASES[name]
    leaves = [braze.tensor(a, requires_grad=True) for a in arrays]
    fn(*leaves).sum().backward()
    for i, leaf in enumerate(leaves):
        np.testing.assert_allclose(_grad(leaf), _central_difference(fn, arrays, i), rtol=1e-7, atol=1e-9,
                                   err_msg=f"{name} operand {i}")


def test_gradients_at_special_points() -> None:
    """sinc'(0) = 0; xlogy's gradient is 0 (not NaN) where x = 0, even at y = 0; logaddexp splits a tie in half;
    logit's with eps is 0 outside [eps, 1 - eps]; copysign's is 0 at 0, as torch's."""
    x = braze.tensor(np.array([0.0, -0.0]), requires_grad=True)
    braze.sinc(x).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0]
    x, y = braze.tensor(np.array([0.0, 0.0, 2.0]), requires_grad=True), braze.tensor(np.array([0.0, 3.0, 1.0]),
                                                                                      requires_grad=True)
    braze.xlogy(x, y).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0] and y.grad.tolist() == [0.0, 0.0, 2.0]
    a, b = braze.tensor(np.array([1.5]), requires_grad=True), braze.tensor(np.array([1.5]), requires_grad=True)
    braze.logaddexp(a, b).sum().backward()
    assert a.grad.tolist() == [0.5] and b.grad.tolist() == [0.5]
    p = braze.tensor(np.array([0.01, 0.5, 0.995]), requires_grad=True)
    braze.logit(p, eps=0.02).sum().backward()
    assert p.grad.tolist() == [0.0, 4.0, 0.0]
    s = braze.tensor(np.array([0.0, 2.0]), requires_grad=True)
    braze.copysign(s, -1.0).sum().backward()
    assert s.grad.tolist() == [0.0, -1.0]


class _AllFunctions(nn.Module):
    """The unary functions of t = w * xy[0] and the binary ones of (t, xy[1]) for a parameter w (ones), stacked."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(braze.ones(n))

    def forward(self, xy: braze.Tensor) -> braze.Tensor:
        t, y = self.w * xy[0], xy[1]
        zero = t - xy[0]  # 0 (w is 1) with a gradient: sinc and xlogy at 0
        return braze.stack([braze.reciprocal(t), braze.frac(t * 3), braze.sinc(t), braze.logit(t), braze.sinc(zero),
                            braze.xlogy(zero, y), braze.xlogy(zero, zero),
                            braze.logit(t, eps=0.3), braze.hypot(t, y), braze.logaddexp(t, y), braze.logaddexp2(y, t),
                            braze.xlogy(t, y), braze.xlogy(y, t), braze.copysign(t, y - 0.5), braze.lerp(t, y, 0.3),
                            braze.lerp(y, t, t), braze.addcmul(t, t, y, value=0.5), braze.addcdiv(y, t, y, value=2),
                            braze.clamp_min(t, 0.5), braze.clamp_max(t, y)])


def test_compiled_gradients_match_eager(cpu: str) -> None:
    xy = RNG.uniform(0.1, 0.9, (2, 24)).astype(F32)
    compiled, eager = weight_gradients(_AllFunctions(24), xy, RNG.uniform(-1, 1, (20, 24)).astype(F32))
    assert np.isfinite(eager).all()
    np.testing.assert_allclose(compiled, eager, rtol=2e-6, atol=1e-6)


# --- against torch (skipped without it) ------------------------------------------------------------------------


TORCH_CALLS: dict[str, Callable[..., Any]] = {
    "reciprocal": lambda m, x, a, b, w, p: m.reciprocal(x), "logit": lambda m, x, a, b, w, p: m.logit(p),
    "hypot": lambda m, x, a, b, w, p: m.hypot(a, b), "xlogy": lambda m, x, a, b, w, p: m.xlogy(a, b),
    "sinc": lambda m, x, a, b, w, p: m.sinc(x), "lerp": lambda m, x, a, b, w, p: m.lerp(a, b, w),
    "addcmul": lambda m, x, a, b, w, p: m.addcmul(a, b, w, value=0.3),
    "addcdiv": lambda m, x, a, b, w, p: m.addcdiv(a, b, w, value=-2),
    "logaddexp": lambda m, x, a, b, w, p: m.logaddexp(a, b), "logaddexp2": lambda m, x, a, b, w, p: m.logaddexp2(a, b),
    "trunc": lambda m, x, a, b, w, p: m.trunc(x), "fix": lambda m, x, a, b, w, p: m.fix(x),
    "frac": lambda m, x, a, b, w, p: m.frac(x), "copysign": lambda m, x, a, b, w, p: m.copysign(a, b),
    "sgn": lambda m, x, a, b, w, p: m.sgn(x), "clamp_min": lambda m, x, a, b, w, p: m.clamp_min(a, 0.5),
    "clamp_max": lambda m, x, a, b, w, p: m.clamp_max(a, b),
}
# torch's own float32 error is a few ulp, more where its forms cancel: sin(pi x) is off by about eps |pi x| (where
# braze's sinc is exactly 0 at the integers), logit near 1/2 is log(x / (1 - x)) near 0. Those two are compared with
# an absolute bound, as the functions that round after each of torch's steps; sgn(NaN) is 0 in torch (braze.sign's
# NaN, as numpy's, is kept) and its sinc of |x| > 1e38 NaN (pi x overflows), not compared.
TORCH_ULPS = {"reciprocal": 0, "hypot": 1, "xlogy": 5, "trunc": 0, "fix": 0, "frac": 0, "copysign": 0, "sgn": 0,
              "clamp_min": 0, "clamp_max": 0}
TORCH_ABS = {"logit": (lambda x, a, b, w, p: 1 + np.abs(_logit64(p)), 2.0),
             "sinc": (lambda x, a, b, w, p: np.ones_like(x), 2.0)}


def test_matches_torch_in_float32() -> None:
    torch = pytest.importorskip("torch")
    ours, theirs = [braze.tensor(a) for a in ARGS], [torch.tensor(a) for a in ARGS]
    wide = _f64(*ARGS)
    for name, call in TORCH_CALLS.items():
        got, want = call(braze, *ours).numpy(), call(torch, *theirs).numpy()
        keep = ~np.isnan(B) if name == "copysign" else np.ones(got.shape, bool)
        if name in ("sinc", "sgn"):
            keep = (np.abs(X) < 1e38) & ~np.isnan(X)
        assert (np.isnan(got) == np.isnan(want))[keep].all(), name
        if name in TORCH_ULPS:
            err = ulp_errors(got[keep], want[keep].astype(np.float64))
            assert err.max() <= TORCH_ULPS[name], f"{name}: {err.max():.2f} ulp from torch"
        else:
            scale, bound = TORCH_ABS[name] if name in TORCH_ABS else ABS_CASES[name][2:]
            with np.errstate(all="ignore"):
                check_abs(f"{name} against torch", got[keep], want[keep].astype(np.float64), scale(*wide)[keep],
                          2 * bound)


@pytest.mark.parametrize("name", list(GRADIENT_CASES))
def test_gradients_match_torch(name: str) -> None:
    torch = pytest.importorskip("torch")
    fn, arrays = GRADIENT_CASES[name]
    leaves = [braze.tensor(a, requires_grad=True) for a in arrays]
    fn(*leaves).sum().backward()
    torch_leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    source = {"logit_eps": lambda x: torch.logit(x, eps=0.05), "lerp_scalar": lambda a, b: torch.lerp(a, b, 0.7),
              "addcmul": lambda a, b, c: torch.addcmul(a, b, c, value=0.5),
              "addcdiv": lambda a, b, c: torch.addcdiv(a, b, c, value=-3),
              "clamp_min": lambda x: torch.clamp_min(x, 0.1)}.get(name) or getattr(torch, name)
    source(*torch_leaves).sum().backward()
    for leaf, torch_leaf in zip(leaves, torch_leaves):
        np.testing.assert_allclose(_grad(leaf), torch_leaf.grad.numpy(), rtol=1e-12, atol=1e-15, err_msg=name)


def test_special_values_match_torch() -> None:
    torch = pytest.importorskip("torch")
    sa, sb = (F32(list(v)) for v in zip(*itertools.product(SPECIAL, SPECIAL)))
    for name in ("hypot", "logaddexp", "logaddexp2", "xlogy", "copysign"):
        got = getattr(braze, name)(braze.tensor(sa), braze.tensor(sb)).numpy()
        want = getattr(torch, name)(torch.tensor(sa), torch.tensor(sb)).numpy()
        keep = ~np.isnan(sb) if name == "copysign" else slice(None)
        exact = ~np.isfinite(want) | (want == 0)
        np.testing.assert_array_equal(got[keep][exact[keep]], want[keep][exact[keep]], err_msg=name)
    for name in ("logit", "sinc", "trunc", "frac", "reciprocal", "sgn"):
        got = getattr(braze, name)(braze.tensor(SPECIAL)).numpy()
        want = getattr(torch, name)(torch.tensor(SPECIAL)).numpy()
        # torch's sinc of |x| > 1e38 is NaN (pi x overflows), braze's the limit 0; torch's sgn(NaN) is 0
        exact = (~np.isfinite(want) | (want == 0)) & ((name != "sinc") | (np.abs(SPECIAL) < 1e38))
        exact &= (name != "sgn") | ~np.isnan(SPECIAL)
        np.testing.assert_array_equal(got[exact], want[exact], err_msg=name)
    assert math.isinf(float(braze.hypot(braze.tensor([inf]), braze.tensor([nan]))))
