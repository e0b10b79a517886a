"""The standard layers' default initializations: torch's distributions, drawn from braze's global generator.

Weights are lazy (`Param.uninitialized`): nothing is allocated or drawn until a value is first needed, so
building a large model and counting its parameters costs no memory. `braze.manual_seed` makes the draws
repeatable; they follow torch's distributions, not its random streams.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from braze.ir.errors import DTypeError
from braze.ir.types import DType, as_dtype, float32

from ...creation import default_generator
from ...device import as_device
from ...tensor import Tensor
from ..param import Param

Sampler = Callable[["np.random.Generator", tuple[int, ...]], np.ndarray]  # a string: np.random loads on use


def float_dtype(dtype: Any, layer: str) -> DType:
    """The layer's parameter dtype: float32 unless a floating dtype is given."""
    d = float32 if dtype is None else as_dtype(dtype)
    if not d.is_float:
        raise DTypeError(f"{layer}: parameters must have a floating-point dtype, got {d}")
    return d


def lazy(shape: tuple[int, ...], sample: Sampler, dtype: DType, device: Any = None) -> Param:
    """A trainable Param of `shape` whose value `sample` draws from the global generator on first use."""
    shape = tuple(int(s) for s in shape)

    def init(on: Any, requires_grad: bool) -> Tensor:
        array = np.asarray(sample(default_generator.numpy, shape)).astype(dtype.numpy, copy=False)
        return leaf(array, on, requires_grad)
    return Param.uninitialized(init, shape, device=device, requires_grad=True, dtype=dtype)


def leaf(array: np.ndarray, device: Any, requires_grad: bool) -> Tensor:
    """A leaf tensor over `array` on `device` (the default device when None)."""
    t = Tensor._wrap(np.asarray(array, order="C"), True, as_device(device))
    return t.requires_grad_(True) if requires_grad else t


def uniform(bound: float) -> Sampler:
    """U(-bound, bound)."""
    return lambda rng, shape: rng.uniform(-bound, bound, shape)


def normal(std: float = 1.0) -> Sampler:
    """N(0, std^2)."""
    return lambda rng, shape: rng.normal(0.0, std, shape)


def constant(value: float) -> Sampler:
    """Every element `value` (draws nothing)."""
    return lambda rng, shape: np.full(shape, value)


def fan_in_bound(fan_in: int) -> float:
    """1/sqrt(fan_in): torch's kaiming_uniform(a=sqrt(5)) weight bound, also its bias bound (0 when fan_in is 0)."""
    return 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def xavier_bound(fan_in: int, fan_out: int, gain: float = 1.0) -> float:
    """torch's xavier_uniform bound gain * sqrt(6 / (fan_in + fan_out))."""
    return gain * math.sqrt(6.0 / (fan_in + fan_out)) if fan_in + fan_out > 0 else 0.0


def fill(shape: tuple[int, ...], value: float, dtype: DType, device: Any = None) -> Tensor:
    """An eager constant tensor for buffers (running statistics), which are never trained."""
    return leaf(np.full(shape, value, dtype=dtype.numpy), device, False)
