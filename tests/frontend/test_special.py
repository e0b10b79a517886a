"""The error function family (erfc, erfinv, and braze.special's ndtr, log_ndtr, erfcx) and lgamma and digamma agree
with float64 references within stated ulp bounds over dense grids, tails and special values, eager and compiled (on
the host's vectors and on AVX2); float64 inputs stay accurate; gradients match the closed forms, central differences
and torch; braze.special's other names are braze's functions and match torch.special."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
from braze.frontend import special
from tests.frontend.test_elementary import check_ulps, dense, force_cpu, log_uniform, weight_gradients

RNG = np.random.default_rng(11)
F32 = np.float32
_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)

SPECIAL = F32([0.0, -0.0, np.inf, -np.inf, np.nan, 0.5, -0.5, 1.0, -1.0, 0.49999997, 0.50000006, 1e-30, -1e-30,
               1e-45, 3.4028235e38, -3.4028235e38, 9.194, 10.0, 10.05, 10.1, 26.0, -13.0, -13.2, -14.0, 38.5, -38.5])


def erfc_reference(x: np.ndarray) -> np.ndarray:
    return _erfc(x.astype(np.float64)).astype(np.float64)


def erfinv_reference(y: np.ndarray) -> np.ndarray:
    """erfinv in float64: 64 bisection steps on [0, 6] (erf(x) < a below 1/2, erfc(x) > 1 - a above, 1 - a exact),
    then one Newton step for relative accuracy; a sqrt(pi)/2 (1 + pi a^2 / 12) below 1e-6; +-inf at +-1, NaN
    beyond."""
    y = y.astype(np.float64)
    a = np.abs(np.nan_to_num(y))
    a = np.where(a < 1, a, 0.5)
    lo, hi = np.zeros_like(a), np.full_like(a, 6.0)
    low = a < 0.5
    for _ in range(64):
        mid = (lo + hi) / 2
        below = np.where(low, _erf(mid).astype(np.float64) < a, _erfc(mid).astype(np.float64) > 1 - a)
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    x = (lo + hi) / 2
    residual = np.where(low, _erf(x).astype(np.float64) - a, (1 - a) - _erfc(x).astype(np.float64))
    x = x - residual / (2 / math.sqrt(math.pi) * np.exp(-x * x))
    x = np.where(a < 1e-6, a * math.sqrt(math.pi) / 2 * (1 + math.pi * a * a / 12), x)
    out = np.sign(y) * x
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(y) == 1, np.sign(y) * np.inf, np.where(np.abs(y) > 1, np.nan, np.where(y == 0, y, out)))


def ndtr_reference(x: np.ndarray) -> np.ndarray:
    return 0.5 * _erfc(-x.astype(np.float64) / math.sqrt(2.0)).astype(np.float64)


def log_ndtr_reference(x: np.ndarray) -> np.ndarray:
    """log(ndtr(x)) from erfc, log1p(-ndtr(-x)) above 0, and below -30 the asymptotic series (6 terms)."""
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        inv = 1 / (x * x)
        far = (-x * x / 2 - np.log(-x) - 0.5 * math.log(2 * math.pi)
               + np.log1p(inv * (-1 + inv * (3 + inv * (-15 + inv * (105 + inv * -945))))))
        near = np.where(x > 0, np.log1p(-ndtr_reference(-x)), np.log(ndtr_reference(x)))
    return np.where(x < -30, far, near)


def erfcx_reference(x: np.ndarray) -> np.ndarray:
    """e^(x^2) erfc(x) in float64, the asymptotic series beyond 25."""
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        inv = 1 / (2 * x * x)
        far = (1 + inv * (-1 + inv * (3 + inv * (-15 + inv * 105)))) / (x * math.sqrt(math.pi))
        return np.where(x > 25, far, np.exp(x * x) * erfc_reference(x))


def lgamma_reference(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.array([math.lgamma(v) if np.isfinite(v) and not (v <= 0 and v == int(v)) else
                         (math.nan if np.isnan(v) else math.inf) for v in x.astype(np.float64)])


LONG_PI = np.longdouble("3.14159265358979323846264338327950288")


def digamma_reference(x: np.ndarray) -> np.ndarray:
    """digamma in extended precision: the recurrence up past 30 and 9 terms of the asymptotic series, the reflection
    below 1/2; torch's values at the poles and infinities."""
    x = x.astype(np.float64)
    w = np.where(np.isfinite(x), x, 1.0).astype(np.longdouble)
    y = np.where(w < 0.5, 1 - w, w)
    total = np.zeros_like(y)
    while (y < 30).any():
        low = y < 30
        total = total - np.where(low, 1 / y, 0)
        y = np.where(low, y + 1, y)
    inv2 = 1 / (y * y)
    bernoulli = [np.longdouble(n) / d for n, d in ((1, 12), (-1, 120), (1, 252), (-1, 240), (1, 132),
                                                    (-691, 32760), (1, 12), (-3617, 8160), (43867, 14364))]
    series = sum(b * inv2 ** (k + 1) for k, b in enumerate(bernoulli))
    psi = np.log(y) - 1 / (2 * y) - series + total
    with np.errstate(all="ignore"):
        psi = np.where(w < 0.5, psi - LONG_PI / np.tan(LONG_PI * w), psi).astype(np.float64)
        pole = (x <= 0) & (x == np.round(x))
        psi = np.where(pole, np.where(x == 0, np.where(np.signbit(x), math.inf, -math.inf), math.nan), psi)
        return np.where(np.isinf(x), np.where(x > 0, math.inf, math.nan), np.where(np.isnan(x), math.nan, psi))


