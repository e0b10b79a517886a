"""braze.special: the torch.special functions braze composes from registered ops (expit, erfc, ndtr, ...).

`import braze as torch` then `torch.special.expit(x)` reads as it does with torch. The functions braze already has
(under other names: sigmoid as expit, lgamma as gammaln, digamma as psi) are those same functions; the normal
distribution's ndtr and log_ndtr come from the error function family of `elementary`, so that they stay accurate
relative to their value far into the tails.
"""
from __future__ import annotations

import math
from typing import Any

from .dispatch import apply
from .elementary import (_SHIFT, _TWO_OVER_SQRT_PI, _UNSHIFT, _erfcx, _exp_neg_square, _finite, _narrow,
                         _square_limit, _wide, _with_derivative, digamma, erfc, erfinv, exp2)
from .elementary import lgamma as gammaln
from .functions import _floating, abs, erf, log_softmax, logsumexp, softmax, where
from .functions import sigmoid as expit
from .math_functions import expm1, log1p, round
from .pointwise import logit, sinc, x_times_log, xlogy
from .promotion import as_tensor
from .tensor import Tensor

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_LOWER_TAIL = -0.5 / _SQRT_HALF  # x below which ndtr(x) = erfc(z) / 2 takes erfc's tail form (z = -x / sqrt 2 > 1/2)


def _density(x: Tensor) -> tuple[Tensor, Tensor]:
    """(c, e^(20 - c^2 / 2)): x clamped to where _exp_neg_square is exact, and the normal density's exponential
    there in float64, shifted as erfc's (elementary._SHIFT) so that its product with e^-20 R rounds once."""
    limit = _square_limit(x)
    c = apply("clamp", x, min=-limit, max=limit)
    return c, _exp_neg_square(c, 0.5, _SHIFT)


def _central(x: Tensor) -> Tensor:
    """ndtr(x) as (1 + erf(x / sqrt 2)) / 2: no cancellation from _LOWER_TAIL up (erf(x / sqrt 2) > -0.53)."""
    return apply("add", apply("mul", apply("erf", apply("mul", x, _SQRT_HALF)), 0.5), 0.5)


def ndtr(input: Tensor) -> Tensor:
    """The standard normal distribution function, erfc(-x / sqrt 2) / 2: below _LOWER_TAIL e^(-x^2 / 2) R(-x / sqrt
    2) / 2 with e^(-x^2 / 2) from x's exact square (torch scales x first, which costs it x^2 / 2 ulp in the left
    tail), within 3 ulp in float32 and 5 in float64 down to the subnormals; the gradient is the density e^(-x^2 / 2)
    / sqrt(2 pi)."""
    x = _floating(input)
    c, gaussian = _density(x)
    tail = _narrow(apply("mul", gaussian, _erfcx(apply("mul", x, -_SQRT_HALF), 0.5 * _UNSHIFT)), x)
    value = where(apply("lt", x, _LOWER_TAIL), tail, _central(x))
    return _with_derivative(value, c, _narrow(apply("mul", gaussian, _INV_SQRT_2PI * _UNSHIFT), x))


def log_ndtr(input: Tensor) -> Tensor:
    """log(ndtr(x)), accurate for every x: below _LOWER_TAIL log(R / 2) - x^2 / 2 (finite far past where ndtr
    underflows), from there to 0 log(ndtr(x)), above 0 log1p(-ndtr(-x)); within 3 ulp in float32 and 6 in float64.
    The gradient is the density over ndtr, 1 / (sqrt(2 pi) R / 2) in the left tail."""
    x = _floating(input)
    a = apply("neg", abs(x))
    _, gaussian = _density(a)
    half_r = _erfcx(apply("mul", a, -_SQRT_HALF), 0.5)
    far = apply("lt", x, _LOWER_TAIL)
    tail = _narrow(apply("mul", gaussian, apply("mul", half_r, _UNSHIFT)), x)
    lower = where(apply("lt", a, _LOWER_TAIL), tail, _central(a))
    left = apply("sub", apply("log", _narrow(half_r, x)), apply("mul", apply("mul", x, 0.5), x))
    negative = apply("le", x, 0.0)
    value = where(far, left, where(negative, apply("log", lower), apply("log1p", apply("neg", lower))))
    cdf = where(far, as_tensor(1.0, x.dtype), where(negative, lower, apply("sub", 1.0, lower)))
    slope = where(far, _narrow(apply("div", _INV_SQRT_2PI, half_r), x),
                  apply("div", _narrow(apply("mul", gaussian, _INV_SQRT_2PI * _UNSHIFT), x), cdf))
    return _with_derivative(value, _finite(x), slope)


def erfcx(input: Tensor) -> Tensor:
    """The scaled complementary error function e^(x^2) erfc(x): the fit R itself from x = 1/2, below that e^(x^2)
    (1 - erf(x)) with x^2 exact (inf where it overflows: below -9.4 in float32, -26.6 in float64); within 3 ulp in
    both. The gradient is torch's 2 x erfcx(x) - 2 / sqrt(pi)."""
    x = _floating(input)
    limit = _square_limit(x)
    c = apply("clamp", x, min=-limit, max=0.5)
    near = _narrow(apply("mul", _exp_neg_square(c, -1.0), _wide(apply("sub", 1.0, apply("erf", c)))), x)
    near = where(apply("lt", x, -limit), as_tensor(math.inf, x.dtype), near)
    value = where(apply("lt", x, 0.5), near, _narrow(_erfcx(x), x))
    finite = _finite(x)
    slope = apply("sub", apply("mul", apply("mul", finite, value), 2.0), _TWO_OVER_SQRT_PI)
    return _with_derivative(value, finite, slope)


def entr(input: Tensor) -> Tensor:
    """Elementwise entropy term -x log(x): 0 at 0, -inf below 0, NaN for NaN (as torch); log reads 1 where x <= 0,
    so that the gradient there is 0 (torch's is inf at 0, NaN below)."""
    x = _floating(input)
    positive = apply("gt", x, 0.0)
    inner = apply("neg", apply("mul", x, apply("log", where(positive, x, as_tensor(1.0, x.dtype)))))
    edge = where(apply("eq", x, 0.0), as_tensor(0.0, x.dtype), as_tensor(-math.inf, x.dtype))
    return where(positive, inner, where(apply("ne", x, x), as_tensor(math.nan, x.dtype), edge))


def xlog1py(input: Any, other: Any) -> Tensor:
    """Elementwise input * log1p(other), 0 where input is 0 unless other is NaN (then NaN), as torch (see
    xlogy)."""
    return x_times_log(input, other, "log1p", 0.0)


psi = digamma

__all__ = ["expit", "logit", "erf", "erfc", "erfcx", "erfinv", "expm1", "exp2", "log1p", "xlogy", "xlog1py", "sinc",
           "logsumexp", "softmax", "log_softmax", "round", "ndtr", "log_ndtr", "entr", "gammaln", "digamma", "psi"]
