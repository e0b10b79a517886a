"""atan2 on float32 and float64 vectors (codegen/vecmath_atan.py): within its bound (2.5 and 2 ulp) of the exact
angle over magnitudes from the subnormals to the largest floats and every quadrant, C's special values exactly
(numpy's arctan2), no libm call; on the host's vectors, scalars, SSE2 and AVX2 code. float64 against numpy's long
double."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from braze.codegen.vecmath_atan import ATAN2_ULPS, atan2
from tests.codegen.binary_loops import VARIANTS, binary_loop

DTYPES = {"f32": np.float32, "f64": np.float64}


@functools.cache
def kernel(variant: str, dtype: str = "f32"):
    """A compiled z[i] = atan2(x[i], y[i]) loop for the variant, its library and symbol."""
    return binary_loop(atan2, variant, "atan2", dtype)


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE", "0")


def _ulps(got: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    wide = np.float64 if got.dtype == np.float32 else np.longdouble
    exact = np.arctan2(y.astype(wide), x.astype(wide))
    spacing = np.spacing(np.abs(exact).astype(got.dtype)).astype(wide)
    return (np.abs(got.astype(wide) - exact) / spacing).astype(np.float64)


def _random_pairs(n: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Both operands log-uniform over the floats (subnormals included) with random signs, half of the pairs within
    a few octaves of each other (ratios near 1, where the polynomial is longest)."""
    rng = np.random.default_rng(0)
    info = np.finfo(DTYPES[dtype])
    low, high = np.log2(float(info.smallest_subnormal)), np.log2(float(info.max))
    y = np.exp2(rng.uniform(low, high, n)) * rng.choice([-1.0, 1.0], n)
    x = np.exp2(rng.uniform(low, high, n)) * rng.choice([-1.0, 1.0], n)
    near = rng.random(n) < 0.5
    with np.errstate(over="ignore"):
        x[near] = y[near] * np.exp2(rng.uniform(-4, 4, near.sum())) * rng.choice([-1.0, 1.0], near.sum())
        largest = float(info.max)
        return np.clip(y, -largest, largest).astype(DTYPES[dtype]), np.clip(x, -largest, largest).astype(DTYPES[dtype])


def _needs_long_double(dtype: str) -> None:
    if dtype == "f64" and np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("needs a long double wider than float64 as the reference")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_atan2_is_within_its_bound_of_the_exact_angle(variant, dtype):
    _needs_long_double(dtype)
    y, x = _random_pairs(1 << 18, dtype)
    run, _, _ = kernel(variant, dtype)
    error = _ulps(run(y, x), y, x)
    assert error.max() <= ATAN2_ULPS[dtype], \
        f"max error {error.max():.3f} ulp at y={y[error.argmax()]!r}, x={x[error.argmax()]!r}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_atan2_of_unit_circle_points_and_ratios_is_within_its_bound(variant, dtype):
    """Dense angles all around the circle, and t = y / x over [0, 1] (every octant's polynomial argument, and in
    float64 both sides of tan(pi/8))."""
    _needs_long_double(dtype)
    theta = np.linspace(-np.pi, np.pi, 1 << 16)
    t = np.concatenate([np.linspace(0, 1, 1 << 16), np.linspace(0.41, 0.42, 1 << 12)])
    y = np.concatenate([np.sin(theta), t, -t]).astype(DTYPES[dtype])
    x = np.concatenate([np.cos(theta), np.ones_like(t), -np.ones_like(t)]).astype(DTYPES[dtype])
    run, _, _ = kernel(variant, dtype)
    error = _ulps(run(y, x), y, x)
    assert error.max() <= ATAN2_ULPS[dtype], \
        f"max error {error.max():.3f} ulp at y={y[error.argmax()]!r}, x={x[error.argmax()]!r}"


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -3.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38,
                    1e-38, 7.0], np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_atan2_special_values_are_cs(variant, dtype):
    _needs_long_double(dtype)
    special = SPECIAL.astype(DTYPES[dtype])
    if dtype == "f64":
        special = np.concatenate([special, [5e-324, -5e-324, 1.7976931348623157e308, 2.2250738585072014e-308]])
    ys, xs = (a.ravel().copy() for a in np.meshgrid(special, special))
    run, _, _ = kernel(variant, dtype)
    got = run(ys, xs)
    want = np.arctan2(ys, xs)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    signed = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[signed]), np.signbit(want[signed]))
    exact_cases = signed & ((want == 0) | (np.abs(ys) == np.inf) | (np.abs(xs) == np.inf) | (ys == 0) | (xs == 0))
    assert np.all(np.abs(got[exact_cases] - want[exact_cases]) <= np.spacing(np.abs(want[exact_cases]))), \
        [(y, x, g, w) for y, x, g, w in zip(ys[exact_cases], xs[exact_cases], got[exact_cases], want[exact_cases])
         if abs(g - w) > np.spacing(abs(w))]
    assert _ulps(got[signed], ys[signed], xs[signed]).max() <= ATAN2_ULPS[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "scalar"])
def test_atan2_vector_code_calls_nothing(variant, dtype):
    _, library, symbol = kernel(variant, dtype)
    assert "call" not in library.asm(symbol)