def _close_to_one(n: int) -> np.ndarray:
    """The float32 values nearest +-1 from inside."""
    k = np.arange(1, n + 1)
    near = (1 - k * 2.0 ** -24).astype(F32)
    return np.concatenate([near, -near])


GRIDS = {
    "erfc": np.concatenate([SPECIAL, dense(-10, 12), dense(0.4, 0.6), dense(8.5, 10.2), log_uniform(-40, 1)]),
    "erfinv": np.concatenate([SPECIAL, dense(-1, 1), dense(0.49, 0.51), _close_to_one(3000), log_uniform(-40, -0.01),
                              F32([1.0, -1.0, 1.0000001, 2.0])]),
    "ndtr": np.concatenate([SPECIAL, dense(-14, 9), dense(-13.6, -12.4), dense(-0.8, -0.6), log_uniform(-40, 1)]),
    "log_ndtr": np.concatenate([SPECIAL, dense(-40, 9), dense(-1e4, 40), dense(-0.8, -0.6), log_uniform(-40, 30)]),
    "erfcx": np.concatenate([F32([0.0, -0.0, np.inf, np.nan, 0.5, -9.3, -9.4]), dense(-9, 30), dense(0.4, 0.6),
                             10.0 ** RNG.uniform(-5, 30, 2000).astype(F32)]),
    "lgamma": np.concatenate([SPECIAL, dense(-30, 40), dense(0.4, 3), dense(0.999, 1.001), dense(1.999, 2.001),
                              dense(-2.6, -2.4), log_uniform(-40, 38.5), F32([-1.0, -2.0, 1.0, 2.0, 4e36])]),
    "digamma": np.concatenate([SPECIAL, dense(-30, 40), dense(0.4, 3), dense(1.46, 1.4633), dense(-2.5, -2.2),
                               log_uniform(-40, 38.5), F32([-1.0, -2.0, 1.0, 2.0])]),
}
# name: (function, float64 reference, bound in float32 ulp; the maxima measured over GRIDS, eager (numpy's float32 exp
# and log) and compiled (host and AVX2), in the comments): the error functions take exp, log and erf in float32 and
# their polynomials in float64, the gamma functions compute in float64 and round once
FUNCTIONS: dict[str, tuple[Callable[[Any], braze.Tensor], Callable[[np.ndarray], np.ndarray], float]] = {
    "erfc": (braze.erfc, erfc_reference, 3.0),                  # 2.27 eager, 1.57 compiled
    "erfinv": (braze.erfinv, erfinv_reference, 3.0),            # 1.62, 2.18
    "ndtr": (special.ndtr, ndtr_reference, 3.5),                # 2.95, 2.23
    "log_ndtr": (special.log_ndtr, log_ndtr_reference, 3.5),    # 2.61, 2.87
    "erfcx": (special.erfcx, erfcx_reference, 3.5),             # 2.86, 2.03
    "lgamma": (braze.lgamma, lgamma_reference, 1.0),            # 0.50, 0.50
    "digamma": (braze.digamma, digamma_reference, 1.0),         # 0.50, 0.50
}
NAMES = list(FUNCTIONS)


