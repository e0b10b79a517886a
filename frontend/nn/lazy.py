"""The lazy initialization a parameter shares with its clones, and the value-aliasing functions Param uses.

A LazyInit runs its initializer at most once; every parameter holding it (a parameter and its clones)
resolves to the same array. Holders are tracked by identity so a transfer can tell whether the state is
shared (then it must initialize where it is) or private (then it may initialize on the destination).
"""
from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from braze.ir.errors import ShapeError
from braze.ir.types import DType

from ..device import Device
from ..tensor import Tensor, as_array

if TYPE_CHECKING:
    from .param import Param

Init = Callable[[Device, bool], Any]


class Holders:
    """The live parameters holding one pending initialization, by identity (a Param's == is elementwise)."""

    __slots__ = ("refs",)

    def __init__(self) -> None:
        self.refs: dict[int, weakref.ref[Param]] = {}

    def add(self, param: Param) -> None:
        key, refs = id(param), self.refs
        refs[key] = weakref.ref(param, lambda _, key=key: refs.pop(key, None))

    def discard(self, param: Param) -> None:
        self.refs.pop(id(param), None)

    def __len__(self) -> int:
        return len(self.refs)


class LazyInit:
    """One pending initialization, shared by a parameter and its clones; it runs at most once."""

    __slots__ = ("init", "device", "shape", "dtype", "value", "lock", "holders")

    def __init__(self, init: Init, device: Device, shape: tuple[int, ...], dtype: DType) -> None:
        self.init: Init | None = init
        self.device, self.shape, self.dtype = device, shape, dtype
        self.value: Tensor | None = None
        self.lock = threading.RLock()
        self.holders = Holders()

    def shared(self) -> bool:
        """True once initialized or while another live clone holds this state."""
        return self.value is not None or len(self.holders) > 1

    def resolve(self, requires_grad: bool) -> Tensor:
        with self.lock:
            if self.value is None:
                assert self.init is not None
                self.value = self._checked(self.init(self.device, requires_grad))
                self.init = None  # release what the initializer holds
            return self.value

    def _checked(self, result: Any) -> Tensor:
        t = as_tensor(result)
        if tuple(t.shape) != self.shape:
            raise ShapeError(f"Param: the initializer returned shape {tuple(t.shape)}, declared {self.shape}")
        if not t.is_leaf:
            t = t.detach()
        if t.device != self.device:
            t = Tensor._wrap(np.array(t._data, copy=True), t.is_autodiff(), self.device)
        return t


def as_tensor(value: Any) -> Tensor:
    """A Tensor for a Tensor, anything with __braze_tensor__ (a Param), or array-like data (copied)."""
    if isinstance(value, Tensor):
        return value
    if hasattr(type(value), "__braze_tensor__"):
        return value.__braze_tensor__()
    return Tensor._wrap(np.array(as_array(value), copy=True))


def alias(t: Tensor, autodiff: bool | None = None) -> Tensor:
    """A new Tensor object over the same array: a leaf in the given autodiff context, or `t`'s recorded result."""
    if autodiff is None and t._node is not None:
        return Tensor._make(t._data, t._node, t._index, t._autodiff, t._device)
    out = Tensor._wrap(t._data, t._autodiff if autodiff is None else autodiff, t._device)
    out._requires_grad = t._requires_grad and out._autodiff
    return out
