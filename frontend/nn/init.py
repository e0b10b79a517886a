"""braze.nn.init: torch.nn.init's initializers, with torch's names, signatures, formulas and errors.

Each initializer fills a tensor in place without recording autodiff (torch's no_grad semantics) and returns it.
On a lazy Param (not initialized yet) it chains onto the pending initialization (Param.init_mapper) instead:
nothing is allocated or drawn until the value is first needed. Random draws come from `generator`, or from the
global generator (braze.manual_seed) when it is None, at the time the values are made; they follow torch's
distributions, not its random streams.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np

from braze.ir.errors import BrazeError, DTypeError

from ..autodiff import no_grad
from ..creation import Generator, default_generator
from ..tensor import Tensor
from .param import Param

Make = Callable[[tuple[int, ...]], np.ndarray]  # the new values for a shape, as float64 (or any) numbers

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "sigmoid")


def calculate_gain(nonlinearity: str, param: int | float | None = None) -> float:
    """The recommended gain for `nonlinearity` (torch's table: 1, 5/3 for tanh, sqrt(2) for relu, ...)."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _shape(tensor: Any) -> tuple[int, ...]:
    """The shape without initializing a lazy Param."""
    return tuple(tensor.lazy_shape) if isinstance(tensor, Param) else tuple(tensor.shape)


def _calculate_fan_in_and_fan_out(tensor: Any) -> tuple[int, int]:
    """(fan_in, fan_out): dim 1 and dim 0 sizes times the receptive field (the product of dims 2 onwards)."""
    shape = _shape(tensor)
    if len(shape) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _calculate_correct_fan(tensor: Any, mode: str) -> int:
    mode = mode.lower()
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _rng(generator: Generator | None) -> np.random.Generator:
    return (generator or default_generator).numpy


def _dtype(tensor: Any) -> Any:
    return tensor.lazy_dtype if isinstance(tensor, Param) else tensor.dtype


def _fill(tensor: Any, make: Make, what: str, random: bool = True) -> Any:
    """Give `tensor` the values `make` builds for its shape, in place outside autodiff; returns `tensor`.

    A lazy Param gets `make` chained onto its pending initialization, so nothing is drawn yet.
    """
    dtype = _dtype(tensor)
    if random and not dtype.is_float:
        raise DTypeError(f"nn.init.{what}: expects a floating-point tensor, got {dtype}")
    if isinstance(tensor, Param):
        if not tensor.is_initialized:
            return tensor.init_mapper(lambda t: Tensor._wrap(_cast(make(tuple(t.shape)), dtype), t._autodiff,
                                                             t._device))
        return tensor.assign(_cast(make(tensor.lazy_shape), dtype))
    if not isinstance(tensor, Tensor):
        raise BrazeError(f"nn.init.{what}: expects a Tensor or a Parameter, got {type(tensor).__name__}")
    with no_grad():
        return tensor.copy_(Tensor._wrap(_cast(make(tuple(tensor.shape)), dtype)))


def _cast(values: np.ndarray, dtype: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values).astype(dtype.numpy, copy=False))


# --- distributions ------------------------------------------------------------------------------------------


def uniform_(tensor: Any, a: float = 0.0, b: float = 1.0, generator: Generator | None = None) -> Any:
    """Fill with samples of U(a, b)."""
    return _fill(tensor, lambda shape: _rng(generator).uniform(a, b, shape), "uniform_")


def normal_(tensor: Any, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None) -> Any:
    """Fill with samples of N(mean, std^2)."""
    return _fill(tensor, lambda shape: _rng(generator).normal(mean, std, shape), "normal_")


def trunc_normal_(tensor: Any, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator: Generator | None = None) -> Any:
    """Fill with samples of N(mean, std^2) conditioned on [a, b] (redrawing those outside)."""
    low, high = _normal_cdf((a - mean) / std), _normal_cdf((b - mean) / std)
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values "
                      "may be incorrect.", stacklevel=2)
    if not high - low > 1e-6:
        raise BrazeError(f"nn.init.trunc_normal_: [a, b] = [{a}, {b}] holds probability {high - low:.3g} under "
                         f"N({mean}, {std}^2); choose bounds that hold at least 1e-6 of it")

    def make(shape: tuple[int, ...]) -> np.ndarray:
        rng, out = _rng(generator), np.empty(shape)
        flat, todo = out.reshape(-1), np.arange(out.size)
        while todo.size:
            draws = rng.normal(mean, std, todo.size)
            keep = (draws >= a) & (draws <= b)
            flat[todo[keep]] = draws[keep]
            todo = todo[~keep]
        return out
    return _fill(tensor, make, "trunc_normal_")


