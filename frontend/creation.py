"""Tensor creation (tensor, zeros, ones, full, arange, randn, rand, ..., the *_like family) and the seedable
global random generator that randn, rand and dropout draw from.

Created tensors are leaves holding fresh data; nothing here computes an op's result.
"""
from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np

from braze.ir.errors import BrazeError, DTypeError
from braze.ir.types import DType, as_dtype, float32, int64

from .device import CPU, Device, as_device
from .markers import eager_only
from .tensor import Tensor, as_array

_DEFAULT_SEED = 67280421310721  # torch's initial seed, so an unseeded run is still repeatable


class Generator:
    """A seedable stream of random numbers (numpy's PCG64), as torch.Generator; its streams are not torch's.

    `Generator()` starts from torch's default seed, `Generator(seed)` from `seed`; torch's `Generator(device)`
    form is accepted for the braze devices (all host memory).
    """

    def __init__(self, seed: Any = None, *, device: Any = None) -> None:
        if isinstance(seed, (str, Device)):
            seed, device = None, seed
        self.device = as_device(device)
        self.manual_seed(_DEFAULT_SEED if seed is None else seed)

    def manual_seed(self, seed: int) -> Generator:
        """Restart the stream from `seed`; returns self."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise BrazeError(f"Generator.manual_seed: the seed must be an int, got {type(seed).__name__}")
        self._seed, self._stream = int(seed), None  # numpy's generator is made on the first draw
        return self

    @property
    def _rng(self) -> np.random.Generator:
        """numpy's generator of this stream, made when first drawn from (importing numpy.random costs a new
        process about 15 ms, which a program that only loads and runs compiled code never needs)."""
        if self._stream is None:
            self._stream = np.random.Generator(np.random.PCG64(self._seed & (2 ** 128 - 1)))
        return self._stream

    def initial_seed(self) -> int:
        """The seed this generator was last seeded with."""
        return self._seed

    def seed(self) -> int:
        """Reseed from fresh entropy and return the new seed."""
        new = int(np.random.SeedSequence().entropy) & (2 ** 63 - 1)
        self.manual_seed(new)
        return new

    def get_state(self) -> dict[str, Any]:
        """The generator state (a dict of plain values, not torch's byte tensor), for set_state."""
        return {"seed": self._seed, "bit_generator": copy.deepcopy(self._rng.bit_generator.state)}

    def set_state(self, state: dict[str, Any]) -> Generator:
        """Restore a state from get_state; returns self."""
        try:
            seed, bits = int(state["seed"]), state["bit_generator"]
            rng = np.random.Generator(np.random.PCG64())
            rng.bit_generator.state = bits
        except (TypeError, KeyError, ValueError) as err:
            raise BrazeError(f"Generator.set_state: not a state from Generator.get_state ({err})") from None
        self._seed, self._stream = seed, rng
        return self

    @property
    def numpy(self) -> np.random.Generator:
        """The numpy generator behind this one."""
        return self._rng

    def draw_seed(self) -> int:
        """A fresh 63-bit seed for ops that take one (dropout)."""
        return int(self._rng.integers(0, 2 ** 63 - 1))


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the global generator so randn, rand, randint, randperm and dropout repeat."""
    return default_generator.manual_seed(seed)


def initial_seed() -> int:
    """The seed the global generator was last seeded with."""
    return default_generator.initial_seed()


def seed() -> int:
    """Reseed the global generator from fresh entropy and return the seed."""
    return default_generator.seed()


def get_rng_state() -> dict[str, Any]:
    """The global generator's state (see Generator.get_state)."""
    return default_generator.get_state()


def set_rng_state(new_state: dict[str, Any]) -> None:
    """Restore the global generator's state from get_rng_state."""
    default_generator.set_state(new_state)


def _shape(size: tuple[Any, ...]) -> tuple[int, ...]:
    """Sizes given as separate ints or as one sequence."""
    if len(size) == 1 and not isinstance(size[0], (int, np.integer)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def _leaf(array: np.ndarray, requires_grad: bool, device: Any) -> Tensor:
    out = Tensor._wrap(array, True, as_device(device))
    return out.requires_grad_(True) if requires_grad else out


def _float_dtype(dtype: Any, what: str) -> DType:
    d = float32 if dtype is None else as_dtype(dtype)
    if not d.is_float:
        raise DTypeError(f"{what}: expects a floating-point dtype, got {d}")
    return d


def tensor(data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new tensor copying `data`: Python floats -> float32, ints -> int64, bools -> bool; arrays keep dtype."""
    return Tensor(data, dtype=dtype, requires_grad=requires_grad, device=device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing the array's memory."""
    return Tensor._wrap(as_array(np.asarray(array)), True, CPU)


def _dtype_or(dtype: Any, default: DType) -> DType:
    return default if dtype is None else as_dtype(dtype)


def zeros(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros (float32 unless dtype says otherwise)."""
    return _leaf(np.zeros(_shape(size), _dtype_or(dtype, float32).numpy), requires_grad, device)


def ones(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones (float32 unless dtype says otherwise)."""
    return _leaf(np.ones(_shape(size), _dtype_or(dtype, float32).numpy), requires_grad, device)


empty = zeros


def full(size: Sequence[int], fill_value: Any, *, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    """A tensor of `size` filled with `fill_value`; the dtype follows the value (bool, int64, float32)."""
    d = _dtype_or(dtype, as_dtype(as_array(fill_value).dtype))
    return _leaf(np.full(_shape((size,)), fill_value, dtype=d.numpy), requires_grad, device)


def arange(start: float, end: float | None = None, step: float = 1, *, dtype: Any = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:
    """Values from start (0 when only one bound is given) up to, not including, end; int64 unless a bound is float."""
    if end is None:
        start, end = 0, start
    integral = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    d = _dtype_or(dtype, int64 if integral else float32)
    values = np.arange(start, end, step, dtype=np.float64 if not integral else None)
    return _leaf(values.astype(d.numpy), requires_grad, device)


def linspace(start: float, end: float, steps: int, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """`steps` evenly spaced values from start to end inclusive."""
    return _leaf(np.linspace(start, end, steps).astype(_float_dtype(dtype, "linspace").numpy), requires_grad, device)


def eye(n: int, m: int | None = None, *, dtype: Any = None, device: Any = None,
        requires_grad: bool = False) -> Tensor:
    """An n x m identity matrix."""
    return _leaf(np.eye(n, m, dtype=_dtype_or(dtype, float32).numpy), requires_grad, device)


def randn(*size: Any, generator: Generator | None = None, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    """Standard normal samples from `generator` (the global one by default)."""
    d = _float_dtype(dtype, "randn")
    rng = (generator or default_generator).numpy
    return _leaf(rng.standard_normal(_shape(size), dtype=d.numpy), requires_grad, device)


def rand(*size: Any, generator: Generator | None = None, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1) from `generator` (the global one by default)."""
    d = _float_dtype(dtype, "rand")
    rng = (generator or default_generator).numpy
    return _leaf(rng.random(_shape(size), dtype=d.numpy), requires_grad, device)


def randint(low: int, high: int | Sequence[int] | None = None, size: Sequence[int] | None = None, *,
            generator: Generator | None = None, dtype: Any = None, device: Any = None,
            requires_grad: bool = False) -> Tensor:
    """Integers uniform in [low, high); called as randint(high, size) or randint(low, high, size)."""
    if size is None:
        if high is None:
            raise TypeError("randint: missing size")
        low, high, size = 0, low, high
    rng = (generator or default_generator).numpy
    return _leaf(rng.integers(low, high, _shape((size,))).astype(_dtype_or(dtype, int64).numpy), requires_grad, device)


def randperm(n: int, *, generator: Generator | None = None, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """A random permutation of 0..n-1 (int64)."""
    rng = (generator or default_generator).numpy
    return _leaf(rng.permutation(n).astype(_dtype_or(dtype, int64).numpy), requires_grad, device)


@eager_only("random draws that depend on the weights' values")
def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,
                generator: Generator | None = None) -> Tensor:
    """int64 category indices drawn from each row of non-negative weights (eager only: random and data-dependent);
    without replacement a category is drawn at most once per row."""
    weights = np.asarray(input._data if isinstance(input, Tensor) else input, dtype=np.float64)
    if weights.ndim not in (1, 2):
        raise BrazeError(f"multinomial: expects a 1-D or 2-D tensor of weights, got shape {weights.shape}")
    rows = weights.reshape(-1, weights.shape[-1])
    if not np.isfinite(rows).all() or (rows < 0).any() or (rows.sum(axis=1) <= 0).any():
        raise BrazeError("multinomial: the weights must be finite, non-negative and have a positive sum in each row")
    if not replacement and num_samples > (rows > 0).sum(axis=1).min():
        raise BrazeError(f"multinomial: cannot draw {num_samples} samples without replacement from a row with "
                         f"fewer non-zero weights")
    rng = (generator or default_generator).numpy
    drawn = np.stack([rng.choice(len(w), size=num_samples, replace=replacement, p=w / w.sum()) for w in rows])
    return Tensor._wrap(drawn.reshape(weights.shape[:-1] + (num_samples,)).astype(np.int64), True, input.device)


def _like(input: Tensor, dtype: Any, device: Any) -> dict[str, Any]:
    """The dtype and device keywords of a *_like function: the given ones, else those of `input`."""
    return {"dtype": _dtype_or(dtype, input.dtype), "device": input.device if device is None else device}


def zeros_like(input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Zeros with the shape (and dtype and device, unless given) of `input`."""
    return zeros(input.shape, requires_grad=requires_grad, **_like(input, dtype, device))


def ones_like(input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Ones with the shape (and dtype and device, unless given) of `input`."""
    return ones(input.shape, requires_grad=requires_grad, **_like(input, dtype, device))


empty_like = zeros_like


def full_like(input: Tensor, fill_value: Any, *, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    """`fill_value` with the shape (and dtype and device, unless given) of `input`."""
    return full(input.shape, fill_value, requires_grad=requires_grad, **_like(input, dtype, device))


def randn_like(input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Standard normal samples with the shape (and dtype and device, unless given) of `input`."""
    return randn(input.shape, requires_grad=requires_grad, **_like(input, dtype, device))


def rand_like(input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) samples with the shape (and dtype and device, unless given) of `input`."""
    return rand(input.shape, requires_grad=requires_grad, **_like(input, dtype, device))


def randint_like(input: Tensor, low: int, high: int | None = None, *, dtype: Any = None, device: Any = None,
                 requires_grad: bool = False) -> Tensor:
    """Integers uniform in [low, high) (or [0, low)) with the shape (and dtype and device, unless given) of `input`."""
    low, high = (0, low) if high is None else (low, high)
    return randint(low, high, input.shape, requires_grad=requires_grad, **_like(input, dtype, device))


__all__ = ["Generator", "default_generator", "manual_seed", "initial_seed", "seed", "get_rng_state", "set_rng_state",
           "tensor", "from_numpy", "zeros", "ones", "empty", "full", "arange", "linspace", "eye", "randn", "rand",
           "randint", "randperm", "multinomial", "zeros_like", "ones_like", "empty_like", "full_like", "randn_like",
           "rand_like", "randint_like"]
