"""float32 atan2 on vectors (codegen/vecmath_atan.py): within 2.5 ulp of the exact angle over magnitudes from the
subnormals to the largest floats and every quadrant, C's special values exactly (numpy's float32 arctan2), no libm
call; on the host's vectors, scalars, SSE2 and AVX2 code."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from braze.codegen.vecmath_atan import atan2f
from tests.codegen.binary_loops import VARIANTS, binary_loop

ULPS = 2.5


@functools.cache
def kernel(variant: str):
    """A compiled z[i] = atan2(x[i], y[i]) loop for the variant, its library and symbol."""
    return binary_loop(atan2f, variant, "atan2")


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE", "0")


def _ulps(got: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    exact = np.arctan2(y.astype(np.float64), x.astype(np.float64))
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / spacing


def _random_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Both operands log-uniform over the floats (subnormals included) with random signs, half of the pairs within
    a few octaves of each other (ratios near 1, where the polynomial is longest)."""
    rng = np.random.default_rng(0)
    y = np.exp2(rng.uniform(-149, 128, n)) * rng.choice([-1.0, 1.0], n)
    x = np.exp2(rng.uniform(-149, 128, n)) * rng.choice([-1.0, 1.0], n)
    near = rng.random(n) < 0.5
    x[near] = y[near] * np.exp2(rng.uniform(-4, 4, near.sum())) * rng.choice([-1.0, 1.0], near.sum())
    largest = float(np.finfo(np.float32).max)
    return np.clip(y, -largest, largest).astype(np.float32), np.clip(x, -largest, largest).astype(np.float32)


@pytest.mark.parametrize("variant", VARIANTS)
def test_atan2f_is_within_its_bound_of_the_exact_angle(variant):
    y, x = _random_pairs(1 << 18)
    run, _, _ = kernel(variant)
    error = _ulps(run(y, x), y, x)
    assert error.max() <= ULPS, f"max error {error.max():.3f} ulp at y={y[error.argmax()]}, x={x[error.argmax()]}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_atan2f_of_unit_circle_points_and_ratios_is_within_its_bound(variant):
    """Dense angles all around the circle, and t = y / x over [0, 1] (every octant's polynomial argument)."""
    theta = np.linspace(-np.pi, np.pi, 1 << 16)
    t = np.linspace(0, 1, 1 << 16)
    y = np.concatenate([np.sin(theta), t, -t]).astype(np.float32)
    x = np.concatenate([np.cos(theta), np.ones_like(t), -np.ones_like(t)]).astype(np.float32)
    run, _, _ = kernel(variant)
    error = _ulps(run(y, x), y, x)
    assert error.max() <= ULPS, f"max error {error.max():.3f} ulp at y={y[error.argmax()]}, x={x[error.argmax()]}"


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -3.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38,
                    1e-38, 7.0], np.float32)


@pytest.mark.parametrize("variant", VARIANTS)
def test_atan2f_special_values_are_cs(variant):
    ys, xs = (a.ravel().copy() for a in np.meshgrid(SPECIAL, SPECIAL))
    run, _, _ = kernel(variant)
    got = run(ys, xs)
    want = np.arctan2(ys, xs)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    signed = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[signed]), np.signbit(want[signed]))
    exact_cases = signed & ((want == 0) | (np.abs(ys) == np.inf) | (np.abs(xs) == np.inf) | (ys == 0) | (xs == 0))
    assert np.all(np.abs(got[exact_cases] - want[exact_cases]) <= np.spacing(np.abs(want[exact_cases]))), \
        [(y, x, g, w) for y, x, g, w in zip(ys[exact_cases], xs[exact_cases], got[exact_cases], want[exact_cases])
         if abs(g - w) > np.spacing(abs(w))]
    assert _ulps(got[signed], ys[signed], xs[signed]).max() <= ULPS


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "scalar"])
def test_atan2f_vector_code_calls_nothing(variant):
    _, library, symbol = kernel(variant)
    assert "call" not in library.asm(symbol)
