"""Vector math: stated ulp bounds over the whole float32 range, exact special values, no libm calls."""
from __future__ import annotations

import ctypes
import functools
import math
import uuid
import warnings

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

from braze.codegen import (F32, F64, I64, PTR, compile_ir, define_function, entry_builder, for_range, host_target, load,
                           store, vec, vecmath, vector_loop)
from braze.codegen.vecmath import (ACCURACY, ACCURACY_F64, ACCURATE_RANGE, FUNCTIONS, LIBM_FALLBACK,
                                   OUTSIDE_ABS_ERROR, exp2_nonpositive)
from braze.codegen.vecmath_emit import VectorEmit
from braze.codegen.vecmath_trig import ACCURACY_TRIG, LIMIT
from braze.ir import get_op

IS_X86 = llvm.get_process_triple().startswith("x86_64")
HAS_AVX2 = IS_X86 and "+avx2" in llvm.get_host_cpu_features().flatten().split(",")
# vector: the host's width; haswell: 8 lanes of AVX2 (erf's permute form) on an AVX-512 host too; generic-cpu: SSE2.
VARIANTS = ["vector", "scalar"] + (["generic-cpu"] if IS_X86 else []) + (["haswell"] if HAS_AVX2 else [])
CPUS = {"generic-cpu": "x86-64", "haswell": "haswell"}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE", "0")
    monkeypatch.delenv("BRAZE_CPU", raising=False)


@functools.cache
def kernel(name: str, variant: str, dtype: str = "f32"):
    """A compiled y[i] = name(x[i]) loop: full vectors (host or generic CPU) or scalar calls, and its library."""
    target = host_target(CPUS.get(variant))
    element = F32 if dtype == "f32" else F64
    width = 1 if variant == "scalar" else target.vector_width // (1 if dtype == "f32" else 2)
    symbol = f"k_{uuid.uuid4().hex[:8]}_{name}"
    module = target.new_module(symbol)
    fn = define_function(module, symbol, [("x", PTR), ("y", PTR), ("n", I64)], noalias=True)
    b = entry_builder(fn)
    x, y, n = fn.args
    if width == 1:
        with for_range(b, 0, n) as i:
            store(b, vecmath.call(b, name, load(b, x, i, element)), y, i)
    else:
        vector_loop(b, 0, n, width,
                    lambda i, lanes: store(b, vecmath.call(b, name, load(b, x, i, vec(lanes, element))), y, i))
    b.ret_void()
    library = compile_ir(module, use_cache=False)
    cfunc = library.cfunc(symbol, None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

    def run(values: np.ndarray) -> np.ndarray:
        values = np.ascontiguousarray(values, dtype=np.float32 if dtype == "f32" else np.float64)
        out = np.empty_like(values)
        cfunc(values.ctypes.data, out.ctypes.data, values.size)
        return out

    return run, library, symbol


@functools.cache
def inputs() -> np.ndarray:
    """2^20 bit patterns strided over all of float32, subnormals, specials, dense ranges and thresholds."""
    strided = (np.arange(2 ** 20, dtype=np.uint64) * 2 ** 12 + 1234).astype(np.uint32).view(np.float32)
    subnormal = np.arange(1, 2 ** 23, 2 ** 8, dtype=np.uint32).view(np.float32)
    dense = [np.linspace(-20, 20, 2 ** 20, dtype=np.float32), np.linspace(-104, -86, 2 ** 14, dtype=np.float32),
             np.linspace(86, 89, 2 ** 12, dtype=np.float32), np.linspace(0.5, 2, 2 ** 14, dtype=np.float32),
             np.linspace(-4.5, 4.5, 2 ** 14, dtype=np.float32)]
    specials = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 88.72283, 88.72284,
                           3.4028235e38, -3.4028235e38, 1e-45, -1e-45, 1.1754944e-38])
    return np.concatenate([strided, subnormal, -subnormal, *dense, specials])


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_erf64 = np.frompyfunc(math.erf, 1, 1)
_erfc64 = np.frompyfunc(math.erfc, 1, 1)


