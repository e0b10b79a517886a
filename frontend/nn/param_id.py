"""A parameter's identity (ParamId: unique, stable across saves and clones) and its load/save mappers
(ParamMapper), the two small value types a Param carries beside its tensor."""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

from braze.ir.errors import BrazeError

from ..read_limits import MAX_ID
from ..tensor import Tensor
from .lazy import as_tensor

_ID_LOCK = threading.Lock()
_NEXT_ID = 0


class ParamId(int):
    """A parameter's identity: `ParamId()` draws a new one; `ParamId(n)` restores a loaded one.

    New ids come from a process-wide counter that moves past every restored id, so they never collide.
    """

    def __new__(cls, value: int | None = None) -> ParamId:
        global _NEXT_ID
        with _ID_LOCK:
            value = _NEXT_ID if value is None else int(value)
            if not 0 <= value <= MAX_ID:
                raise BrazeError(f"ParamId: ids are non-negative and at most {MAX_ID} (a signed 64-bit integer in "
                                 f"IR text), got {value}")
            _NEXT_ID = max(_NEXT_ID, value + 1)
        return super().__new__(cls, value)

    def __repr__(self) -> str:
        return f"ParamId({int(self)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return ParamId, (int(self),)


TensorFn = Callable[[Tensor], Tensor]


class ParamMapper:
    """The transformations a parameter's value goes through when loaded and when saved (applied in order)."""

    __slots__ = ("load", "save")

    def __init__(self, load: Iterable[TensorFn] = (), save: Iterable[TensorFn] = ()) -> None:
        self.load, self.save = tuple(load), tuple(save)

    def on_load(self, tensor: Tensor) -> Tensor:
        for fn in self.load:
            tensor = as_tensor(fn(tensor))
        return tensor

    def on_save(self, tensor: Tensor) -> Tensor:
        for fn in self.save:
            tensor = as_tensor(fn(tensor))
        return tensor

    def with_load(self, fn: TensorFn) -> ParamMapper:
        return ParamMapper(self.load + (fn,), self.save)

    def with_save(self, fn: TensorFn) -> ParamMapper:
        return ParamMapper(self.load, self.save + (fn,))

    def __repr__(self) -> str:
        return f"ParamMapper(load={len(self.load)}, save={len(self.save)})"
