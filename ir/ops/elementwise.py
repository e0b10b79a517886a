"""Elementwise ops: arithmetic, transcendental and trigonometric functions, rounding and remainders, activations,
comparisons, select and cast.

Binary ops broadcast like numpy and require equal dtypes (the frontend promotes before binding).
"""
from __future__ import annotations

import math

import numpy as np

from ..attrs import AttrSpec
from ..registry import defop
from ..types import TensorType, bool_
from ._common import broadcast_shapes, require_bool, require_dtype_kind, require_float, same_dtype, unbroadcast

# GELU's constants, for every rule that writes gelu out (the simplify recognizer, codegen's kernels).
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
SQRT_HALF = math.sqrt(0.5)
GELU_CUBIC = 0.044715
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _binary_infer(name: str, *, floats_only: bool = False, result=None, numbers_only: bool = False):
    def infer(x: TensorType, y: TensorType, **_: object) -> TensorType:
        dtype = same_dtype(name, x, y)
        if floats_only:
            require_float(name, x, y)
        if numbers_only:  # numpy has no bool loop for these
            require_dtype_kind(name, x, ("float", "int", "uint"), "the operands")
        return TensorType(broadcast_shapes(name, x, y), result or dtype)
    return infer


def _unary_infer(name: str, *, floats_only: bool = False, numbers_only: bool = False):
    def infer(x: TensorType, **_: object) -> TensorType:
        if floats_only:
            require_float(name, x)
        if numbers_only:  # numpy has no bool loop for these
            require_dtype_kind(name, x, ("float", "int", "uint"), "the operand")
        return x
    return infer


def _binary(name, impl, vjp, **kw):
    return defop(name, ("x", "y"), infer=_binary_infer(name, floats_only=kw.pop("floats_only", False),
                                                        numbers_only=kw.pop("numbers_only", False)),
                 impl=impl, vjp=vjp, category="elementwise", **kw)


def _unary(name, impl, vjp, floats_only=True, numbers_only=False, **kw):
    return defop(name, ("x",), infer=_unary_infer(name, floats_only=floats_only, numbers_only=numbers_only),
                 impl=impl, vjp=vjp, category="elementwise", **kw)


# --- arithmetic -------------------------------------------------------------------------------------------
add = _binary("add", np.add, vjp_reads=(),
              vjp=lambda e, g, out, x, y: (unbroadcast(e, g, x.shape), unbroadcast(e, g, y.shape)))
sub = _binary("sub", np.subtract, numbers_only=True, vjp_reads=(),
              vjp=lambda e, g, out, x, y: (unbroadcast(e, g, x.shape), unbroadcast(e, e.neg(g), y.shape)))
mul = _binary("mul", np.multiply,
              lambda e, g, out, x, y: (unbroadcast(e, e.mul(g, y), x.shape), unbroadcast(e, e.mul(g, x), y.shape)))
div = _binary("div", np.divide, floats_only=True,
              vjp=lambda e, g, out, x, y: (unbroadcast(e, e.div(g, y), x.shape),
                                           unbroadcast(e, e.neg(e.div(e.mul(g, out), y)), y.shape)))


def _pow_vjp(e, g, out, x, y):
    dx = e.mul(g, e.mul(y, e.pow(x, e.sub(y, 1.0))))
    safe_log = e.where(e.eq(x, 0.0), e.scalar(0.0, x), e.log(x))  # d/dy x**y at x == 0 is taken as 0, as torch
    dy = e.mul(g, e.mul(out, safe_log))
    return unbroadcast(e, dx, x.shape), unbroadcast(e, dy, y.shape)


def _power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x ** y, narrow floats through float64: numpy's float32 power is not correctly rounded on every host (its
    AVX-512 loop is off by an ulp where torch's is not), and a buffer computed once in float32 carries that ulp."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype.itemsize < 8 and x.dtype.kind == "f":
        return np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)
    return np.power(x, y)


pow = _binary("pow", _power, _pow_vjp, floats_only=True)


def _split_ties(e, g, x, y, pick_x):
    """Gradient of max/min: all to the chosen side, half each on ties (as torch)."""
    half = e.mul(g, 0.5)
    zero = e.scalar(0.0, g)
    gx = e.where(pick_x, g, e.where(e.eq(x, y), half, zero))
    gy = e.sub(g, gx)
    return unbroadcast(e, gx, x.shape), unbroadcast(e, gy, y.shape)


maximum = _binary("maximum", np.maximum, lambda e, g, out, x, y: _split_ties(e, g, x, y, e.gt(x, y)))
minimum = _binary("minimum", np.minimum, lambda e, g, out, x, y: _split_ties(e, g, x, y, e.lt(x, y)))