@functools.cache
def reference(name: str) -> np.ndarray:
    """float64 references, written in forms that do not cancel (erfc, sigmoid) where float32 would."""
    with np.errstate(all="ignore"):
        x = inputs().astype(np.float64)
        if name == "exp":
            return np.exp(x)
        if name == "log":
            return np.log(x)
        if name == "tanh":
            return np.tanh(x)
        if name == "erf":
            return _erf64(x).astype(np.float64)
        if name == "sigmoid":
            return _sigmoid64(x)
        if name == "silu":
            return x * _sigmoid64(x)
        if name in ("sin", "cos", "log1p", "expm1"):
            return getattr(np, name)(x)
        if name == "gelu_tanh":
            return x * _sigmoid64(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))
        return 0.5 * x * _erfc64(-x / math.sqrt(2)).astype(np.float64)


def ulp_error(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in units of the float32 ulp at ref; 0 where y is ref rounded (infinities, NaNs included)."""
    with np.errstate(all="ignore"):
        _, exponent = np.frexp(np.abs(ref))
        ulp = np.ldexp(1.0, np.maximum(exponent - 24, -149))
        err = np.abs(y.astype(np.float64) - ref) / ulp
        exact = (y == ref.astype(np.float32)) | (np.isnan(y) & np.isnan(ref))
    return np.where(exact, 0.0, np.where(np.isnan(err), np.inf, err))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_vecmath_error_within_stated_ulp(name, variant):
    run = kernel(name, variant)[0]
    x, ref = inputs(), reference(name)
    y = run(x)
    err = ulp_error(y, ref)
    low, high = ACCURATE_RANGE.get(name, (-np.inf, np.inf))
    inside = ((x >= low) & (x <= high)) | np.isnan(x)
    worst = int(np.argmax(np.where(inside, err, 0)))
    assert err[inside].max() <= ACCURACY[name], f"{name}({x[worst]!r}) = {y[worst]!r}, expected {ref[worst]!r}"
    outside = ~inside & np.isfinite(x)
    with np.errstate(all="ignore"):
        absolute = np.abs(y[outside].astype(np.float64) - ref[outside])
    assert np.all(absolute <= OUTSIDE_ABS_ERROR * np.abs(x[outside].astype(np.float64)))


SPECIALS = {
    "exp": [(-np.inf, 0.0), (np.inf, np.inf), (np.nan, np.nan), (0.0, 1.0), (-0.0, 1.0), (89.0, np.inf),
            (1e30, np.inf), (-104.0, 0.0), (-1e30, 0.0), (-100.0, np.float32(np.exp(-100.0)))],
    "log": [(0.0, -np.inf), (-0.0, -np.inf), (-1.0, np.nan), (-np.inf, np.nan), (np.inf, np.inf), (np.nan, np.nan),
            (1.0, 0.0), (-1e-45, np.nan), (1e-45, np.float32(np.log(float(np.float32(1e-45)))))],
    "tanh": [(np.inf, 1.0), (-np.inf, -1.0), (np.nan, np.nan), (0.0, 0.0), (-0.0, -0.0), (20.0, 1.0), (-20.0, -1.0)],
    "erf": [(np.inf, 1.0), (-np.inf, -1.0), (np.nan, np.nan), (0.0, 0.0), (-0.0, -0.0), (10.0, 1.0), (-10.0, -1.0)],
    "sigmoid": [(np.inf, 1.0), (-np.inf, 0.0), (np.nan, np.nan), (0.0, 0.5), (-0.0, 0.5), (200.0, 1.0),
                (-200.0, 0.0)],
    "silu": [(np.inf, np.inf), (-np.inf, np.nan), (np.nan, np.nan), (0.0, 0.0), (-0.0, -0.0), (200.0, 200.0)],
    "gelu_tanh": [(np.inf, np.inf), (-np.inf, np.nan), (np.nan, np.nan), (0.0, 0.0), (1e30, 1e30),
                  (-1e30, -0.0)],
    "gelu_erf": [(np.inf, np.inf), (-np.inf, np.nan), (np.nan, np.nan), (0.0, 0.0), (-0.0, -0.0), (1e30, 1e30),
                 (-10.0, -0.0), (-1e30, -0.0)],
    "log1p": [(-1.0, -np.inf), (-2.0, np.nan), (-np.inf, np.nan), (np.inf, np.inf), (np.nan, np.nan), (0.0, 0.0),
              (-0.0, -0.0), (1e-30, 1e-30), (3e38, np.float32(np.log1p(3e38)))],
    "expm1": [(-np.inf, -1.0), (np.inf, np.inf), (np.nan, np.nan), (0.0, 0.0), (-0.0, -0.0), (1e-30, 1e-30),
              (-200.0, -1.0), (100.0, np.inf)],
    "sin": [(np.inf, np.nan), (-np.inf, np.nan), (np.nan, np.nan), (0.0, 0.0), (-0.0, -0.0), (1e-30, 1e-30),
            (-1e-30, -1e-30)],
    "cos": [(np.inf, np.nan), (-np.inf, np.nan), (np.nan, np.nan), (0.0, 1.0), (-0.0, 1.0), (1e-30, 1.0)],
}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_vecmath_special_values_exact(name):
    x = np.float32([v for v, _ in SPECIALS[name]])
    expected = np.float32([v for _, v in SPECIALS[name]])
    for variant in ("vector", "scalar"):
        y = kernel(name, variant)[0](x)
        np.testing.assert_array_equal(y, expected, err_msg=f"{name} ({variant})")
        numbers = ~np.isnan(expected)
        assert np.array_equal(np.signbit(y[numbers]), np.signbit(expected[numbers])), f"{name} ({variant}) signs"


def _registry(name: str, x: np.ndarray) -> np.ndarray:
    if name.startswith("gelu"):
        (out,) = get_op("gelu").run([x], {"approximate": "tanh" if name == "gelu_tanh" else "none"})
    else:
        (out,) = get_op(name).run([x], {})
    return out


@pytest.mark.parametrize("name", FUNCTIONS)
def test_vecmath_specials_agree_with_registry(name):
    x = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 3e38, -3e38, 1e-45, -1e-45])
    y, ref = kernel(name, "vector")[0](x), _registry(name, x)
    assert np.array_equal(np.isnan(y), np.isnan(ref))
    finite = ~np.isnan(ref)
    np.testing.assert_allclose(y[finite], ref[finite], rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_vecmath_vector_loop_calls_no_libm(name, dtype):
    _, library, symbol = kernel(name, "vector", dtype)
    asm = library.asm(symbol)
    if name in LIBM_FALLBACK:   # one libm call per lane, only on the branch taken for |x| >= LIMIT, NaN or inf
        calls = [line.split("@")[1].split("(")[0] for line in library.llvm_ir(symbol).splitlines() if " call " in line]
        assert {c for c in calls if not c.startswith("llvm.")} == {LIBM_FALLBACK[name] if dtype == "f32" else name}
    else:
        assert "call" not in asm
    width = host_target().vector_width
    if IS_X86 and width > 4:
        assert ("zmm" if width == 16 else "ymm") in asm


def test_vecmath_scalar_calls_in_a_loop_vectorize():
    _, library, symbol = kernel("tanh", "scalar")
    asm = library.asm(symbol)
    assert "call" not in asm
    if IS_X86:
        assert "mulps" in asm


def test_vecmath_function_is_emitted_once_per_width():
    module = host_target().new_module("vm_once")
    assert vecmath.function(module, "exp", 8) is vecmath.function(module, "exp", 8)
    assert vecmath.function(module, "exp", 1) is not vecmath.function(module, "exp", 8)
    assert vecmath.function_name("exp", 16) == "braze.vm.exp.v16f32"
    with pytest.raises(KeyError, match="no vector math function 'cosh'"):
        vecmath.function(module, "cosh", 8)


def trig_inputs(dtype: type) -> np.ndarray:
    """A dense sweep to 1e5, random values to past LIMIT, values nearest multiples of pi/2, zeros and specials."""
    rng = np.random.default_rng(7)
    k = np.arange(-70000, 70000)
    parts = [np.linspace(-1e5, 1e5, 2 ** 18), np.linspace(-8, 8, 2 ** 16), rng.uniform(-LIMIT, LIMIT, 2 ** 16),
             k * (np.pi / 2), (k * (np.pi / 2)).astype(np.float32), np.exp(rng.uniform(-80, 0, 2 ** 12)),
             rng.uniform(-1e30, 1e30, 256), [0.0, -0.0, np.inf, -np.inf, np.nan, LIMIT, -LIMIT]]
    return np.concatenate(parts).astype(dtype)


def trig_ulp_error(y: np.ndarray, x: np.ndarray, name: str) -> np.ndarray:
    """|y - f(x)| in ulps of y's dtype at f(x); float32 against float64 numpy, float64 against long double numpy."""
    wide = np.longdouble if y.dtype == np.float64 else np.float64
    with np.errstate(all="ignore"):
        ref = getattr(np, name)(x.astype(wide))
    return wide_ulp_error(y, ref)


def wide_ulp_error(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in ulps of y's dtype at ref, a reference in a wider dtype; 0 where y is ref rounded."""
    wide = ref.dtype.type
    with np.errstate(all="ignore"):
        _, exponent = np.frexp(np.abs(ref).astype(np.float64))
        bits, lowest = (53, -1074) if y.dtype == np.float64 else (24, -149)
        ulp = np.ldexp(wide(1.0), np.maximum(exponent - bits, lowest))
        err = (np.abs(y.astype(wide) - ref) / ulp).astype(np.float64)
        exact = (y == ref.astype(y.dtype)) | (np.isnan(y) & np.isnan(ref))
    return np.where(exact, 0.0, np.where(np.isnan(err), np.inf, err))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["sin", "cos"])
def test_vecmath_trig_error_within_stated_ulp(name, variant, dtype):
    if dtype == "f64" and np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("needs a long double wider than float64 as the reference")
    x = trig_inputs(np.float32 if dtype == "f32" else np.float64)
    y = kernel(name, variant, dtype)[0](x)
    err = trig_ulp_error(y, x, name)
    worst = int(np.argmax(err))
    assert err.max() <= ACCURACY_TRIG[name, dtype], f"{name}({x[worst]!r}) = {y[worst]!r}: {err[worst]} ulp"


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_vecmath_sin_keeps_signed_zero_and_nan(dtype):
    x = np.array([0.0, -0.0, np.nan, np.inf, -np.inf], dtype=np.float32 if dtype == "f32" else np.float64)
    sin, cos = kernel("sin", "vector", dtype)[0](x), kernel("cos", "vector", dtype)[0](x)
    assert list(np.signbit(sin[:2])) == [False, True] and np.isnan(sin[2:]).all()
    assert list(cos[:2]) == [1.0, 1.0] and np.isnan(cos[2:]).all()


def test_vecmath_float64_versions_are_their_own_functions():
    module = host_target().new_module("vm_f64")
    assert vecmath.function_name("exp", 8, F64) == "braze.vm.exp.v8f64"
    assert vecmath.function(module, "exp", 8, F64) is not vecmath.function(module, "exp", 8)
    assert vecmath.function(module, "exp", 8, F64).ftype.return_type == vec(8, F64)


@functools.cache
def _exp2_kernel(variant: str, body_of=None):
    """y[i] = exp2_nonpositive(x[i]) (or body_of's) on the variant's vectors (or one lane at a time)."""
    body_of = body_of or exp2_nonpositive
    target = host_target(CPUS.get(variant))
    width = 1 if variant == "scalar" else target.vector_width
    symbol = f"k_{uuid.uuid4().hex[:8]}_exp2"
    module = target.new_module(symbol)
    fn = define_function(module, symbol, [("x", PTR), ("y", PTR), ("n", I64)], noalias=True)
    b = entry_builder(fn)
    x, y, n = fn.args

    def body(i, lanes):
        store(b, body_of(VectorEmit(b, module, lanes), load(b, x, i, vec(lanes, F32))), y, i)
    vector_loop(b, 0, n, width, body)
    b.ret_void()
    cfunc = compile_ir(module, use_cache=False).cfunc(symbol, None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

    def run(values: np.ndarray) -> np.ndarray:
        values = np.ascontiguousarray(values, dtype=np.float32)
        out = np.empty_like(values)
        cfunc(values.ctypes.data, out.ctypes.data, values.size)
        return out
    return run


@pytest.mark.parametrize("variant", VARIANTS)
def test_exp2_nonpositive_within_one_ulp_down_to_zero(variant):
    """The attention kernel's softmax exponential: 1 ulp over y <= 0 (1.5 without FMA: SSE2's separate multiply and
    add), subnormal results and the underflow to 0 included; -inf gives 0 (masked keys), NaN stays NaN (a NaN score
    makes its row NaN), 0 gives 1 exactly."""
    run = _exp2_kernel(variant)
    y = np.concatenate([np.linspace(-160, 0, 2 ** 20, dtype=np.float32), np.linspace(-1, 0, 2 ** 16, dtype=np.float32),
                        -np.arange(0, 161, dtype=np.float32), -np.arange(0, 161, dtype=np.float32) - 0.5,
                        np.float32([-0.0, -1e-45, -1e-30, -149.5, -150.0, -150.5, -126.0, -125.9])])
    got = run(y)
    with np.errstate(under="ignore"):
        want = np.exp2(y.astype(np.float64))
    err = ulp_error(got, want)
    worst, bound = int(np.argmax(err)), 1.5 if variant == "generic-cpu" else 1.0
    assert err.max() <= bound, f"2^{y[worst]!r} = {got[worst]!r}, expected {want[worst]!r}"
    special = run(np.float32([-np.inf, np.nan, 0.0, -0.0, -1000.0, -3.4028235e38]))
    assert special[0] == 0.0 and np.isnan(special[1]) and special[2] == 1.0 and special[3] == 1.0
    assert special[4] == 0.0 and special[5] == 0.0


@functools.cache
def inputs64() -> np.ndarray:
    """float64 inputs: bit patterns strided over all of float64, dense sweeps, the thresholds of exp (-746, 709.8)
    and erf (1, 6), subnormals and special values."""
    rng = np.random.default_rng(11)
    strided = (np.arange(2 ** 16, dtype=np.uint64) * (2 ** 48 + 12345)).view(np.float64)
    parts = [strided, np.linspace(-40, 40, 2 ** 18), np.linspace(-760, -700, 2 ** 12), np.linspace(700, 711, 2 ** 12),
             np.linspace(0.5, 2, 2 ** 14), np.linspace(-7, 7, 2 ** 14), rng.standard_normal(2 ** 14),
             np.exp(rng.uniform(-745, 709, 2 ** 14)), -np.exp(rng.uniform(-40, 0.69, 2 ** 12)),
             np.arange(1, 2 ** 52, 2 ** 40 + 7, dtype=np.uint64).view(np.float64),
             [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 6.0, -6.0, 709.782712893384, 709.782712893385,
              -745.1332191019412, -745.1332191019411, 2.2250738585072014e-308, 5e-324, -5e-324, 1.7976931348623157e308]]
    return np.concatenate(parts)


def _sigmoid_wide(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def reference64(name: str, x: np.ndarray) -> np.ndarray:
    """name(x) in long double; erf and gelu_erf from mpmath at 80 bits (numpy has no erf), on what it is given."""
    with np.errstate(all="ignore"):
        wide = x.astype(np.longdouble)
        if name in ("exp", "log", "tanh", "log1p", "expm1"):
            return getattr(np, name)(wide)
        if name == "sigmoid":
            return _sigmoid_wide(wide)
        if name == "silu":
            return wide * _sigmoid_wide(wide)
        if name == "gelu_tanh":
            return wide * _sigmoid_wide(2 * np.sqrt(np.longdouble(2) / np.pi) * (wide + np.longdouble(0.044715) *
                                                                                   wide ** 3))
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workprec(80), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # values past long double's range convert to 0 or inf
        if name == "erf":
            values = [mpmath.erf(v) for v in x.tolist()]
        else:
            values = [v * mpmath.erfc(-mpmath.mpf(v) / mpmath.sqrt(2)) / 2 for v in x.tolist()]
        return np.array([np.longdouble(mpmath.nstr(v, 25) if mpmath.isfinite(v) else float(v)) for v in values],
                        dtype=np.longdouble)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", [name for name in FUNCTIONS if name not in ("sin", "cos")])
def test_vecmath_float64_error_within_stated_ulp(name, variant):
    if np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("needs a long double wider than float64 as the reference")
    x = inputs64()
    if name in ("erf", "gelu_erf"):   # mpmath's reference is slow: every 16th input and the dense ranges near 0
        x = np.concatenate([x[::16], np.linspace(-7, 7, 2 ** 12), np.linspace(0.9, 1.1, 2 ** 10)])
        x = x[~(np.abs(x) > 1e6)]   # mpmath's erfc overflows an exponent far out; the results there are specials
    y = kernel(name, variant, "f64")[0](x)
    err = wide_ulp_error(y, reference64(name, x))
    low, _ = ACCURATE_RANGE.get(name, (-np.inf, np.inf))
    err = np.where(x >= low, err, 0.0)   # below, see test_vecmath_float64_tails
    worst = int(np.argmax(err))
    assert err.max() <= ACCURACY_F64[name], f"{name}({x[worst]!r}) = {y[worst]!r}: {err[worst]} ulp"


SPECIALS64 = {
    "exp": [(-np.inf, 0.0), (np.inf, np.inf), (0.0, 1.0), (-0.0, 1.0), (710.0, np.inf), (-746.0, 0.0),
            (-1e300, 0.0), (1e300, np.inf), (-745.0, 5e-324), (709.0, np.exp(709.0))],
    "log": [(0.0, -np.inf), (-0.0, -np.inf), (-1.0, np.nan), (-np.inf, np.nan), (np.inf, np.inf), (1.0, 0.0),
            (-5e-324, np.nan), (5e-324, np.log(5e-324))],
    "tanh": [(np.inf, 1.0), (-np.inf, -1.0), (0.0, 0.0), (-0.0, -0.0), (20.0, 1.0), (-1e300, -1.0)],
    "erf": [(np.inf, 1.0), (-np.inf, -1.0), (0.0, 0.0), (-0.0, -0.0), (6.0, 1.0), (-1e300, -1.0)],
    "sigmoid": [(np.inf, 1.0), (-np.inf, 0.0), (0.0, 0.5), (800.0, 1.0), (-800.0, 0.0)],
    "silu": [(np.inf, np.inf), (0.0, 0.0), (-0.0, -0.0), (800.0, 800.0), (-800.0, -0.0)],
    "gelu_tanh": [(np.inf, np.inf), (0.0, 0.0), (1e300, 1e300), (-1e300, -0.0)],
    "gelu_erf": [(np.inf, np.inf), (0.0, 0.0), (-0.0, -0.0), (1e300, 1e300), (-100.0, -0.0)],
    "log1p": [(-1.0, -np.inf), (-2.0, np.nan), (np.inf, np.inf), (0.0, 0.0), (-0.0, -0.0), (1e-300, 1e-300)],
    "expm1": [(-np.inf, -1.0), (np.inf, np.inf), (0.0, 0.0), (-0.0, -0.0), (1e-300, 1e-300), (-800.0, -1.0),
              (710.0, np.inf)],
    "sin": [(0.0, 0.0), (-0.0, -0.0), (1e-300, 1e-300)],
    "cos": [(0.0, 1.0), (-0.0, 1.0)],
}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_vecmath_float64_special_values_exact(name):
    x = np.array([v for v, _ in SPECIALS64[name]] + [np.nan])
    expected = np.array([v for _, v in SPECIALS64[name]] + [np.nan])
    for variant in ("vector", "scalar"):
        y = kernel(name, variant, "f64")[0](x)
        np.testing.assert_array_equal(y, expected, err_msg=f"{name} ({variant})")
        numbers = ~np.isnan(expected)
        assert np.array_equal(np.signbit(y[numbers]), np.signbit(expected[numbers])), f"{name} ({variant}) signs"


@pytest.mark.parametrize("name", [name for name in ACCURATE_RANGE])
def test_vecmath_float64_tails(name):
    """Below ACCURATE_RANGE (silu's and gelu's far negative tail, where the result underflows or cancels) the
    absolute error is below 2^-52 |x|, as float32's is below 2^-24 |x|."""
    x = np.concatenate([np.linspace(-800, -1, 2 ** 14), -np.exp(np.linspace(0, 700, 2 ** 10))])
    if name == "gelu_erf":   # mpmath's reference is slow, and overflows an exponent far out
        x = x[(x > -1e6)][::8]
    y = kernel(name, "vector", "f64")[0](x)
    with np.errstate(all="ignore"):
        absolute = np.abs(y.astype(np.longdouble) - reference64(name, x)).astype(np.float64)
    assert np.all(absolute <= 2.0 ** -52 * np.abs(x))


@pytest.mark.parametrize("variant", VARIANTS)
def test_exp2_within_one_ulp_and_exact_at_integers(variant):
    """2 ** y (pow with the constant base 2): 1 ulp from the underflow to the overflow (1.5 without FMA), subnormal
    results included, every integer's power exact, C's pow(2, y) at the special values."""
    run = _exp2_kernel(variant, vecmath.exp2)
    y = np.concatenate([np.linspace(-160, 130, 2 ** 20, dtype=np.float32),
                        np.linspace(-1, 1, 2 ** 16, dtype=np.float32),
                        np.float32([127.5, 127.99999, 128.0, 128.00002, -149.5, -150.0, -126.0])])
    got = run(y)
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp2(y.astype(np.float64))
    err = ulp_error(got, want)
    worst, bound = int(np.argmax(err)), 1.5 if variant == "generic-cpu" else 1.0
    assert err.max() <= bound, f"2^{y[worst]!r} = {got[worst]!r}, expected {want[worst]!r}"
    integers = np.arange(-149, 128, dtype=np.float32)
    assert np.array_equal(run(integers), np.exp2(integers.astype(np.float64)).astype(np.float32))
    special = run(np.float32([-np.inf, np.inf, np.nan, 0.0, -0.0, 1000.0, -1000.0]))
    assert special[0] == 0.0 and special[1] == np.inf and np.isnan(special[2])
    assert list(special[3:]) == [1.0, 1.0, np.inf, 0.0]


UNDERFLOW_FLAG = 0x10  # MXCSR's UE bit


@functools.cache
def _fp_flags():
    """(clear, read): native calls that clear this thread's x86 MXCSR exception flags, and return them."""
    module = host_target().new_module(f"mxcsr_{uuid.uuid4().hex[:8]}")
    i32 = ir.IntType(32)
    save = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), "llvm.x86.sse.stmxcsr")
    restore = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), "llvm.x86.sse.ldmxcsr")
    for name in ("clear_flags", "read_flags"):
        b = entry_builder(define_function(module, name, [], ret=i32))
        slot = b.alloca(i32)
        b.call(save, [slot])
        if name == "clear_flags":
            b.store(b.and_(b.load(slot), ir.Constant(i32, ~0x3F)), slot)
            b.call(restore, [slot])
        b.ret(b.load(slot))
    library = compile_ir(module, use_cache=False)
    return library, library.cfunc("clear_flags", ctypes.c_int32), library.cfunc("read_flags", ctypes.c_int32)


