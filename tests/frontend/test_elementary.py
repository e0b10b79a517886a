"""The elementary functions (tan, atan/asin/acos, sinh/cosh, asinh/acosh/atanh, log2/log10/exp2, deg2rad/rad2deg)
agree with float64 references within stated ulp bounds over dense grids and special values, eager and compiled (on
the host's vectors and on AVX2 forced with BRAZE_CPU=haswell); log2 and exp2 are exact at powers of two; the
aliases, Tensor methods and integer dtype rules are torch's; gradients match the analytic derivatives (and torch's,
when torch is installed)."""
from __future__ import annotations

import math
from typing import Any, Callable

import llvmlite.binding as llvm
import numpy as np
import pytest

import braze
import braze.nn as nn
from braze.codegen import host_target
from braze.frontend import elementary

RNG = np.random.default_rng(7)
F32 = np.float32
HOST_FEATURES = set(llvm.get_host_cpu_features().flatten().split(","))
HAS_AVX2 = "+avx2" in HOST_FEATURES and "+fma" in HOST_FEATURES

SPECIAL = F32([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1e-30, -1e-30, 1e-45, -1e-45,
               1.1754944e-38, 3.4028235e38, -3.4028235e38, 88.0, 88.5, -88.5, 89.0, -89.0, 89.4, 89.5, 100.0, -100.0,
               4096.0, 4097.0, -4097.0, 1e10, 1e30, -1e30, 0.99999994, -0.99999994, 1.0000001, -1.0000001,
               128.0, 127.5, -149.0, -150.0, 1.5707964, 3.1415927, 180.0])


def dense(lo: float, hi: float, n: int = 4000) -> np.ndarray:
    """Evenly spaced and uniformly random float32 values in [lo, hi]."""
    return np.concatenate([np.linspace(lo, hi, n), RNG.uniform(lo, hi, n)]).astype(F32)


def log_uniform(lo: float, hi: float, n: int = 4000) -> np.ndarray:
    """float32 values of both signs with magnitudes 10^lo .. 10^hi, uniform in the exponent."""
    return (10.0 ** RNG.uniform(lo, hi, n) * RNG.choice([-1.0, 1.0], n)).astype(F32)


# Every function is checked on all these points (each grid aims at one function's hard region).
POINTS = np.concatenate([
    SPECIAL, dense(-10, 10), dense(-1e4, 1e4), log_uniform(-40, 38.5), dense(-1, 1), dense(0.99, 1.0),
    dense(-1.0, -0.99), dense(-89.4, 89.4), dense(-1e-3, 1e-3), dense(4000, 4200), dense(1, 1.001),
    dense(-150, 128), (np.arange(-20, 21) * (np.pi / 2) + RNG.uniform(-1e-3, 1e-3, 41)).astype(F32),
    np.nextafter(F32(np.pi / 2) * np.arange(1, 40, 2, dtype=F32), F32(np.inf))])

# name: (float64 reference, max error in float32 ulp). The bounds hold eager (numpy's float32 exp, log, sin and cos,
# 1.4 to 2.8 ulp, inside) and compiled (vecmath, 1 to 2 ulp inside, the same on AVX2 and AVX-512);
# the maxima measured over POINTS are in the comments.
REFERENCE: dict[str, tuple[Callable[[np.ndarray], np.ndarray], float]] = {
    "tan": (np.tan, 5.0),            # 2.4 eager, 2.9 compiled
    "atan": (np.arctan, 4.0),        # 0.5, 1.3
    "asin": (np.arcsin, 3.0),        # 2.2, 2.2
    "acos": (np.arccos, 2.0),        # 1.0, 1.0
    "sinh": (np.sinh, 4.0),          # 2.4, 1.9
    "cosh": (np.cosh, 4.0),          # 2.2, 1.3
    "asinh": (np.arcsinh, 4.0),      # 2.0, 2.3
    "acosh": (np.arccosh, 4.5),      # 2.6, 3.1
    "atanh": (np.arctanh, 4.0),      # 1.7, 2.0
    "log2": (np.log2, 4.5),          # 3.3, 2.7
    "log10": (np.log10, 5.0),        # 3.7, 1.9
    "exp2": (np.exp2, 1.0),          # 0.5, 0.5
    "deg2rad": (np.deg2rad, 1.0),    # 0.6, 0.6
    "rad2deg": (np.rad2deg, 1.0),    # 0.7, 0.7
}
NAMES = list(REFERENCE)


