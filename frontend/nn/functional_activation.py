"""torch.nn.functional's activations beyond relu/gelu/silu (elu and its selu/celu forms, the shrinks, rrelu, ...), each
a short composition of registered ops.

They are elementwise chains of registered ops (where, clamp, exp, expm1, log1p, div), so fusion compiles each into one
kernel as fast as a dedicated op would; exponentials see only the branch's own range (exp of min(x, 0)), so a
branch where does not select never produces inf * 0 in the gradient.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

from .. import functions as _f
from .. import math_functions as _m
from ..creation import default_generator, rand
from ..dispatch import apply
from ..movement import normalize_dim
from ..promotion import as_operand, binary_operands
from ..tensor import Tensor

__all__ = ["leaky_relu", "elu", "hardtanh", "relu6", "hardswish", "hardsigmoid", "softplus", "mish", "prelu", "glu",
           "selu", "celu", "softsign", "logsigmoid", "softmin", "tanhshrink", "softshrink", "hardshrink", "threshold",
           "rrelu", "gumbel_softmax"]

# torch's SELU constants (Klambauer et al., 2017)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def when_training(training: Any, train: Callable[[], Tensor], evaluate: Callable[[], Tensor]) -> Tensor:
    """train() where `training` holds, else evaluate(). A bool picks one now (only that one is computed); a Flag or
    a bool[] tensor becomes the condition of a where, so a traced graph keeps the flag and serves both modes."""
    if isinstance(training, (bool, np.bool_)):
        return train() if training else evaluate()
    return apply("where", training, *binary_operands(train(), evaluate()))


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """input where positive, else negative_slope * input."""
    return _f.where(_f.gt(input, 0.0), input, _f.mul(input, negative_slope))


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """input where positive, else alpha * (exp(input) - 1), by expm1: exp(x) - 1 cancelled near 0 (elu(-1e-7) came
    out -5.96e-8)."""
    return _scaled_elu(input, alpha)


def _scaled_elu(input: Tensor, alpha: float, scale: float = 1.0, input_scale: float = 1.0) -> Tensor:
    """torch's elu kernel: scale * input where positive, else alpha * scale * expm1(input_scale * input); selu and
    celu are its instances."""
    z = _f.clamp(input, max=0.0)
    negative = _f.mul(_m.expm1(z if input_scale == 1.0 else _f.mul(z, input_scale)), alpha * scale)
    return _f.where(_f.gt(input, 0.0), input if scale == 1.0 else _f.mul(input, scale), negative)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """Self-normalizing elu: SELU_SCALE * elu(input, SELU_ALPHA), by expm1 for accuracy near 0."""
    return _scaled_elu(input, SELU_ALPHA, SELU_SCALE)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """input where positive, else alpha * (exp(input / alpha) - 1), by expm1 for accuracy near 0."""
    if alpha == 0:
        raise ValueError("celu: alpha cannot be 0 (it divides the input)")
    return _scaled_elu(input, alpha, 1.0, 1.0 / alpha)


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


def log1p_exp(z: Tensor) -> Tensor:
    """log(1 + exp(z)) as max(z, 0) + log1p(exp(-|z|)), which never overflows and keeps the small values of a very
    negative z (log(1 + e) rounds 1 + e to 1 there: softplus(-20) came out 0, not 2.06e-9).

    The terms are written so that autodiff's one-sided slopes at z = 0 add up to the true 1/2 (max and |z| as clamp
    and abs gave 1 there).
    """
    positive = _f.where(_f.gt(z, 0.0), z, 0.0)
    return _f.add(positive, _m.log1p(_f.exp(_f.sub(_f.clamp(z, max=0.0), positive))))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta * input)) / beta (by log1p_exp), and input itself where beta * input > threshold, as torch."""
    z = _f.mul(input, beta)
    return _f.where(_f.gt(z, threshold), input, _f.div(log1p_exp(z), beta))


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


