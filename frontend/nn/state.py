"""Module state: state_dict / load_state_dict, torch's names (records, document 001's, are in recordable.py).

A state dict maps dotted names to numpy arrays for the parameters and persistent buffers; loading validates
every entry first and changes nothing when any check fails.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from braze.ir.errors import RecordError
from braze.ir.types import DType

from .param import Param
from .reparam import own_entries
from .visitor import join_path

if TYPE_CHECKING:
    from .module import Module


class IncompatibleKeys(NamedTuple):
    """What load_state_dict(strict=False) did not load: module keys absent from the dict, and extra dict keys."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class StateMixin:
    """The state-dict methods of Module (torch's names)."""

    # --- state dict ----------------------------------------------------------------------------------------
    def _state_slots(self, prefix: str = "") -> Iterator[tuple[str, Param]]:
        """(key, Param) for parameters (with reparameterizations' nested ones, "fc.weight.lora_a") and persistent
        buffers under every path that reaches them."""
        d = self.__dict__
        for name, p in own_entries(self, "_parameters"):  # type: ignore[arg-type]
            if p is not None:
                yield join_path(prefix, name), p
        for name, p in d["_buffers"].items():
            if p is not None and p.persistent:
                yield join_path(prefix, name), p
        for name, child in d["_modules"].items():
            if child is not None:
                yield from child._state_slots(join_path(prefix, name))

    def state_dict(self, prefix: str = "") -> dict[str, np.ndarray]:
        """Parameters and persistent buffers by dotted name, as numpy arrays (sharing the module's memory); a
        quantized parameter as its "<name>.codes" and "<name>.scales", as records hold it."""
        return {key + suffix: t._data for key, p in self._state_slots(prefix) for suffix, t in p.stored_tensors()}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy values in by name, in place, keeping each entry's dtype, device and gradient requirement.

        Everything is checked before anything changes; every missing or unexpected key (when strict), shape
        mismatch and unconvertible value is reported in one RecordError, and the module is left unchanged.
        """
        slots = dict(self._state_slots())
        stored = {key + suffix: (p, suffix, shape, dtype) for key, p in slots.items()
                  for suffix, shape, dtype in _layout(p)}
        missing = [k for k in stored if k not in state_dict]
        unexpected = [k for k in state_dict if k not in stored]
        problems: list[str] = []
        if strict and missing:
            problems.append(f"missing keys: {', '.join(missing)}")
        if strict and unexpected:
            problems.append(f"unexpected keys: {', '.join(unexpected)}")
        arrays: dict[str, np.ndarray] = {}
        for key, (p, suffix, shape, dtype) in stored.items():
            if key not in state_dict:
                continue
            try:
                array = np.asarray(state_dict[key])
            except Exception as e:  # any object's __array__ may fail; report it with its key
                problems.append(f"{key}: cannot convert {type(state_dict[key]).__name__} to an array ({e})")
                continue
            if array.dtype.kind not in "biuf":
                problems.append(f"{key}: unsupported dtype {array.dtype} (parameter dtype {p.lazy_dtype})")
            elif suffix == ".codes" and array.dtype != dtype.numpy:  # a cast would change what codes mean
                problems.append(f"{key}: quantized codes must be {dtype}, got {array.dtype}")
            elif array.shape != shape:
                problems.append(f"{key}: shape mismatch: the state dict has {list(array.shape)}, "
                                f"the module has {list(shape)}")
            else:
                arrays[key] = array
        if problems:
            raise RecordError(f"load_state_dict into {type(self).__name__}: " + "; ".join(problems))
        for key, array in arrays.items():
            p, suffix, _, _ = stored[key]
            if suffix:
                p._packed = p._packed.replaced(suffix, array)
            else:
                p.assign(array)
        return IncompatibleKeys(missing, unexpected)


def _layout(p: Param) -> tuple[tuple[str, tuple[int, ...], DType], ...]:
    """(key suffix, shape, dtype) of what a parameter stores, without initializing it."""
    if p._packed is not None:
        return p._packed.layout()
    return (("", tuple(p.lazy_shape), p.lazy_dtype),)
