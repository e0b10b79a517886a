"""torch.nn.functional's activations beyond relu/gelu/silu, each a short composition of registered ops.

They are elementwise chains of registered ops (where, clamp, exp, expm1, log1p, div), so fusion compiles each into one
kernel as fast as a dedicated op would; exponentials see only the branch's own range (exp of min(x, 0)), so a
branch where does not select never produces inf * 0 in the gradient.
"""
from __future__ import annotations

from .. import functions as _f
from .. import math_functions as _m
from ..promotion import as_operand
from ..tensor import Tensor

__all__ = ["leaky_relu", "elu", "hardtanh", "relu6", "hardswish", "hardsigmoid", "softplus", "mish", "prelu", "glu"]


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """input where positive, else negative_slope * input."""
    return _f.where(_f.gt(input, 0.0), input, _f.mul(input, negative_slope))


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """input where positive, else alpha * (exp(input) - 1), by expm1: exp(x) - 1 cancelled near 0 (elu(-1e-7) came
    out -5.96e-8)."""
    negative = _f.mul(_m.expm1(_f.clamp(input, max=0.0)), alpha)
    return _f.where(_f.gt(input, 0.0), input, negative)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """input clamped to [min_val, max_val]."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
    return _flat_at_ends(input, min_val, max_val)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """min(max(input, 0), 6)."""
    return _flat_at_ends(input, 0.0, 6.0)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """relu6(input + 3) / 6: a piecewise-linear sigmoid."""
    return _f.div(_flat_at_ends(_f.add(input, 3.0), 0.0, 6.0), 6.0)


def _flat_at_ends(input: Tensor, low: float, high: float) -> Tensor:
    """input clamped to [low, high] with torch's hardtanh gradient: zero at the ends too, not only outside (clamp
    passes it at the ends). Exact ends are common: relu6 after zero padding or after another relu6 sees 0.0."""
    if not input.dtype.is_float:
        low, high = int(low), int(high)  # integer bounds keep an integer input's dtype, as clamp does
    return _f.where(_f.le(input, low), low, _f.where(_f.ge(input, high), high, input))


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """input * hardsigmoid(input)."""
    return _f.mul(input, hardsigmoid(input))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta * input)) / beta, and input itself where beta * input > threshold, as torch.

    Computed as max(z, 0) + log1p(exp(-|z|)) with z = beta * input, which never overflows and keeps the small values
    of a very negative z (log(1 + e) rounds 1 + e to 1 there: softplus(-20) came out 0, not 2.06e-9).
    """
    z = _f.mul(input, beta)
    smooth = _f.add(_f.clamp(z, min=0.0), _m.log1p(_f.exp(_f.neg(_f.abs(z)))))
    return _f.where(_f.gt(z, threshold), input, _f.div(smooth, beta))


# Above this, mish(x) = x in float32 (tanh(softplus(x)) rounds to 1 from x = 9.1 on), and e^2 stays finite below it.
_MISH_LINEAR = 20.0


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """input * tanh(softplus(input)), computed with one exponential: with e = exp(x), tanh(log(1 + e)) is
    n / (n + 2) for n = e (e + 2), so a fused kernel spends one exp and one division where the composition spent an
    exp, a log and a tanh (3-4x the time); x itself above _MISH_LINEAR, where exp sees min(x, _MISH_LINEAR)."""
    e = _f.exp(_f.clamp(input, max=_MISH_LINEAR))
    n = _f.mul(e, _f.add(e, 2.0))
    smooth = _f.mul(input, _f.div(n, _f.add(n, 2.0)))
    return _f.where(_f.gt(input, _MISH_LINEAR), input, smooth)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """leaky_relu with a learned slope: one for all channels, or one per channel (dim 1, dim 0 when 1-d)."""
    slope = as_operand(weight)
    if slope.ndim != 1:
        raise ValueError(f"prelu: weight must be 1-d (one slope, or one per channel), got shape {slope.shape}")
    channels = input.shape[1] if input.ndim >= 2 else (input.shape[0] if input.ndim == 1 else 1)
    if slope.shape[0] not in (1, channels):
        raise ValueError(f"prelu: weight has {slope.shape[0]} slopes for input {input.shape} with {channels} "
                         f"channels; expected 1 or {channels}")
    if input.ndim >= 2:
        slope = _f.reshape(slope, (-1,) + (1,) * (input.ndim - 2))
    return _f.where(_f.gt(input, 0.0), input, _f.mul(input, slope))


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b) for the halves a, b of input along dim (which must have an even size)."""
    if input.ndim == 0:
        raise ValueError("glu: does not support scalars because halving size must be even")
    axis = dim % input.ndim
    if input.shape[axis] % 2:
        raise ValueError(f"glu: halving dimension must be even, but dimension {axis} is size {input.shape[axis]}")
    a, b = _f.chunk(input, 2, axis)
    return _f.mul(a, _f.sigmoid(b))