def reference(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return REFERENCE[name][0](x.astype(np.float64))


def ulp_errors(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in ulp of the float32 nearest to want; inf where NaN, an infinity or a zero's sign differs."""
    with np.errstate(all="ignore"):
        want32 = want.astype(F32)
        spacing = np.maximum(np.spacing(np.abs(want32)).astype(np.float64), 2.0 ** -149)
        err = np.abs(got.astype(np.float64) - want) / spacing
    nan = np.isnan(want)
    exact_needed = np.isinf(want32) | (want == 0)
    wrong = (np.isnan(got) != nan) | (exact_needed & ((got != want32) | (np.signbit(got) != np.signbit(want32))))
    return np.where(nan & np.isnan(got), 0.0, np.where(wrong, np.inf, np.where(exact_needed, 0.0, err)))


def check_ulps(name: str, x: np.ndarray, got: np.ndarray, want: np.ndarray, bound: float) -> None:
    err = ulp_errors(got, want)
    worst = int(np.argmax(err))
    assert err[worst] <= bound, (f"{name}({x.flat[worst]!r}) = {got.flat[worst]!r}, want {want.flat[worst]!r}: "
                                 f"{err[worst]:.2f} ulp > {bound}")


def all_functions(t: braze.Tensor) -> tuple[braze.Tensor, ...]:
    return tuple(getattr(braze, name)(t) for name in NAMES)


def force_cpu(name: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Compile for the host's vectors ("host"), or for AVX2 (8 lanes) forced with BRAZE_CPU=haswell."""
    if name == "host":
        monkeypatch.delenv("BRAZE_CPU", raising=False)
        return name
    if not HAS_AVX2:
        pytest.skip("needs an AVX2 host")
    monkeypatch.setenv("BRAZE_CPU", name)
    assert host_target().vector_width == 8
    return name


@pytest.fixture(params=["host", "haswell"])
def cpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    return force_cpu(request.param, monkeypatch)


def test_eager_matches_float64_reference() -> None:
    x = braze.tensor(POINTS)
    for name in NAMES:
        got = getattr(braze, name)(x)
        assert got.dtype == braze.float32
        check_ulps(name, POINTS, got.numpy(), reference(name, POINTS), REFERENCE[name][1])


def test_compiled_matches_float64_reference_and_eager(cpu: str) -> None:
    x = braze.tensor(POINTS)
    compiled = braze.compile(all_functions, x)(x)
    for name, got, eager in zip(NAMES, compiled, all_functions(x)):
        check_ulps(f"compiled ({cpu}) {name}", POINTS, got.numpy(), reference(name, POINTS), REFERENCE[name][1])
        # two results within `bound` ulp of the reference are within 2 bound ulp of each other
        check_ulps(f"compiled ({cpu}) {name} against eager", POINTS, got.numpy(), eager.numpy().astype(np.float64),
                   2 * REFERENCE[name][1])


def _powers(t: braze.Tensor, k: braze.Tensor, p: braze.Tensor) -> tuple[braze.Tensor, ...]:
    return braze.log2(t), braze.exp2(k), braze.log10(p)


def _power_args() -> tuple[braze.Tensor, ...]:
    """2^k and k for k = -149 .. 127 (subnormals included), and the float32 nearest 10^p for p = -10 .. 10."""
    k = np.arange(-149, 128)
    return (braze.tensor(np.ldexp(F32(1), k).astype(F32)), braze.tensor(k.astype(F32)),
            braze.tensor(np.array([float(f"1e{p}") for p in range(-10, 11)], F32)))


def _check_powers(log2: braze.Tensor, exp2: braze.Tensor, log10: braze.Tensor) -> None:
    k = np.arange(-149, 128)
    np.testing.assert_array_equal(log2.numpy(), k)
    np.testing.assert_array_equal(exp2.numpy(), np.ldexp(F32(1), k))
    np.testing.assert_array_equal(log10.numpy(), np.arange(-10, 11))


def test_log2_exp2_and_log10_are_exact_at_powers() -> None:
    _check_powers(*_powers(*_power_args()))


def test_compiled_log2_exp2_and_log10_are_exact_at_powers(cpu: str) -> None:
    args = _power_args()
    _check_powers(*braze.compile(_powers, *args)(*args))


def test_special_values() -> None:
    x = braze.tensor(F32([0.0, -0.0, np.inf, -np.inf, np.nan]))
    inf, nan = np.inf, np.nan
    expected = {
        "tan": [0.0, -0.0, nan, nan, nan], "atan": [0.0, -0.0, np.pi / 2, -np.pi / 2, nan],
        "asin": [0.0, -0.0, nan, nan, nan], "acos": [np.pi / 2, np.pi / 2, nan, nan, nan],
        "sinh": [0.0, -0.0, inf, -inf, nan], "cosh": [1.0, 1.0, inf, inf, nan],
        "asinh": [0.0, -0.0, inf, -inf, nan], "acosh": [nan, nan, inf, nan, nan],
        "atanh": [0.0, -0.0, nan, nan, nan], "log2": [-inf, -inf, inf, nan, nan], "log10": [-inf, -inf, inf, nan, nan],
        "exp2": [1.0, 1.0, inf, 0.0, nan], "deg2rad": [0.0, -0.0, inf, -inf, nan],
        "rad2deg": [0.0, -0.0, inf, -inf, nan]}
    for name, want in expected.items():
        got, want32 = getattr(braze, name)(x).numpy(), F32(want)
        np.testing.assert_array_equal(got, want32, err_msg=name)
        assert (np.signbit(got) == np.signbit(want32))[~np.isnan(want32)].all(), name
    edges = braze.tensor(F32([1.0, -1.0, 1.0000001, -1.0000001]))
    np.testing.assert_array_equal(braze.atanh(edges).numpy(), F32([inf, -inf, nan, nan]))
    np.testing.assert_array_equal(braze.asin(edges).numpy(), F32([np.pi / 2, -np.pi / 2, nan, nan]))
    np.testing.assert_array_equal(braze.acos(edges).numpy(), F32([0.0, np.pi, nan, nan]))
    np.testing.assert_array_equal(braze.acosh(edges).numpy(), F32([0.0, nan, 0.00048828122, nan]))


def test_hyperbolic_functions_reach_the_float32_limit() -> None:
    """sinh and cosh are finite while e^|x| / 2 is (up to 89.41) and inf beyond; no NaN for any finite x."""
    x = F32([88.7, 89.0, 89.41, 89.42, 100.0, 1e30])
    with np.errstate(over="ignore"):
        want = np.cosh(x.astype(np.float64)).astype(F32)
    assert np.isfinite(want[:3]).all() and np.isinf(want[3:]).all()
    for sign in (1, -1):
        t = braze.tensor(sign * x)
        np.testing.assert_allclose(braze.sinh(t).numpy(), sign * want, rtol=4e-7)
        np.testing.assert_allclose(braze.cosh(t).numpy(), want, rtol=4e-7)


def test_aliases_and_tensor_methods() -> None:
    assert (braze.arctan, braze.arcsin, braze.arccos) == (braze.atan, braze.asin, braze.acos)
    assert (braze.arcsinh, braze.arccosh, braze.arctanh) == (braze.asinh, braze.acosh, braze.atanh)
    assert set(elementary.TENSOR_METHODS) == set(elementary.__all__)
    x = braze.tensor(F32([0.25, -0.5, 0.75]))
    for name in elementary.__all__:
        np.testing.assert_array_equal(getattr(x, name)().numpy(), getattr(braze, name)(x).numpy(), err_msg=name)
    np.testing.assert_allclose(x.arctanh().numpy(), np.arctanh(x.numpy()), rtol=4e-7)


@pytest.mark.parametrize("values", [np.array([1, 2, 3, 5]), np.array([True, False, True, True])])
def test_integer_and_bool_inputs_compute_in_float32(values: np.ndarray) -> None:
    for name in NAMES:
        got = getattr(braze, name)(braze.tensor(values))
        assert got.dtype == braze.float32, name
        np.testing.assert_array_equal(got.numpy(), getattr(braze, name)(braze.tensor(values.astype(F32))).numpy())


def test_float64_inputs_stay_float64() -> None:
    x = np.concatenate([RNG.uniform(-3, 3, 500), 10.0 ** RNG.uniform(-20, 300, 200), RNG.uniform(-700, 700, 200),
                        [0.0, -0.0, 1e300, -1e300, 710.0, -710.0, 2.0 ** 28 + 1, 1 - 2.0 ** -53]])
    t = braze.tensor(x)
    for name in NAMES:
        got, want = getattr(braze, name)(t).numpy(), reference(name, x)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=4e-15, atol=0, err_msg=name)


# name: (interior points, derivative); the points include 0 for the odd functions (derivative 1 there) and the far
# branches (|x| > 88 for sinh and cosh, x > 2^28 in float64 for asinh and acosh).
DERIVATIVES: dict[str, tuple[list[float], Callable[[np.ndarray], np.ndarray]]] = {
    "tan": ([-1.2, -0.3, 0.0, 0.7, 4.0], lambda x: 1 / np.cos(x) ** 2),
    "atan": ([-30.0, -0.4, 0.0, 1.5, 1e3], lambda x: 1 / (1 + x * x)),
    "asin": ([-0.9, -0.2, 0.0, 0.5, 0.99], lambda x: 1 / np.sqrt(1 - x * x)),
    "acos": ([-0.9, -0.2, 0.0, 0.5, 0.99], lambda x: -1 / np.sqrt(1 - x * x)),
    "sinh": ([-700.0, -3.0, -0.5, 0.0, 1e-3, 0.9, 1.1, 20.0, 709.5], np.cosh),
    "cosh": ([-709.5, -3.0, -0.5, 1e-3, 0.9, 1.1, 20.0, 700.0], np.sinh),
    "asinh": ([-1e9, -50.0, -0.5, 0.0, 1e-3, 2.0, 3e8], lambda x: 1 / np.sqrt(x * x + 1)),
    "acosh": ([1.001, 1.5, 3.0, 50.0, 3e8], lambda x: 1 / np.sqrt(x * x - 1)),
    "atanh": ([-0.99, -0.4, 0.0, 1e-3, 0.6, 0.9], lambda x: 1 / (1 - x * x)),
    "log2": ([1e-3, 0.5, 1.0, 3.0, 1e5], lambda x: 1 / (x * math.log(2))),
    "log10": ([1e-3, 0.5, 1.0, 3.0, 1e5], lambda x: 1 / (x * math.log(10))),
    "exp2": ([-10.0, -0.5, 0.0, 0.5, 3.0], lambda x: np.exp2(x) * math.log(2)),
    "deg2rad": ([-90.0, 0.0, 45.0], lambda x: np.full_like(x, math.pi / 180)),
    "rad2deg": ([-1.0, 0.0, 2.0], lambda x: np.full_like(x, 180 / math.pi)),
}


@pytest.mark.parametrize("name", NAMES)
def test_gradient_matches_the_derivative(name: str) -> None:
    points, derivative = DERIVATIVES[name]
    x = braze.tensor(np.array(points), requires_grad=True)
    getattr(braze, name)(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), derivative(np.array(points)), rtol=1e-13)


def test_gradients_match_central_differences() -> None:
    x = RNG.uniform(0.2, 0.8, 6)
    h = 1e-6
    for name in NAMES:
        fn: Callable[[Any], Any] = getattr(braze, name)
        t = braze.tensor(x, requires_grad=True)
        fn(t).sum().backward()
        numeric = (fn(braze.tensor(x + h)).numpy() - fn(braze.tensor(x - h)).numpy()) / (2 * h)
        np.testing.assert_allclose(t.grad.numpy(), numeric, rtol=1e-7, err_msg=name)


class _AllFunctions(nn.Module):
    """Every function of `t = w * x` for a parameter w, summed with weights y by the loss."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(braze.ones(n))

    def forward(self, x: braze.Tensor) -> braze.Tensor:
        t = self.w * x
        return braze.stack([*all_functions(t), braze.acosh(t + 1.5)])


def weight_gradients(model: nn.Module, x: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gradient of sum(model(x) * target) with respect to model.w, from the compiled training graph and from
    eager autodiff."""
    from braze.runtime.compile_path import compile_graph
    from braze.training import grad_graph

    def loss(out: braze.Tensor, weights: braze.Tensor) -> braze.Tensor:
        return (out * weights).sum()
    compiled = compile_graph(grad_graph(model, loss, x, target), pipeline="training").run([x, target])
    loss(model(braze.tensor(x)), braze.tensor(target)).backward()
    return compiled[-1], model.w.grad.numpy()


def test_compiled_gradients_match_eager(cpu: str) -> None:
    x = RNG.uniform(0.2, 0.8, 16).astype(F32)
    compiled, eager = weight_gradients(_AllFunctions(16), x, RNG.uniform(-1, 1, (len(NAMES) + 1, 16)).astype(F32))
    np.testing.assert_allclose(compiled, eager, rtol=2e-6)


# --- against torch (skipped without it) ------------------------------------------------------------------------


def test_matches_torch_in_float32() -> None:
    """Equal NaNs and infinities (where the float64 reference rounds to one: torch's sinh and cosh overflow from
    88.7, before the float32 limit), and finite values within the bound plus torch's own error (up to 2 ulp)."""
    torch = pytest.importorskip("torch")
    for name in NAMES:
        got = getattr(braze, name)(braze.tensor(POINTS)).numpy()
        want = getattr(torch, name)(torch.tensor(POINTS)).numpy()
        with np.errstate(over="ignore"):
            infinite = np.isinf(reference(name, POINTS).astype(F32))
        assert (np.isnan(got) == np.isnan(want)).all(), name
        np.testing.assert_array_equal(got[infinite], want[infinite], err_msg=name)
        finite = np.isfinite(got) & np.isfinite(want)
        assert np.isfinite(got[~infinite & ~np.isnan(got)]).all(), name
        check_ulps(f"{name} against torch", POINTS[finite], got[finite], want[finite].astype(np.float64),
                   REFERENCE[name][1] + 2)


def test_gradients_match_torch() -> None:
    torch = pytest.importorskip("torch")
    for name in NAMES:
        points = np.array(DERIVATIVES[name][0])
        x = braze.tensor(points, requires_grad=True)
        getattr(braze, name)(x).sum().backward()
        tx = torch.tensor(points, requires_grad=True)
        getattr(torch, name)(tx).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-13, err_msg=name)