@pytest.fixture(params=["host", "haswell"])
def cpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    return force_cpu(request.param, monkeypatch)


@pytest.mark.parametrize("name", NAMES)
def test_eager_float32_matches_float64_reference(name: str) -> None:
    fn, reference, bound = FUNCTIONS[name]
    x = GRIDS[name]
    got = fn(braze.tensor(x))
    assert got.dtype == braze.float32
    check_ulps(name, x, got.numpy(), reference(x), bound)


def _all(*tensors: braze.Tensor) -> tuple[braze.Tensor, ...]:
    return tuple(FUNCTIONS[name][0](t) for name, t in zip(NAMES, tensors))


def test_compiled_float32_matches_reference_and_eager(cpu: str) -> None:
    args = [braze.tensor(GRIDS[name]) for name in NAMES]
    compiled = braze.compile(_all, *args)(*args)
    for name, got, eager in zip(NAMES, compiled, _all(*args)):
        x, (_, reference, bound) = GRIDS[name], FUNCTIONS[name]
        check_ulps(f"compiled ({cpu}) {name}", x, got.numpy(), reference(x), bound)
        check_ulps(f"compiled ({cpu}) {name} against eager", x, got.numpy(), eager.numpy().astype(np.float64),
                   2 * bound)


def test_erfc_keeps_relative_accuracy_into_the_subnormals() -> None:
    """Up to 9.19 erfc is a normal float32 within 2.5 ulp (1 - erf(x) is 0 from 3.9 on); to 10.05 a subnormal
    within its spacing, then 0."""
    x = F32([3.9, 5.0, 9.0, 9.19, 9.5, 10.0, 10.06, 11.0])
    got, want = braze.erfc(braze.tensor(x)).numpy(), erfc_reference(x)
    np.testing.assert_allclose(got[:4], want[:4], rtol=3e-7)
    assert (np.abs(got[4:6] - want[4:6]) <= 2.0 ** -149).all() and (got[4:6] > 0).all()
    np.testing.assert_array_equal(got[6:], 0.0)


def test_special_values() -> None:
    inf, nan = math.inf, math.nan
    x = braze.tensor(F32([0.0, -0.0, inf, -inf, nan]))
    expected = {"erfc": [1.0, 1.0, 0.0, 2.0, nan], "ndtr": [0.5, 0.5, 1.0, 0.0, nan],
                "log_ndtr": [math.log(0.5), math.log(0.5), -0.0, -inf, nan], "erfcx": [1.0, 1.0, 0.0, inf, nan],
                "erfinv": [0.0, -0.0, nan, nan, nan], "lgamma": [inf, inf, inf, inf, nan],
                "digamma": [-inf, inf, inf, nan, nan]}
    for name, want in expected.items():
        got, want32 = FUNCTIONS[name][0](x).numpy(), F32(want)
        np.testing.assert_array_equal(got, want32, err_msg=name)
        assert (np.signbit(got) == np.signbit(want32))[~np.isnan(want32)].all(), name
    poles = braze.tensor(F32([-1.0, -2.0, -7.0, -1e20, 1.0, 2.0]))
    np.testing.assert_array_equal(braze.lgamma(poles).numpy(), F32([inf, inf, inf, inf, 0.0, 0.0]))
    np.testing.assert_array_equal(braze.digamma(poles).numpy()[:4], F32([nan, nan, nan, nan]))
    edges = braze.erfinv(braze.tensor(F32([1.0, -1.0, 1.0000001, -1.0000001, 0.99999994])))
    np.testing.assert_array_equal(edges.numpy(), F32([inf, -inf, nan, nan, 3.832506856900711]))