# Masked scores (-inf, a mask's large negative number) and far tails: no lane of these may underflow on the way, since
# an underflowing result costs an x86 core a microcode assist for the whole vector.
FAR = np.float32([-np.inf, -3.4028235e38, -1e4, -200.0, -104.5] * 4)
FAR_FUNCTIONS = ("exp", "expm1", "sigmoid", "silu", "gelu_tanh", "gelu_erf", "tanh", "erf")


@pytest.mark.skipif(not IS_X86, reason="reads the x86 MXCSR")
@pytest.mark.parametrize("variant", ["vector", "haswell"] if HAS_AVX2 else ["vector"])
@pytest.mark.parametrize("name", FAR_FUNCTIONS)
def test_vecmath_far_negative_inputs_never_underflow(name, variant):
    """exp and what is built on it compute such lanes from a harmless argument and select the result after (the
    registry's answer, exactly): a softmax over rows half masked with -1e4 or -inf ran 9x slower while they
    underflowed."""
    run = kernel(name, variant)[0]
    _, clear, read = _fp_flags()
    clear()
    y = run(FAR)
    flags = read()
    ref = _registry(name, FAR)
    np.testing.assert_array_equal(y, ref)
    numbers = ~np.isnan(ref)
    assert np.array_equal(np.signbit(y[numbers]), np.signbit(ref[numbers]))
    assert not flags & UNDERFLOW_FLAG, f"{name} underflowed on {FAR[:5]}"


@pytest.mark.skipif(not IS_X86, reason="reads the x86 MXCSR")
@pytest.mark.parametrize("variant", ["vector", "haswell"] if HAS_AVX2 else ["vector"])
def test_exp2_nonpositive_masked_lanes_never_underflow(variant):
    run = _exp2_kernel(variant)
    _, clear, read = _fp_flags()
    clear()
    y = run(np.float32([-np.inf, -1e4, -151.0, -3.4028235e38] * 8))
    flags = read()
    assert not y.any() and not flags & UNDERFLOW_FLAG
