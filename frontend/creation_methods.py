"""Tensor methods that make new tensors like this one (new_zeros, new_full, ...) or refill it in place with random
values (normal_, uniform_), as HF-style weight init calls them under no_grad.

The new_* methods default to this tensor's dtype and device; the in-place fills are outside autodiff (copy_).
"""
from __future__ import annotations

from typing import Any

from . import creation as C
from .creation import Generator, default_generator
from .tensor import Tensor


def _keywords(self: Tensor, dtype: Any, device: Any, requires_grad: bool) -> dict[str, Any]:
    return {"dtype": self.dtype if dtype is None else dtype, "device": self.device if device is None else device,
            "requires_grad": requires_grad}


def new_zeros(self: Tensor, *size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Zeros of `size` with this tensor's dtype and device unless given."""
    return C.zeros(*size, **_keywords(self, dtype, device, requires_grad))


def new_ones(self: Tensor, *size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Ones of `size` with this tensor's dtype and device unless given."""
    return C.ones(*size, **_keywords(self, dtype, device, requires_grad))


def new_full(self: Tensor, size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """`fill_value` in a tensor of `size` with this tensor's dtype and device unless given."""
    return C.full(size, fill_value, **_keywords(self, dtype, device, requires_grad))


def new_tensor(self: Tensor, data: Any, *, dtype: Any = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:
    """A copy of `data` with this tensor's dtype and device unless given."""
    return C.tensor(data, **_keywords(self, dtype, device, requires_grad))


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Generator | None = None) -> Tensor:
    """Refill with normal samples of `mean` and `std` in place; returns self."""
    rng = (generator or default_generator).numpy
    return self.copy_(rng.normal(mean, std, self.shape))


def uniform_(self: Tensor, *bounds: float, generator: Generator | None = None, **named: float) -> Tensor:
    """Refill with samples uniform in [from, to) (torch's names; defaults 0 and 1) in place; returns self."""
    unknown = set(named) - {"from", "to"}
    if unknown or len(bounds) > 2:
        raise TypeError(f"uniform_(): takes from and to, got {sorted(unknown) or bounds}")
    low, high = (*bounds, *(None,) * (2 - len(bounds)))
    low = named.get("from", 0.0 if low is None else low)
    high = named.get("to", 1.0 if high is None else high)
    rng = (generator or default_generator).numpy
    return self.copy_(rng.uniform(low, high, self.shape))


new_empty = new_zeros

for _fn in (new_zeros, new_ones, new_full, new_tensor, normal_, uniform_):
    setattr(Tensor, _fn.__name__, _fn)
Tensor.new_empty = new_empty