neg = _unary("neg", np.negative, lambda e, g, out, x: (e.neg(g),), floats_only=False, numbers_only=True, vjp_reads=())
sign = _unary("sign", np.sign, lambda e, g, out, x: (e.mul(g, 0.0),), floats_only=False, numbers_only=True)
abs = _unary("abs", np.abs, lambda e, g, out, x: (e.mul(g, e.sign(x)),), floats_only=False)

# --- transcendental ---------------------------------------------------------------------------------------
exp = _unary("exp", np.exp, lambda e, g, out, x: (e.mul(g, out),))
log = _unary("log", np.log, lambda e, g, out, x: (e.div(g, x),))
sqrt = _unary("sqrt", np.sqrt, lambda e, g, out, x: (e.div(e.mul(g, 0.5), out),))


def _rsqrt_impl(x):
    return (1.0 / np.sqrt(x)).astype(x.dtype, copy=False)


rsqrt = _unary("rsqrt", _rsqrt_impl, lambda e, g, out, x: (e.mul(e.mul(g, -0.5), e.div(out, x)),))
tanh = _unary("tanh", np.tanh, lambda e, g, out, x: (e.mul(g, e.sub(1.0, e.mul(out, out))),))


def _sigmoid_impl(x):
    z = np.exp(-np.abs(x))  # stable on both tails
    return np.where(x >= 0, 1 / (1 + z), z / (1 + z)).astype(x.dtype, copy=False)


sigmoid = _unary("sigmoid", _sigmoid_impl, lambda e, g, out, x: (e.mul(g, e.mul(out, e.sub(1.0, out))),))

_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf_impl(x):
    """Correctly rounded through float64 (math.erf); numpy has no erf."""
    if x.size == 0:
        return x.copy()
    return np.asarray(_erf_scalar(x.astype(np.float64))).astype(x.dtype)  # a rank-0 input gives a Python float


erf = _unary("erf", _erf_impl, lambda e, g, out, x: (e.mul(g, e.mul(e.exp(e.neg(e.mul(x, x))), _TWO_OVER_SQRT_PI)),))

sin = _unary("sin", np.sin, lambda e, g, out, x: (e.mul(g, e.cos(x)),))
cos = _unary("cos", np.cos, lambda e, g, out, x: (e.neg(e.mul(g, e.sin(x))),))
log1p = _unary("log1p", np.log1p, lambda e, g, out, x: (e.div(g, e.add(x, 1.0)),))
# exp(x), not out + 1: out + 1 cancels where expm1(x) nears -1 (at x = -20 in float32 it gives 0, not 2.1e-9)
expm1 = _unary("expm1", np.expm1, lambda e, g, out, x: (e.mul(g, e.exp(x)),))


def _atan2_vjp(e, g, out, y, x):
    """d/dy atan2(y, x) = x / (x^2 + y^2), d/dx = -y / (x^2 + y^2)."""
    scale = e.div(g, e.add(e.mul(x, x), e.mul(y, y)))
    return unbroadcast(e, e.mul(scale, x), y.shape), unbroadcast(e, e.neg(e.mul(scale, y)), x.shape)


def _atan2_impl(y, x):
    """Rounded once from float64: numpy's float32 arctan2 is up to 3 ulp off."""
    return np.arctan2(y.astype(np.float64), x.astype(np.float64)).astype(np.result_type(y, x), copy=False)


atan2 = _binary("atan2", _atan2_impl, _atan2_vjp, floats_only=True)

# --- rounding and remainders (piecewise: the gradient of the rounding ops is zero almost everywhere) ---------
floor = _unary("floor", np.floor, lambda e, g, out, x: (e.mul(g, 0.0),))
ceil = _unary("ceil", np.ceil, lambda e, g, out, x: (e.mul(g, 0.0),))
round_ = _unary("round", np.round, lambda e, g, out, x: (e.mul(g, 0.0),), doc="Round half to even, as torch.round.")


def _remainder_vjp(rounding):
    """x - q * y with q = rounding(x / y) piecewise constant: dx = g, dy = -q g."""
    def vjp(e, g, out, x, y):
        q = rounding(e, e.div(e.sub(x, out), y))
        return unbroadcast(e, g, x.shape), unbroadcast(e, e.neg(e.mul(g, q)), y.shape)
    return vjp


fmod = _binary("fmod", np.fmod, _remainder_vjp(lambda e, q: e.round(q)), floats_only=True,
               doc="x - trunc(x / y) * y: the remainder with the sign of x (C fmod).")
remainder = _binary("remainder", np.remainder, _remainder_vjp(lambda e, q: e.round(q)), floats_only=True,
                    doc="x - floor(x / y) * y: the remainder with the sign of y (Python %).")

