"""fmod on float32 and float64 vectors (codegen/vecmath_fmod.py): bit for bit numpy's fmod (C's, an exact function)
over magnitudes from the subnormals to the largest floats, quotients past the exact path's limit, every sign and the
special values, zeros' signs included; libm only in the branch for rare lanes; on the host's vectors, scalars, SSE2
and AVX2 code."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from braze.codegen.vecmath_fmod import fmod
from tests.codegen.binary_loops import VARIANTS, binary_loop

DTYPES = {"f32": np.float32, "f64": np.float64}


@functools.cache
def kernel(variant: str, dtype: str):
    """A compiled z[i] = fmod(x[i], y[i]) loop for the variant, its library and symbol."""
    return binary_loop(fmod, variant, "fmod", dtype)


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE", "0")


def _pairs(dtype: str, n: int = 1 << 17) -> tuple[np.ndarray, np.ndarray]:
    """Log-uniform magnitudes over the floats with random signs; a third of the pairs with quotients near integers
    (x = k y + a little), where the division rounds onto the next integer; a third within 2^-60..2^60 of each other."""
    rng = np.random.default_rng(1)
    info = np.finfo(DTYPES[dtype])
    low, high = np.log2(float(info.smallest_subnormal)), np.log2(float(info.max))
    sign = lambda: rng.choice([-1.0, 1.0], n)
    x = np.exp2(rng.uniform(low, high, n)) * sign()
    y = np.exp2(rng.uniform(low, high, n)) * sign()
    near = rng.random(n) < 0.33
    whole = rng.random(n) < 0.33
    k = rng.integers(1, 1 << 20, whole.sum()).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        y[near] = x[near] * np.exp2(rng.uniform(-60, 60, near.sum())) * sign()[near]
        y[whole] = rng.uniform(0.5, 3, whole.sum())
        x[whole] = k * y[whole] * (1 + rng.choice([-1, 1], whole.sum()) * float(info.eps)
                                   * rng.integers(0, 3, whole.sum()))
        largest = float(info.max)
        x, y = np.clip(x, -largest, largest), np.clip(y, -largest, largest)
        return x.astype(DTYPES[dtype]), y.astype(DTYPES[dtype])


def _same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where got is want bit for bit, NaNs of any payload alike."""
    return (got.view(np.uint64 if got.dtype == np.float64 else np.uint32)
            == want.view(np.uint64 if want.dtype == np.float64 else np.uint32)) | (np.isnan(got) & np.isnan(want))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_fmod_is_exact(variant, dtype):
    x, y = _pairs(dtype)
    got = kernel(variant, dtype)[0](x, y)
    with np.errstate(invalid="ignore"):
        want = np.fmod(x, y)
    same = _same(got, want)
    bad = int(np.argmin(same))
    assert same.all(), f"fmod({x[bad]!r}, {y[bad]!r}) = {got[bad]!r}, expected {want[bad]!r}"


SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -3.0, 7.0, 1e-30, -1e-30, 1e30, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_fmod_special_values_are_cs(variant, dtype):
    values = np.array(SPECIAL + [float(np.finfo(DTYPES[dtype]).smallest_subnormal), float(np.finfo(DTYPES[dtype]).max)],
                      DTYPES[dtype])
    x, y = (a.ravel().copy() for a in np.meshgrid(values, values))
    got = kernel(variant, dtype)[0](x, y)
    with np.errstate(invalid="ignore"):
        want = np.fmod(x, y)
    same = _same(got, want)
    assert same.all(), [(a, c, g, w) for a, c, g, w, ok in zip(x, y, got, want, same) if not ok][:5]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "generic-cpu"])
def test_fmod_calls_libm_only_for_rare_lanes(variant, dtype):
    """The vector path is straight-line; the one libm function is called in the branch a vector with a zero,
    infinite or NaN operand or a huge quotient takes."""
    _, library, symbol = kernel(variant, dtype)
    llvm_ir = library.llvm_ir(symbol)
    calls = {line.split("@")[1].split("(")[0] for line in llvm_ir.splitlines() if " call " in line}
    assert {c for c in calls if not c.startswith("llvm.")} == {"fmodf" if dtype == "f32" else "fmod"}
    assert "!prof" in llvm_ir   # the branch to them, weighted as rarely taken
