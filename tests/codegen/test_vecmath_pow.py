"""pow on vectors (codegen/vecmath_pow.py): float32 in float64 and float64 in double-double, within 1 ulp of the exact
power over magnitudes from the subnormals to the overflow threshold (float64 against numpy's long double, with
results up to 2^1000 from bases near 1, where the logarithm's error counts most), C's special values exactly
(numpy's power), no libm call; on the host's vectors, scalars, SSE2 and AVX2 code."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from braze.codegen.vecmath_pow import POW64_ULPS, pow64, powf
from tests.codegen.binary_loops import VARIANTS, binary_loop


@functools.cache
def kernel(variant: str, dtype: str = "f32"):
    """A compiled z[i] = pow(x[i], y[i]) loop for the variant, its library and symbol."""
    return binary_loop(powf if dtype == "f32" else pow64, variant, "pow", dtype)


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE", "0")


def _random_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """x log-uniform over the positive floats (subnormals included), y such that most results are finite, plus
    negative x with integer y."""
    rng = np.random.default_rng(0)
    x = np.exp2(rng.uniform(-149, 128, n)).astype(np.float32)
    y = (rng.uniform(-1, 1, n) * 150 / np.maximum(np.abs(np.log2(x.astype(np.float64))), 1e-3)).astype(np.float32)
    negative = rng.random(n) < 0.25
    x[negative] = -x[negative]
    y[negative] = np.round(y[negative])
    near_one = rng.random(n) < 0.1
    x[near_one] = (1 + rng.standard_normal(near_one.sum()) * 1e-3).astype(np.float32)
    return x, y


@pytest.mark.parametrize("variant", VARIANTS)
def test_powf_is_within_one_ulp_of_the_exact_power(variant):
    x, y = _random_pairs(1 << 17)
    run, _, _ = kernel(variant)
    got = run(x, y).astype(np.float64)
    with np.errstate(all="ignore"):
        exact = np.power(x.astype(np.float64), y.astype(np.float64))
    finite = np.isfinite(exact) & (np.abs(exact) <= np.finfo(np.float32).max)
    spacing = np.spacing(np.abs(exact[finite]).astype(np.float32)).astype(np.float64)
    error = np.abs(got[finite] - exact[finite]) / spacing
    assert finite.mean() > 0.9 and error.max() < 1.0, f"max error {error.max():.3f} ulp"
    assert np.all(np.isinf(got[~finite & ~np.isnan(exact)]))


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45,
                    3.4e38, 0.99999994, 1.0000001], np.float32)
EXPONENTS = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5, np.inf, -np.inf, np.nan,
                      1e10, -1e10, 7.0, 16777216.0, 0.1, 149.0, -149.0], np.float32)


def _check_special_values(run, bases: np.ndarray, exponents: np.ndarray) -> None:
    """pow over every pair: infinities, zeros, +-1 and NaN exactly numpy's (signs included), the rest within an
    ulp of it."""
    xs, ys = (a.ravel().copy() for a in np.meshgrid(bases, exponents))
    got = run(xs, ys)
    with np.errstate(all="ignore"):
        want = np.power(xs, ys)
    exact_cases = ~np.isfinite(want) | (want == 0) | (np.abs(want) == 1)
    same = (np.isnan(got) == np.isnan(want)) & ((got == want) | np.isnan(want)) & \
        ((np.signbit(got) == np.signbit(want)) | np.isnan(want))
    bad = exact_cases & ~same
    assert not bad.any(), [(x, y, g, w) for x, y, g, w in zip(xs[bad], ys[bad], got[bad], want[bad])]
    rest = ~exact_cases
    with np.errstate(over="ignore"):   # the spacing past the largest float is infinite
        assert np.all(np.abs(got[rest] - want[rest]) <= np.spacing(np.abs(want[rest])))


@pytest.mark.parametrize("variant", VARIANTS)
def test_powf_special_values_are_cs(variant):
    _check_special_values(kernel(variant)[0], SPECIAL, EXPONENTS)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "scalar"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_pow_vector_code_calls_nothing(variant, dtype):
    _, library, symbol = kernel(variant, dtype)
    assert "call" not in library.asm(symbol)


def _random_pairs64(n: int) -> tuple[np.ndarray, np.ndarray]:
    """x log-uniform over the positive float64s (subnormals included), y such that most results are finite (|y
    log2 x| up to 1000), a quarter negative x with integer y, and bases within 1e-3 of 1 to powers up to 1e6."""
    rng = np.random.default_rng(0)
    x = np.exp2(rng.uniform(-1074, 1023, n))
    y = rng.uniform(-1, 1, n) * 1000 / np.maximum(np.abs(np.log2(x)), 1e-3)
    negative = rng.random(n) < 0.25
    x[negative], y[negative] = -x[negative], np.round(y[negative])
    near_one = rng.random(n) < 0.15
    x[near_one] = 1 + rng.standard_normal(near_one.sum()) * 1e-3
    y[near_one] = rng.uniform(-1, 1, near_one.sum()) * 1e6
    return x, y


@pytest.mark.parametrize("variant", VARIANTS)
def test_pow64_is_within_its_bound_of_the_exact_power(variant):
    if np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("needs a long double wider than float64 as the reference")
    x, y = _random_pairs64(1 << 17)
    got = kernel(variant, "f64")[0](x, y)
    with np.errstate(all="ignore"):
        exact = np.power(x.astype(np.longdouble), y.astype(np.longdouble))
        finite = np.isfinite(exact) & (np.abs(exact) <= np.finfo(np.float64).max)
        spacing = np.spacing(np.abs(exact[finite]).astype(np.float64)).astype(np.longdouble)
        error = (np.abs(got[finite].astype(np.longdouble) - exact[finite]) / spacing).astype(np.float64)
    worst = int(np.argmax(error))
    assert finite.mean() > 0.9 and error.max() <= POW64_ULPS, \
        f"pow({x[finite][worst]!r}, {y[finite][worst]!r}) = {got[finite][worst]!r}: {error.max():.3f} ulp"
    assert np.all(np.isinf(got[~finite & ~np.isnan(exact)]))


SPECIAL64 = np.concatenate([SPECIAL.astype(np.float64), [5e-324, -5e-324, 1.7976931348623157e308,
                                                          0.9999999999999999, 1.0000000000000002]])
EXPONENTS64 = np.concatenate([EXPONENTS.astype(np.float64), [1e300, -1e300, 9007199254740993.0, 1075.0, -1075.0,
                                                             1e-300]])


@pytest.mark.parametrize("variant", VARIANTS)
def test_pow64_special_values_are_cs(variant):
    _check_special_values(kernel(variant, "f64")[0], SPECIAL64, EXPONENTS64)