# --- activations ------------------------------------------------------------------------------------------
relu = _unary("relu", lambda x: np.maximum(x, np.zeros((), x.dtype)),
              lambda e, g, out, x: (e.where(e.gt(x, 0.0), g, e.scalar(0.0, g)),), floats_only=False)


def _silu_vjp(e, g, out, x):
    s = e.sigmoid(x)
    return (e.mul(g, e.add(s, e.mul(out, e.sub(1.0, s)))),)


silu = _unary("silu", lambda x: (x * _sigmoid_impl(x)).astype(x.dtype, copy=False), _silu_vjp)


def _gelu_impl(x, *, approximate):
    if approximate == "tanh":
        inner = SQRT_2_OVER_PI * (x + GELU_CUBIC * x ** 3)
        return (0.5 * x * (1.0 + np.tanh(inner))).astype(x.dtype, copy=False)
    return (0.5 * x * (1.0 + _erf_impl(x / math.sqrt(2.0)))).astype(x.dtype, copy=False)


def _gelu_vjp(e, g, out, x, *, approximate):
    if approximate == "tanh":
        x2 = e.mul(x, x)
        t = e.tanh(e.mul(e.add(x, e.mul(x2, e.mul(x, GELU_CUBIC))), SQRT_2_OVER_PI))
        dt = e.mul(e.sub(1.0, e.mul(t, t)), e.mul(e.add(e.mul(x2, 3 * GELU_CUBIC), 1.0), SQRT_2_OVER_PI))
        d = e.add(e.mul(e.add(t, 1.0), 0.5), e.mul(e.mul(x, dt), 0.5))
    else:
        cdf = e.mul(e.add(e.erf(e.mul(x, 1 / math.sqrt(2.0))), 1.0), 0.5)
        pdf = e.mul(e.exp(e.mul(e.mul(x, x), -0.5)), _INV_SQRT_2PI)
        d = e.add(cdf, e.mul(x, pdf))
    return (e.mul(g, d),)


gelu = defop("gelu", ("x",), infer=_unary_infer("gelu", floats_only=True), impl=_gelu_impl, vjp=_gelu_vjp,
             category="elementwise", attrs=(AttrSpec("approximate", "str", "none", choices=("none", "tanh")),))


def _clamp_infer(x, *, min, max):
    return x


def _clamp_impl(x, *, min, max):
    lo = -np.inf if min is None else min
    hi = np.inf if max is None else max
    return np.clip(x, lo, hi).astype(x.dtype, copy=False)


def _clamp_vjp(e, g, out, x, *, min, max):
    zero = e.scalar(0.0, g)
    if min is not None:
        g = e.where(e.lt(x, min), zero, g)
    if max is not None:
        g = e.where(e.gt(x, max), zero, g)
    return (g,)


clamp = defop("clamp", ("x",), infer=_clamp_infer, impl=_clamp_impl, vjp=_clamp_vjp, category="elementwise",
              attrs=(AttrSpec("min", "float", None, optional=True), AttrSpec("max", "float", None, optional=True)))

# --- comparisons and selection ----------------------------------------------------------------------------


def _compare(name, impl):
    return defop(name, ("x", "y"), infer=_binary_infer(name, result=bool_), impl=impl, category="elementwise")


eq = _compare("eq", np.equal)
ne = _compare("ne", np.not_equal)
lt = _compare("lt", np.less)
le = _compare("le", np.less_equal)
gt = _compare("gt", np.greater)
ge = _compare("ge", np.greater_equal)


def _where_infer(cond, x, y):
    require_bool("where", cond, "the condition")
    dtype = same_dtype("where", x, y)
    return TensorType(broadcast_shapes("where", cond, x, y), dtype)


def _where_vjp(e, g, out, cond, x, y):
    zero = e.scalar(0.0, g)
    return None, unbroadcast(e, e.where(cond, g, zero), x.shape), unbroadcast(e, e.where(cond, zero, g), y.shape)


where = defop("where", ("cond", "x", "y"), infer=_where_infer, impl=np.where, vjp=_where_vjp, category="elementwise",
              vjp_reads=(0,))


def _cast_vjp(e, g, out, x, *, dtype):
    if not (x.dtype.is_float and dtype.is_float):
        return (None,)
    return (e.cast(g, dtype=x.dtype),)


cast = defop("cast", ("x",), vjp_reads=(), infer=lambda x, *, dtype: x.with_dtype(dtype),
             impl=lambda x, *, dtype: x.astype(dtype.numpy), vjp=_cast_vjp, category="elementwise",
             attrs=(AttrSpec("dtype", "dtype"),), preserves_values=True)
