"""Flag: module-owned boolean control state (whether dropout or batch norm behaves as in training).

A flag has an id, a configured value (what train() applies) and an effective value (what the layer sees
now). valid() and eval() turn the effective value off and keep the configured one; freeze()/unfreeze()
set both. Flags are runtime configuration: visited by visitors, never saved in records or state dicts.
"""
from __future__ import annotations

import numpy as np

from ..tensor import Tensor
from ..trace_context import TRACE
from .param import ParamId


class Flag:
    """A boolean control value owned by a module; `bool(flag)` is its effective value."""

    __slots__ = ("id", "_configured", "_effective")

    def __init__(self, value: bool = True, *, id: int | None = None) -> None:
        self.id = ParamId() if id is None else ParamId(id)
        self._configured = self._effective = bool(value)

    @property
    def value(self) -> bool:
        """The effective value: what the owning layer uses now (a tracer records the read as a guard)."""
        watcher = TRACE.watcher
        if watcher is not None:
            watcher.read_flag(self)
        return self._effective

    @property
    def configured(self) -> bool:
        """The configured value: what train() restores."""
        return self._configured

    def set(self, value: bool) -> Flag:
        """An explicit state change: configured and effective values both become `value`; returns self."""
        self._configured = self._effective = bool(value)
        return self

    def apply_configured(self) -> Flag:
        """Make the effective value the configured one (the training transition); returns self."""
        self._effective = self._configured
        return self

    def disable(self) -> Flag:
        """Turn the effective value off and keep the configured one (the validation transition); returns self."""
        self._effective = False
        return self

    def clone(self) -> Flag:
        """A copy with the same id and values."""
        f = Flag.__new__(Flag)
        f.id, f._configured, f._effective = self.id, self._configured, self._effective
        return f

    __copy__ = clone

    def __deepcopy__(self, memo: dict[int, object]) -> Flag:
        return self.clone()

    def __bool__(self) -> bool:
        return self.value

    def __braze_tensor__(self) -> Tensor:
        """The effective value as a bool[] tensor, so a flag can be an op operand (dropout, batch norm)."""
        return Tensor._wrap(np.asarray(self._effective))

    def __repr__(self) -> str:
        configured = "" if self._configured == self._effective else f", configured={self._configured}"
        return f"Flag({self._effective}{configured}, id={int(self.id)})"
