"""Param: a tensor with an identity (ParamId), lazy initialization shared by clones, and load/save mappers.

A Param owns one value Tensor (or a lazy initializer for it) plus its configured gradient requirement.
The effective requirement is the configured one AND the value's autodiff context: a validation snapshot
holds values without autodiff, so its parameters never require grad while remembering what train() restores.

Clones share lazy initialization only: the initializer runs at most once and every clone resolves to the
same array, but each clone then owns its own Tensor object, so later transforms never propagate.
"""
from __future__ import annotations

import copy
from typing import Any, Iterable

import numpy as np

from braze.ir.errors import BrazeError, DTypeError, ShapeError
from braze.ir.types import DType, as_dtype, float32

from ..assignment import assigned
from ..device import CPU, Device, as_device
from ..size import Size
from ..tensor import Tensor, as_array
from ..trace_context import TRACE
from . import _tensorlike
from .lazy import Init, LazyInit, alias, as_tensor
from .param_id import ParamId, ParamMapper, TensorFn
from .param_module import ParamAsModule

class Param(ParamAsModule, _tensorlike.TensorLike):
    """A module parameter (or buffer): a value Tensor with an id, usable wherever a Tensor is."""

    __slots__ = ("id", "_value", "_lazy", "_require_grad", "_autodiff", "mapper", "is_buffer", "persistent",
                 "_reparam", "_packed", "__weakref__")

    def __init__(self, value: Any, *, requires_grad: bool | None = None, id: int | None = None) -> None:
        t = as_tensor(value)
        if not t.is_leaf:
            t = t.detach()
        self._setup(id, t.dtype.is_float if requires_grad is None else bool(requires_grad), t.dtype)
        self._set_value(alias(t))

    def _setup(self, id: int | None, requires_grad: bool, dtype: DType) -> None:
        if requires_grad and not dtype.is_float:
            raise DTypeError(f"Param: only floating-point parameters can require grad, got {dtype}")
        self.id = ParamId() if id is None else ParamId(id)
        self._value: Tensor | None = None
        self._lazy: LazyInit | None = None
        self._require_grad, self._autodiff = requires_grad, True
        self.mapper, self.is_buffer, self.persistent = ParamMapper(), False, True
        self._reparam: Any = None  # a Reparameterization (reparam.py) that val() composes with the base
        self._packed: Any = None  # a QuantizedTensor (quant.py) stored instead of a dense value

    # --- constructors ------------------------------------------------------------------------------------
    @classmethod
    def uninitialized(cls, init: Init, shape: Iterable[int], *, device: Any = None, requires_grad: bool = True,
                      dtype: Any = float32, id: int | None = None) -> Param:
        """A lazy parameter: `init(device, requires_grad)` builds its value on first use, at most once."""
        p = cls.__new__(cls)
        d = as_dtype(dtype)
        p._setup(id, bool(requires_grad) and d.is_float, d)
        p._lazy = LazyInit(init, as_device(device), tuple(int(s) for s in shape), d)
        p._lazy.holders.add(p)
        return p

    @classmethod
    def initialized(cls, id: int, value: Any, *, requires_grad: bool | None = None) -> Param:
        """A parameter holding `value` as is (a recorded result stays one); gradient requirement from the value."""
        t = as_tensor(value)
        p = cls.__new__(cls)
        p._setup(id, t.is_require_grad() if requires_grad is None else bool(requires_grad), t.dtype)
        p._set_value(t)
        return p

    @classmethod
    def from_mapped_value(cls, id: int, value: Any, mapper: ParamMapper) -> Param:
        p = cls.initialized(id, value)
        p.mapper = mapper
        return p

    @classmethod
    def from_tensor(cls, value: Tensor) -> Param:
        """A parameter from a float tensor; it requires grad."""
        return cls(value, requires_grad=True)

    @classmethod
    def from_data(cls, data: Any, device: Any = None) -> Param:
        """A parameter from array-like data placed on `device` (floating data requires grad)."""
        array = np.array(as_array(data), copy=True)
        return cls(Tensor._wrap(array, True, as_device(device)))

    # --- value ---------------------------------------------------------------------------------------------
    def val(self) -> Tensor:
        """The effective value (initializing lazily): the stored value, the same Tensor object on every call, or
        with a reparameterization (a LoRA adapter) its composition with the base, computed through registered ops."""
        if self._reparam is not None:
            return self._reparam.compose(self.base())
        return self.base()

    def base(self) -> Tensor:
        """The raw stored value, without any reparameterization; a quantized store gives its dequantization."""
        if self._value is None:
            if self._packed is not None:
                return self._packed.dequantize()
            self._resolve()
        assert self._value is not None
        return self._value

    @property
    def adapter(self) -> Any:
        """The reparameterization attached to this parameter (a LoraAdapter), or None."""
        return self._reparam

    def stored_tensors(self) -> tuple[tuple[str, Tensor], ...]:
        """(path suffix, Tensor) of what is stored: ("", value), or a quantized store's ".codes" and ".scales"."""
        return self._packed.stored_tensors() if self._packed is not None else (("", self.base()),)

    def into_value(self) -> Tensor:
        return self.val()

    def consume(self) -> tuple[ParamId, Tensor, ParamMapper]:
        """The id, the raw stored value and the mapper."""
        return self.id, self.base(), self.mapper

    def _resolve(self) -> None:
        lazy = self._lazy
        assert lazy is not None
        raw = lazy.resolve(self._require_grad and self._autodiff)
        self._set_value(alias(raw, self._autodiff))

    def _set_value(self, t: Tensor) -> None:
        """Install `t` as the value; a leaf gets the effective gradient requirement of this parameter."""
        if self._lazy is not None:
            self._lazy.holders.discard(self)
            self._lazy = None
        self._packed = None
        if t._device is None:  # an unplaced constant becomes a value on the default device
            t._device = CPU
        if t.is_leaf:
            t._requires_grad = self._require_grad and t._autodiff and t.dtype.is_float
        self._value = t

    @property
    def is_initialized(self) -> bool:
        """True once the value exists (initialized through this parameter or a clone sharing its state)."""
        return self._value is not None or self._packed is not None or (self._lazy is not None
                                                                       and self._lazy.value is not None)

    @property
    def lazy_shape(self) -> tuple[int, ...]:
        """The shape, without initializing."""
        return tuple(self._value.shape) if self._value is not None else self._stored_meta().shape

    @property
    def lazy_device(self) -> Device:
        """The device the value is on or will be initialized on, without initializing."""
        return self._value.device if self._value is not None else self._stored_meta().device

    @property
    def lazy_dtype(self) -> DType:
        return self._value.dtype if self._value is not None else self._stored_meta().dtype

    def _stored_meta(self) -> Any:
        """What describes a value not held densely: the quantized store or the pending initialization."""
        return self._packed if self._packed is not None else self._lazy

    @property
    def shape(self) -> Size:
        """The shape as a braze.Size (torch.Size: a tuple with numel()), without initializing."""
        return Size.of(self.lazy_shape)

    device = lazy_device
    dtype = lazy_dtype

    # --- gradients -----------------------------------------------------------------------------------------
    def _autodiff_enabled(self) -> bool:
        return self._value._autodiff if self._value is not None else self._autodiff

    @property
    def requires_grad(self) -> bool:
        """Effective: configured to require grad and the value has autodiff enabled (never for quantized codes)."""
        return self._require_grad and self._packed is None and self._autodiff_enabled()

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.set_require_grad(value)

    def requires_grad_(self, requires_grad: bool = True) -> Param:
        return self.set_require_grad(requires_grad)

    def is_require_grad(self) -> bool:
        """The configured gradient requirement (what train() applies)."""
        return self._require_grad

    def is_autodiff(self) -> bool:
        return self._autodiff_enabled()

    def set_require_grad(self, require_grad: bool) -> Param:
        """Configure whether this parameter requires grad; takes effect now when autodiff is enabled."""
        if require_grad and not self.lazy_dtype.is_float:
            raise DTypeError(f"set_require_grad: only floating-point parameters can require grad, "
                             f"got {self.lazy_dtype}")
        self._require_grad = bool(require_grad)
        v = self._value
        if v is not None and (v.is_leaf or not require_grad):
            self._set_value(v if v.is_leaf else v.detach())
        return self

    def _set_autodiff(self, enabled: bool) -> None:
        """Enter (True) or leave (False) the autodiff context; leaving gives a leaf sharing the array.

        A reparameterization follows: its nested parameters and flags enter or leave training with this one.
        """
        if self._reparam is not None:
            self._reparam.set_mode(enabled)
        if self._packed is not None:
            self._packed = self._packed.in_context(enabled)
        if self._value is None:
            self._autodiff = enabled
        elif self._value._autodiff != enabled:
            self._set_value(alias(self._value, enabled))
        elif self._value.is_leaf:
            self._set_value(self._value)

    @property
    def grad(self) -> Tensor | None:
        return self._value.grad if self._value is not None else None

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if self._value is not None:
            self._value.grad = value
        elif value is not None:
            self.val().grad = value

    # --- transforms (in place; they return self) --------------------------------------------------------
    def map(self, fn: TensorFn | Any) -> Param:
        """Replace the value by fn(value), initializing first; the configured state is kept.

        Given a ModuleMapper instead, returns what its hook for this dtype kind returns (path "").
        """
        if hasattr(fn, "map_float"):
            return getattr(fn, f"map_{self._kind()}")("", self)
        self._set_value(as_tensor(fn(self.base())))
        return self

    def init_mapper(self, fn: TensorFn) -> Param:
        """Transform the initialization value: chained lazily when uninitialized, applied now otherwise."""
        lazy = self._lazy
        if self._value is not None or lazy is None or lazy.value is not None:
            return self.map(fn)
        if not lazy.shared():
            init = lazy.init
            lazy.init = lambda device, requires_grad: fn(as_tensor(init(device, requires_grad)))  # type: ignore
            return self
        parent, own = lazy, self._require_grad
        layered = LazyInit(lambda device, requires_grad: fn(alias(parent.resolve(own))), lazy.device,
                            lazy.shape, lazy.dtype)
        lazy.holders.discard(self)
        self._lazy = layered
        layered.holders.add(self)
        return self

    def load_mapper(self, fn: TensorFn) -> Param:
        """Run `fn` on the value whenever it is loaded (after the ones registered before)."""
        self.mapper = self.mapper.with_load(fn)
        return self

    def save_mapper(self, fn: TensorFn) -> Param:
        """Run `fn` on the value whenever it is saved (after the ones registered before)."""
        self.mapper = self.mapper.with_save(fn)
        return self

    def transform_for_load(self, tensor: Any, param_id: int) -> Param:
        """Take a loaded tensor: moved to this parameter's device, through the load mapper, gradient settings kept."""
        t = as_tensor(tensor)
        device = self.lazy_device
        t = Tensor._wrap(np.array(t._data, copy=True), True, device)
        t = self.mapper.on_load(t)
        self.id = ParamId(param_id)
        self._store(t._data, device)
        return self

    def transform_for_save(self) -> Param:
        """A clone whose value went through the save mapper."""
        p = self.clone()
        p._set_value(self.mapper.on_save(p.base()))
        return p

    def __setitem__(self, index: Any, value: Any) -> None:
        """Assign into the stored value (`self.cache_k[:, :, pos] = k`), as torch's buffers and parameters take it.

        While tracing, the updated value becomes the new value through assign (a buffer update output). A
        reparameterized (LoRA) or quantized value is computed, not stored, so assigning into it is refused.
        """
        if self._reparam is not None or self._packed is not None:
            raise BrazeError("item assignment into a parameter whose value is computed (a reparameterization or a "
                             "quantized store) cannot be kept; materialize() it first")
        if TRACE.watcher is not None:
            self.assign(assigned(self.val(), index, value))
        else:
            self.base()[index] = value

    def assign(self, value: Any) -> Param:
        """Replace the value in place with a copy of `value` (cast to this dtype), keeping the Tensor object.

        While tracing, the tracer takes the assignment over (a buffer update output) and nothing is stored.
        """
        if TRACE.watcher is not None and TRACE.watcher.assign(self, value):
            return self
        if self._packed is not None:
            raise BrazeError(f"Param.assign: the parameter holds a quantized value ({self._packed.scheme}); "
                             f"materialize() it first, or load its codes and scales from a record")
        dtype = self.lazy_dtype
        array = np.asarray(value.val() if isinstance(value, Param) else value)
        if array.shape != self.lazy_shape:
            raise ShapeError(f"Param.assign: got shape {array.shape}, the parameter has shape {self.lazy_shape}")
        self._store(np.array(array, dtype=dtype.numpy, copy=True), self.lazy_device)
        return self

    def _store(self, array: np.ndarray, device: Device) -> None:
        """Write a fresh array into the value (never into the old array, which clones may share)."""
        v = self._value
        if v is not None and v.is_leaf:
            v._data = array
            self._set_value(v)
            return
        autodiff = self._autodiff_enabled()
        self._set_value(Tensor._wrap(array, autodiff, device))

    # --- devices -------------------------------------------------------------------------------------------
    def to_device(self, device: Any) -> Param:
        """Move to `device`: a recorded copy (an intermediate when tracked); lazy values initialize there."""
        device = as_device(device)
        if not self._relocated_without_value(device):
            self._set_value(self.base().to(device))
        return self

    def fork(self, device: Any) -> Param:
        """Copy to `device` as an independent leaf in the same autodiff context; lazy values initialize there."""
        device = as_device(device)
        if not self._relocated_without_value(device):
            v = self.base()
            self._set_value(Tensor._wrap(np.array(v._data, copy=True), v._autodiff, device))
        return self

    def _relocated_without_value(self, device: Device) -> bool:
        """Packed values move as they are, and a lazy value no clone shares initializes on `device` later;
        True when one of those applied and the stored dense value needs no move."""
        if self._packed is not None:
            self._packed = self._packed.to(device)
            return True
        if self._value is None and not self._lazy.shared():  # type: ignore[union-attr]
            self._lazy.device = device  # type: ignore[union-attr]
            return True
        return False

    # --- copies --------------------------------------------------------------------------------------------
    def clone(self) -> Param:
        """A cheap copy with the same id: shares pending lazy initialization, or aliases the value's array."""
        p = type(self).__new__(type(self))
        p.id, p._require_grad, p._autodiff = self.id, self._require_grad, self._autodiff
        p.mapper, p.is_buffer, p.persistent = self.mapper, self.is_buffer, self.persistent
        p._value, p._lazy = None, None
        p._reparam = None if self._reparam is None else self._reparam.clone()
        p._packed = None if self._packed is None else self._packed.clone()
        if self._value is not None:
            p._value = alias(self._value)
        elif self._lazy is not None:
            p._lazy = self._lazy
            p._lazy.holders.add(p)  # type: ignore[union-attr]
        return p

    __copy__ = clone

    def clone_from(self, source: Param) -> None:
        """Copy-assignment: become a clone of `source` (its id, configuration, and value or shared lazy state)."""
        if self._lazy is not None:
            self._lazy.holders.discard(self)
        twin = source.clone()
        for name in ("id", "_require_grad", "_autodiff", "mapper", "is_buffer", "persistent", "_value", "_lazy",
                     "_reparam", "_packed"):
            setattr(self, name, getattr(twin, name))
        if self._lazy is not None:
            self._lazy.holders.add(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Param:
        """An independent copy with the same id: its own array, or its own (not shared) lazy initializer."""
        p = self.clone()
        if self._reparam is not None:
            p._reparam = copy.deepcopy(self._reparam, memo)
        lazy = p._lazy
        if p._packed is not None:
            p._packed = copy.deepcopy(p._packed, memo)
        elif lazy is not None and lazy.init is not None:
            own = LazyInit(lazy.init, lazy.device, lazy.shape, lazy.dtype)
            lazy.holders.discard(p)
            p._lazy = own
            own.holders.add(p)
        else:
            v = p.base()
            p._set_value(Tensor._wrap(np.array(v._data, copy=True), v._autodiff, v._device))
        return p

    def __repr__(self) -> str:
        kind = "Buffer" if self.is_buffer else "Param"
        state = "" if self.is_initialized else ", lazy"
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"{kind}(id={int(self.id)}, {self.lazy_dtype}{list(self.lazy_shape)}, {self.lazy_device}{grad}{state})"