def _normal_cdf(x: float) -> float:
    return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0


def constant_(tensor: Any, val: float) -> Any:
    """Fill with `val`."""
    return _fill(tensor, lambda shape: np.full(shape, val), "constant_", random=False)


def ones_(tensor: Any) -> Any:
    """Fill with 1."""
    return constant_(tensor, 1.0)


def zeros_(tensor: Any) -> Any:
    """Fill with 0."""
    return constant_(tensor, 0.0)


def eye_(tensor: Any) -> Any:
    """Fill a 2-D tensor with the identity (ones on the diagonal)."""
    if len(_shape(tensor)) != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, lambda shape: np.eye(*shape), "eye_", random=False)


def dirac_(tensor: Any, groups: int = 1) -> Any:
    """Fill a 3-, 4- or 5-D convolution weight with the Dirac delta: each group's channels pass through."""
    shape = _shape(tensor)
    if len(shape) not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if shape[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")

    def make(shape: tuple[int, ...]) -> np.ndarray:
        out, per_group = np.zeros(shape), shape[0] // groups
        center = tuple(s // 2 for s in shape[2:])
        for g in range(groups):
            for d in range(min(per_group, shape[1])):
                out[(g * per_group + d, d) + center] = 1.0
        return out
    return _fill(tensor, make, "dirac_", random=False)


# --- fan-scaled distributions -------------------------------------------------------------------------------


def xavier_uniform_(tensor: Any, gain: float = 1.0, generator: Generator | None = None) -> Any:
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Any, gain: float = 1.0, generator: Generator | None = None) -> Any:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def _kaiming_std(tensor: Any, a: float, mode: str, nonlinearity: str) -> float | None:
    """gain / sqrt(fan), or None for a tensor with no elements (torch warns and leaves it)."""
    if 0 in _shape(tensor):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return None
    return calculate_gain(nonlinearity, a) / math.sqrt(_calculate_correct_fan(tensor, mode))


def kaiming_uniform_(tensor: Any, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator: Generator | None = None) -> Any:
    """U(-bound, bound) with bound = gain * sqrt(3 / fan) (He et al., 2015)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    if std is None:
        return tensor
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Any, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator: Generator | None = None) -> Any:
    """N(0, std^2) with std = gain / sqrt(fan) (He et al., 2015)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    return tensor if std is None else normal_(tensor, 0.0, std, generator)


# --- structured -----------------------------------------------------------------------------------------------


def orthogonal_(tensor: Any, gain: float = 1, generator: Generator | None = None) -> Any:
    """A (semi-)orthogonal matrix over dim 0 by the rest, from the QR decomposition of a normal draw, times gain."""
    if len(_shape(tensor)) < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if math.prod(_shape(tensor)) == 0:
        return tensor

    def make(shape: tuple[int, ...]) -> np.ndarray:
        rows = shape[0]
        flat = _rng(generator).normal(0.0, 1.0, (rows, math.prod(shape) // rows))
        wide = rows < flat.shape[1]
        q, r = np.linalg.qr(flat.T if wide else flat)
        q = q * np.sign(np.diag(r))  # makes the decomposition unique, so q is uniformly distributed
        return (q.T if wide else q).reshape(shape) * gain
    return _fill(tensor, make, "orthogonal_")


def sparse_(tensor: Any, sparsity: float, std: float = 0.01, generator: Generator | None = None) -> Any:
    """N(0, std^2) with a `sparsity` fraction of each column's rows (rounded up) set to zero."""
    if len(_shape(tensor)) != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")

    def make(shape: tuple[int, ...]) -> np.ndarray:
        rows, cols = shape
        rng = _rng(generator)
        out = rng.normal(0.0, std, shape)
        zeros = int(math.ceil(sparsity * rows))
        for col in range(cols):
            out[rng.permutation(rows)[:zeros], col] = 0.0
        return out
    return _fill(tensor, make, "sparse_")


__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_",
           "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
           "sparse_"]