def softsign(input: Tensor) -> Tensor:
    """input / (1 + |input|)."""
    return _f.div(input, _f.add(_f.abs(input), 1.0))


def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(input)) as -log1p_exp(-input), accurate in both tails: -9.4e-14 at 30 and -100 at -100, where
    log(sigmoid(input)) gives 0 and -inf."""
    return _f.neg(log1p_exp(_f.neg(input)))


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    """softmax(-input) along dim; with dtype, the input is cast to it first."""
    return _f.softmax(_f.neg(input), _f._softmax_dim("softmin", input, dim), dtype=dtype)


def tanhshrink(input: Tensor) -> Tensor:
    """input - tanh(input)."""
    return _f.sub(input, _f.tanh(input))


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """input shrunk towards 0 by lambd: input - lambd above lambd, input + lambd below -lambd, else 0 (as |input| * 0,
    so NaN stays NaN)."""
    if lambd < 0:
        raise ValueError(f"softshrink: lambda must be greater or equal to 0, but found to be {lambd}")
    return _f.where(_f.gt(input, lambd), _f.sub(input, lambd),
                    _f.where(_f.lt(input, -lambd), _f.add(input, lambd), _f.mul(_f.abs(input), 0.0)))


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """input where |input| > lambd, else 0 (NaN stays)."""
    return _f.where(_f.le(_f.abs(input), lambd), 0.0, input)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """input where input > threshold, else value (NaN stays)."""
    return _f.where(_f.le(input, threshold), value, input)


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: Any = False,
          inplace: bool = False) -> Tensor:
    """Randomized leaky relu: in training each non-positive element is scaled by its own slope, uniform in
    [lower, upper) from the global generator; in evaluation the slope is (lower + upper) / 2.

    `training` is a bool, a Flag or a bool[] tensor (see when_training). Under braze.trace the slopes are drawn once
    and become a constant of the graph, as dropout's seed does: every run of the graph uses those slopes.
    """
    if lower > upper:
        raise ValueError(f"rrelu: lower bound ({lower}) must be less than or equal to the upper bound ({upper})")

    def randomized() -> Tensor:
        slopes = _f.add(_f.mul(rand(input.shape, dtype=input.dtype), upper - lower), lower)
        return _f.where(_f.gt(input, 0.0), input, _f.mul(input, slopes))

    return when_training(training, randomized, lambda: leaky_relu(input, (lower + upper) / 2))


def gumbel_softmax(logits: Tensor, tau: float = 1, hard: bool = False, eps: float = 1e-10, dim: int = -1) -> Tensor:
    """softmax((logits + g) / tau) along dim for Gumbel(0, 1) noise g from the global generator: a relaxed sample of
    the categorical distribution softmax(logits). With hard, the one-hot vector of its argmax, differentiated as the
    soft sample (y_hard - y_soft.detach() + y_soft, torch's straight-through form).

    Under braze.trace the noise is drawn once and becomes a constant of the graph, as dropout's seed does: every run
    of the graph uses that noise.
    """
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", UserWarning, stacklevel=2)
    x = as_operand(logits)
    if not x.dtype.is_float:
        raise TypeError(f"gumbel_softmax: expects floating-point logits, got {x.dtype}")
    axis = normalize_dim(dim, x.ndim)
    noise = Tensor._wrap(default_generator.numpy.gumbel(size=tuple(x.shape)).astype(x.dtype.numpy))
    y_soft = _f.softmax(_f.div(_f.add(x, noise), tau), axis)
    if not hard:
        return y_soft
    index = _f.argmax(y_soft, axis)
    y_hard = apply("one_hot", index, num_classes=x.shape[axis], dtype=x.dtype)
    if axis != x.ndim - 1:
        y_hard = _f.movedim(y_hard, -1, axis)
    return _f.add(_f.sub(y_hard, y_soft.detach()), y_soft)