# float64: (grid, relative bound) against references within 2 ulp of the exact values (math.erfc), a few more
# (erfinv's bisection), or x^2 / 2 ulp (ndtr's, from rounding x / sqrt 2: 1.5e-13 at -37); the measured maxima in
# ulp of the exact values are in the comments
FLOAT64_GRIDS = {
    "erfc": (np.concatenate([RNG.uniform(-6, 27, 4000), RNG.uniform(0.45, 0.55, 500), [0.0, 0.5, 26.5]]), 3e-15),  # 5
    "erfinv": (np.concatenate([RNG.uniform(-1, 1, 4000), 1 - 10 ** RNG.uniform(-16, -1, 1000), [1 - 2.0 ** -53]]),
               3e-15),  # 4
    "ndtr": (np.concatenate([RNG.uniform(-37, 8, 4000), RNG.uniform(-0.8, -0.6, 500)]), 2e-13),  # 5
    "log_ndtr": (np.concatenate([RNG.uniform(-1e5, 37, 2000), RNG.uniform(-40, 8, 3000)]), 2e-13),  # 6
    "lgamma": (np.concatenate([RNG.uniform(0, 40, 4000), 10 ** RNG.uniform(-300, 300, 500), [1.0, 2.0]]), 2e-14),  # 6
    "digamma": (np.concatenate([RNG.uniform(0, 40, 4000), 10 ** RNG.uniform(-300, 300, 500),
                                1.4616321449683622 + RNG.uniform(-1e-4, 1e-4, 200)]), 1e-14),  # 27
}
# the references' absolute errors, where the values near a zero make them large relative ones: math.lgamma's near 1
# and 2, the extended-precision recurrence's near digamma's root
FLOAT64_ABSOLUTE = {"lgamma": 1e-15, "digamma": 1e-17}


@pytest.mark.parametrize("name", list(FLOAT64_GRIDS))
def test_float64_inputs_stay_float64_and_accurate(name: str) -> None:
    fn, reference, _ = FUNCTIONS[name]
    x, rtol = FLOAT64_GRIDS[name]
    got = fn(braze.tensor(x)).numpy()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, reference(x), rtol=rtol, atol=FLOAT64_ABSOLUTE.get(name, 0))


def test_gamma_functions_near_the_zeros_of_the_negative_axis() -> None:
    """There the reflection's two terms cancel: lgamma and digamma are within 1e-15 absolute."""
    x = np.concatenate([RNG.uniform(-12, 0, 3000), RNG.uniform(-2.46, -2.45, 300), RNG.uniform(-3.64, -3.63, 300)])
    x = x[np.abs(x - np.round(x)) > 1e-6]
    np.testing.assert_allclose(braze.lgamma(braze.tensor(x)).numpy(), lgamma_reference(x), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(braze.digamma(braze.tensor(x)).numpy(), digamma_reference(x), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("values", [np.array([0, 1, -2, 3]), np.array([True, False, True, True])])
def test_integer_and_bool_inputs_compute_in_float32(values: np.ndarray) -> None:
    for name in NAMES:
        got = FUNCTIONS[name][0](braze.tensor(values))
        assert got.dtype == braze.float32, name
        want = FUNCTIONS[name][0](braze.tensor(values.astype(F32)))
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=name)


def test_tensor_methods_and_names() -> None:
    x = braze.tensor(F32([0.25, -0.5, 0.75]))
    np.testing.assert_array_equal(x.erfc().numpy(), braze.erfc(x).numpy())
    np.testing.assert_array_equal(x.erfinv().numpy(), braze.erfinv(x).numpy())
    assert braze.special.erfc is braze.erfc and braze.special.erfinv is braze.erfinv
    assert braze.special.expit is braze.sigmoid and braze.special.exp2 is braze.exp2
    assert braze.special.logit is braze.logit and braze.special.sinc is braze.sinc
    assert braze.special.round is braze.round and braze.special.xlogy is braze.xlogy
    assert braze.special.softmax is braze.softmax and braze.special.logsumexp is braze.logsumexp
    assert braze.special.gammaln is braze.lgamma and braze.special.digamma is braze.special.psi is braze.digamma
    np.testing.assert_array_equal(x.lgamma().numpy(), braze.lgamma(x).numpy())
    np.testing.assert_array_equal(x.digamma().numpy(), braze.digamma(x).numpy())


# --- gradients ---------------------------------------------------------------------------------------------------

# multiples of 1/64, whose squares are exact in float64
EXACT = np.arange(-320, 1700) / 64.0


def test_gradients_match_the_closed_forms() -> None:
    def grad(fn: Callable[[braze.Tensor], braze.Tensor], x: np.ndarray) -> np.ndarray:
        t = braze.tensor(x, requires_grad=True)
        fn(t).sum().backward()
        return t.grad.numpy()
    gauss = np.exp(-EXACT * EXACT / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(grad(braze.erfc, EXACT), -2 / math.sqrt(math.pi) * np.exp(-EXACT * EXACT), rtol=1e-15)
    np.testing.assert_allclose(grad(special.ndtr, EXACT), gauss, rtol=1e-15)
    moderate = EXACT[EXACT > -30 * 64]
    log_slope = np.exp(-moderate * moderate / 2) / math.sqrt(2 * math.pi) / ndtr_reference(moderate)
    np.testing.assert_allclose(grad(special.log_ndtr, moderate), log_slope, rtol=1e-13)
    g = np.concatenate([RNG.uniform(0.01, 30, 2000), RNG.uniform(-10, 0, 1000)])
    g = g[np.abs(g - np.round(g)) > 1e-3]
    np.testing.assert_allclose(grad(braze.lgamma, g), digamma_reference(g), rtol=3e-13, atol=2e-16)
    y = np.concatenate([np.linspace(-0.999, 0.999, 2001), 1 - 10 ** RNG.uniform(-15, -1, 200)])
    r = erfinv_reference(y)
    np.testing.assert_allclose(grad(braze.erfinv, y), math.sqrt(math.pi) / 2 * np.exp(r * r), rtol=1e-13)


def test_gradients_at_the_edges() -> None:
    """erfinv's gradient is 0 at +-1 (torch's is inf there) and NaN beyond; erfc's and ndtr's are 0 far out."""
    t = braze.tensor(np.array([1.0, -1.0, 0.0, 2.0]), requires_grad=True)
    braze.erfinv(t).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), [0.0, 0.0, math.sqrt(math.pi) / 2, math.nan], rtol=2e-16)
    for fn in (braze.erfc, special.ndtr):
        t = braze.tensor(np.array([-math.inf, -100.0, 100.0, math.inf]), requires_grad=True)
        fn(t).sum().backward()
        np.testing.assert_array_equal(t.grad.numpy(), 0.0)


