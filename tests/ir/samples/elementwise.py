"""Samples for the elementwise ops."""
import math

import numpy as np

from . import Sample, away_from_zero, normal, positive

S = (3, 4)
_erf = np.vectorize(math.erf)


def _pair(op, torch_fn, x=None, y=None, **kw):
    x = normal(S, 1) if x is None else x
    y = normal((4,), 2) if y is None else y
    return Sample(op, (x, y), torch=torch_fn, label="broadcast", **kw)


SAMPLES = [
    _pair("add", lambda x, y: x + y),
    Sample("add", (normal((2, 1, 3), 1), normal((4, 1), 2)), torch=lambda x, y: x + y, label="both-broadcast"),
    _pair("sub", lambda x, y: x - y),
    _pair("mul", lambda x, y: x * y),
    Sample("mul", (normal((2, 3), 1), np.array(1.5)), torch=lambda x, y: x * y, label="scalar"),
    _pair("div", lambda x, y: x / y, y=away_from_zero((4,), 2)),
    _pair("pow", lambda x, y: x ** y, x=positive(S, 1)),
    _pair("maximum", lambda x, y: np.maximum(x, y) if isinstance(x, np.ndarray) else x.maximum(y)),
    _pair("minimum", lambda x, y: np.minimum(x, y) if isinstance(x, np.ndarray) else x.minimum(y)),
    Sample("neg", (normal(S),), torch=lambda x: -x),
    Sample("sign", (away_from_zero(S),), torch=lambda x: x.sign()),
    Sample("abs", (away_from_zero(S),), torch=lambda x: x.abs()),
    Sample("exp", (normal(S),), torch=lambda x: x.exp()),
    Sample("log", (positive(S),), torch=lambda x: x.log()),
    Sample("sqrt", (positive(S),), torch=lambda x: x.sqrt()),
    Sample("rsqrt", (positive(S),), expected=lambda x: 1 / np.sqrt(x), torch=lambda x: x.rsqrt()),
    Sample("tanh", (normal(S),), torch=lambda x: x.tanh()),
    Sample("sigmoid", (normal(S) * 4,), expected=lambda x: 1 / (1 + np.exp(-x)), torch=lambda x: x.sigmoid()),
    Sample("erf", (normal(S),), expected=_erf, torch=lambda x: x.erf()),
    Sample("sin", (normal(S) * 4,), expected=lambda x: np.vectorize(math.sin)(x), torch=lambda x: x.sin()),
    Sample("cos", (normal(S) * 4,), expected=lambda x: np.vectorize(math.cos)(x), torch=lambda x: x.cos()),
    Sample("log1p", (positive(S) - 0.4,), expected=lambda x: np.vectorize(math.log1p)(x), torch=lambda x: x.log1p()),
    Sample("expm1", (normal(S),), expected=lambda x: np.vectorize(math.expm1)(x), torch=lambda x: x.expm1()),
    _pair("atan2", lambda y, x: y.atan2(x) if hasattr(y, "atan2") else np.arctan2(y, x), y=away_from_zero((4,), 2)),
    Sample("floor", (normal(S) * 3 + 0.01,), expected=lambda x: np.vectorize(math.floor)(x).astype(x.dtype)),
    Sample("ceil", (normal(S) * 3 + 0.01,), expected=lambda x: np.vectorize(math.ceil)(x).astype(x.dtype)),
    Sample("round", (np.array([[0.5, 1.5, 2.5, -0.5], [-1.5, 2.4, -2.6, 0.3]]),),
           expected=lambda x: np.vectorize(lambda v: float(round(v)))(x), grad_args=(), label="halves-to-even"),
    Sample("round", (normal(S) * 3 + 0.01,), expected=lambda x: np.vectorize(lambda v: float(round(v)))(x)),
    _pair("fmod", lambda x, y: np.fmod(x, y), x=normal(S, 1) * 5, y=away_from_zero((4,), 2)),
    _pair("remainder", lambda x, y: x - np.floor(x / y) * y, x=normal(S, 1) * 5, y=away_from_zero((4,), 2)),
    Sample("relu", (away_from_zero(S),), expected=lambda x: x * (x > 0), torch=lambda x: x.relu()),
    Sample("silu", (normal(S) * 3,), expected=lambda x: x / (1 + np.exp(-x)),
           torch=lambda x: x * x.sigmoid()),
    Sample("gelu", (normal(S) * 2,), {"approximate": "none"},
           expected=lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), label="erf"),
    Sample("gelu", (normal(S) * 2,), {"approximate": "tanh"},
           expected=lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), label="tanh"),
    Sample("clamp", (normal(S) * 2 + 0.05,), {"min": -0.5, "max": 0.75},
           expected=lambda x: np.minimum(np.maximum(x, -0.5), 0.75), torch=lambda x: x.clamp(-0.5, 0.75)),
    Sample("clamp", (normal(S) + 0.05,), {"min": 0.0}, expected=lambda x: np.maximum(x, 0.0), label="min-only"),
    Sample("eq", (np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])), expected=lambda x, y: x == y),
    Sample("ne", (np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])), expected=lambda x, y: x != y),
    Sample("lt", (normal(S, 1), normal((4,), 2)), expected=lambda x, y: x < y),
    Sample("le", (np.array([1, 2, 3]), np.array(2)), expected=lambda x, y: x <= y, label="int"),
    Sample("gt", (normal(S, 1), normal((4,), 2)), expected=lambda x, y: x > y),
    Sample("ge", (np.array([1, 2, 3]), np.array(2)), expected=lambda x, y: x >= y, label="int"),
    Sample("where", (normal(S, 3) > 0, normal(S, 1), normal((4,), 2)),
           torch=lambda c, x, y: x.where(c, y) if hasattr(x, "where") else np.where(c, x, y)),
    Sample("cast", (normal(S),), {"dtype": "float32"}, expected=lambda x: x.astype(np.float32), label="f64-f32"),
    Sample("cast", (normal(S) * 10,), {"dtype": "int32"}, expected=lambda x: x.astype(np.int32), label="f64-i32"),
]