@pytest.mark.parametrize("name", NAMES + ["entr"])
def test_gradients_match_central_differences(name: str) -> None:
    fn = special.entr if name == "entr" else FUNCTIONS[name][0]
    x = RNG.uniform(0.1, 0.9, 8) if name in ("erfinv", "entr") else RNG.uniform(-3, 3, 8)
    x = x if "gamma" not in name else np.concatenate([x, [-2.5, 0.7, 1.4616, 2.0, 9.9, 12.0]])
    h = 1e-6
    t = braze.tensor(x, requires_grad=True)
    fn(t).sum().backward()
    numeric = (fn(braze.tensor(x + h)).numpy() - fn(braze.tensor(x - h)).numpy()) / (2 * h)
    np.testing.assert_allclose(t.grad.numpy(), numeric, rtol=1e-7, atol=1e-10)


class _Special(nn.Module):
    """The error function family of w * x for a parameter w, summed with weights y by the loss."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(braze.ones(n))

    def forward(self, x: braze.Tensor) -> braze.Tensor:
        t = self.w * x
        return braze.stack([braze.erfc(t * 4), braze.erfinv(t), special.ndtr(t * 8 - 6), special.log_ndtr(t * 20 - 15),
                            special.erfcx(t * 3), braze.lgamma(t * 12 - 5.5), braze.digamma(t * 12 - 5.5)])


def test_compiled_gradients_match_eager(cpu: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.uniform(0.05, 0.95, 16).astype(F32)
    compiled, eager = weight_gradients(_Special(16), x, rng.uniform(-1, 1, (7, 16)).astype(F32))
    # each gradient sums seven terms of up to about 10 (lgamma's and digamma's), which may cancel
    np.testing.assert_allclose(compiled, eager, rtol=2e-6, atol=1e-5)


# --- the other names: entr, xlog1py and torch.special -----------------------------------------------------------


def test_entr_and_xlog1py() -> None:
    x = np.array([0.0, 0.5, 2.0, -1.0, math.inf, math.nan])
    with np.errstate(all="ignore"):
        want = np.where(x > 0, -x * np.log(x), np.where(x == 0, 0.0, np.where(np.isnan(x), math.nan, -math.inf)))
    np.testing.assert_array_equal(special.entr(braze.tensor(x)).numpy(), want)
    assert special.entr(braze.tensor([1, 2])).dtype == braze.float32
    a = np.array([0.0, 0.0, 0.0, 2.0, -1.5, 3.0])
    b = np.array([-1.0, math.inf, math.nan, 1e-20, 0.5, -1.0])
    got = special.xlog1py(braze.tensor(a), braze.tensor(b)).numpy()
    np.testing.assert_array_equal(got, [0.0, 0.0, math.nan, 2e-20, -1.5 * math.log1p(0.5), -math.inf])
    assert special.xlog1py(braze.tensor([1, 2]), 3).dtype == braze.float32


def test_matches_torch_special() -> None:
    torch = pytest.importorskip("torch")
    x = np.concatenate([RNG.uniform(-4, 4, 200), [0.0, -0.0, 1e-20, 7.0, -5.0]])
    p = np.concatenate([RNG.uniform(0, 1, 200), [0.0, 1.0, 1e-30, 0.5]])
    unary = {"expit": x, "logit": p, "erf": x, "erfc": x, "erfinv": 2 * p - 1, "expm1": x, "exp2": x, "log1p": p,
             "sinc": x, "round": x * 3, "ndtr": x, "log_ndtr": x * 5, "entr": x, "erfcx": x, "gammaln": x * 5,
             "digamma": x * 5, "psi": x}
    for dtype, rtol in ((np.float64, 1e-14), (F32, 8e-7)):
        for name, values in unary.items():
            if name == "ndtr":  # torch's float64 (1 + erf(x / sqrt 2)) / 2 cancels: 4e-11 at -5
                rtol = 1e-10 if dtype == np.float64 else 2e-6
            elif name == "log_ndtr":  # torch's scaling of x costs it x^2 / 2 ulp
                rtol = 1e-12 if dtype == np.float64 else 2e-6
            v = values.astype(dtype)
            got = getattr(braze.special, name)(braze.tensor(v)).numpy()
            want = getattr(torch.special, name)(torch.tensor(v)).numpy()
            # torch's logit near 1/2 and sinc near the integers lose a few ulp of 1
            atol = 8 * float(np.finfo(dtype).eps)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"{name} {dtype.__name__}")
    a, b = RNG.uniform(-2, 2, (3, 4)), RNG.uniform(-0.5, 3, (3, 4))
    for name in ("xlogy", "xlog1py"):
        np.testing.assert_allclose(getattr(braze.special, name)(braze.tensor(a), braze.tensor(abs(b))).numpy(),
                                   getattr(torch.special, name)(torch.tensor(a), torch.tensor(abs(b))).numpy(),
                                   rtol=1e-14)
    for name in ("logsumexp", "softmax", "log_softmax"):
        np.testing.assert_allclose(getattr(braze.special, name)(braze.tensor(a), 1).numpy(),
                                   getattr(torch.special, name)(torch.tensor(a), 1).numpy(), rtol=1e-14)


def test_gradients_match_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.array([-30.0, -6.0, -1.2, -0.3, 0.0, 0.4, 1.5, 5.0])
    inputs = {"erfc": x, "ndtr": x, "log_ndtr": x, "erfcx": x[1:], "erfinv": np.tanh(x / 5), "entr": np.abs(x) + 0.1,
              "gammaln": x + 0.5}
    for name, values in inputs.items():
        t = braze.tensor(values, requires_grad=True)
        getattr(braze.special, name)(t).sum().backward()
        tt = torch.tensor(values, requires_grad=True)
        getattr(torch.special, name)(tt).sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-12, err_msg=name)
    t, tt = braze.tensor(x + 0.5, requires_grad=True), torch.tensor(x + 0.5, requires_grad=True)
    braze.digamma(t).sum().backward()
    torch.digamma(tt).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-9)  # torch's trigamma is within 5e-10
    a, b = braze.tensor(x, requires_grad=True), braze.tensor(np.abs(x), requires_grad=True)
    special.xlog1py(a, b).sum().backward()
    ta, tb = torch.tensor(x, requires_grad=True), torch.tensor(np.abs(x), requires_grad=True)
    torch.special.xlog1py(ta, tb).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-14)
