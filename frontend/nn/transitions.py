"""Module state transitions and traversals: train/eval/valid, gradient configuration, visit/map, devices.

Every parameter has a configured gradient requirement and an effective one (configured AND autodiff
enabled); every flag a configured and an effective value. valid() returns a snapshot with autodiff and
flags off that keeps the configured state; train() applies the configured state; no_grad() and
set_require_grad() configure gradients only; freeze()/unfreeze() configure gradients and flags.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from braze.ir.errors import BrazeError, DTypeError
from braze.ir.types import as_dtype

from ..device import Device, as_device, is_device_like
from ..tensor import Tensor
from ..trace_context import TRACE
from .flag import Flag
from .group import ParamGroup
from .hooks import REGISTRIES as HOOK_REGISTRIES
from .param import Param
from .reparam import map_param, own_entries
from .visitor import ModuleMapper, ModuleVisitor, join_path, tensor_kind

if TYPE_CHECKING:
    from .module import Module


class TransitionsMixin:
    """The document-001 interface of Module: transitions, gradient configuration, visitors, devices."""

    # --- training state ------------------------------------------------------------------------------------
    @property
    def training(self) -> bool:
        """Whether this module behaves as in training: its own flags' effective values, else the last mode set."""
        own = self.__dict__["_flags"]
        if own:
            return any(f.value for f in own.values())
        mode = self.__dict__["_training"]
        watcher = TRACE.watcher
        if watcher is not None:
            watcher.read_mode(self, mode)  # type: ignore[arg-type]
        return mode

    def _set_own_mode(self, mode: bool) -> None:
        self.__dict__["_training"] = mode
        for _, flag in own_entries(self, "_flags"):  # type: ignore[arg-type]
            if mode:
                flag.apply_configured()
            else:
                flag.disable()

    def _float_params(self) -> Iterator[tuple[str, Param]]:
        """The floating-point parameters (not buffers), each once: what gradient configuration touches."""
        for path, p in self.named_parameters():  # type: ignore[attr-defined]
            if p.lazy_dtype.is_float:
                yield path, p

    def train(self, mode: bool = True) -> Module:
        """Enable autodiff and apply the configured gradient requirements and flag values, in place.

        train(False) is eval(). Explicit freezing (freeze, no_grad, set_require_grad) is configuration, so
        train() keeps it.
        """
        if not mode:
            return self.eval()
        for _, p in self.named_param_slots():  # type: ignore[attr-defined]
            p._set_autodiff(True)
        for m in self.modules():  # type: ignore[attr-defined]
            m._set_own_mode(True)
        return self  # type: ignore[return-value]

    def eval(self) -> Module:
        """Turn every flag's effective value off (configured values kept), in place; parameters untouched."""
        for m in self.modules():  # type: ignore[attr-defined]
            m._set_own_mode(False)
        return self  # type: ignore[return-value]

    def valid(self) -> Module:
        """A validation snapshot: new module objects whose parameters share arrays without autodiff and whose
        flags are off, with the configured state retained. The original is left untouched.
        """
        return self._snapshot({})

    def _snapshot(self, memo: dict[int, Any]) -> Module:
        done = memo.get(id(self))
        if done is not None:
            return done
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        d = new.__dict__
        d.update(self.__dict__)
        d["_parameters"] = {n: _snapshot_param(p, memo) for n, p in self.__dict__["_parameters"].items()}
        d["_buffers"] = {n: _snapshot_param(p, memo, own_array=True) for n, p in self.__dict__["_buffers"].items()}
        d["_modules"] = {n: None if m is None else m._snapshot(memo) for n, m in self.__dict__["_modules"].items()}
        d["_flags"] = {n: _snapshot_flag(f, memo) for n, f in self.__dict__["_flags"].items()}
        if "_non_persistent" in d:
            d["_non_persistent"] = set(d["_non_persistent"])
        for registry in HOOK_REGISTRIES:  # the snapshot runs the hooks it was taken with; later ones are its own
            d[registry] = dict(d.get(registry, {}))
        d["_training"] = False
        return new

    def set_require_grad(self, require_grad: bool) -> Module:
        """Configure every floating-point parameter to require grad or not; flags are left unchanged."""
        for _, p in self._float_params():
            p.set_require_grad(require_grad)
        return self  # type: ignore[return-value]

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        return self.set_require_grad(requires_grad)

    def no_grad(self) -> Module:
        """Persistently disable gradients of every floating-point parameter; flags keep their behaviour."""
        return self.set_require_grad(False)

    def freeze(self) -> Module:
        """Stop gradients of every floating-point parameter and disable every flag (configured and effective)."""
        self.set_require_grad(False)
        for flag in self.flags():  # type: ignore[attr-defined]
            flag.set(False)
        return self  # type: ignore[return-value]

    def unfreeze(self) -> Module:
        """Configure every floating-point parameter to require grad and enable every flag (now, not restored)."""
        self.set_require_grad(True)
        for flag in self.flags():  # type: ignore[attr-defined]
            flag.set(True)
        return self  # type: ignore[return-value]

    def set_require_grad_group(self, group: ParamGroup, require_grad: bool) -> Module:
        """Configure the matched floating-point parameters only; matched flags and all else are untouched."""
        for path, p in self._float_params():
            if group.matches(path, p):
                p.set_require_grad(require_grad)
        return self  # type: ignore[return-value]

    def _flag_group(self, group: ParamGroup, value: bool) -> None:
        for path, flag in self.named_flags():  # type: ignore[attr-defined]
            if group.matches(path, flag):
                flag.set(value)

    def freeze_group(self, group: ParamGroup) -> Module:
        """Stop gradients of matched floating-point parameters and disable matched flags; the rest untouched."""
        self.set_require_grad_group(group, False)
        self._flag_group(group, False)
        return self  # type: ignore[return-value]

    def unfreeze_group(self, group: ParamGroup) -> Module:
        """Make matched floating-point parameters require grad and enable matched flags; the rest untouched."""
        self.set_require_grad_group(group, True)
        self._flag_group(group, True)
        return self  # type: ignore[return-value]

    # --- visit / map ---------------------------------------------------------------------------------------
    def visit(self, visitor: ModuleVisitor) -> None:
        """Call the visitor's hooks for every parameter, buffer and flag (each once), bracketed by module paths."""
        self._visit("", visitor, set())

    def _visit(self, path: str, visitor: ModuleVisitor, seen: set[int]) -> None:
        seen.add(id(self))
        visitor.enter_module(path, self)  # type: ignore[arg-type]
        d = self.__dict__
        for registry in ("_parameters", "_buffers"):
            for name, p in own_entries(self, registry):  # type: ignore[arg-type]
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    getattr(visitor, f"visit_{tensor_kind(p)}")(join_path(path, name), p)
        for name, flag in own_entries(self, "_flags"):  # type: ignore[arg-type]
            if id(flag) not in seen:
                seen.add(id(flag))
                visitor.visit_flag(join_path(path, name), flag)
        for name, child in d["_modules"].items():
            if child is not None and id(child) not in seen:
                child._visit(join_path(path, name), visitor, seen)
        visitor.exit_module(path, self)  # type: ignore[arg-type]

    def map(self, mapper: ModuleMapper) -> Module:
        """Replace every parameter, buffer and flag by what the mapper's hook returns, in place; returns self."""
        self._map("", mapper, {}, set())
        return self  # type: ignore[return-value]

    def _map(self, path: str, mapper: ModuleMapper, memo: dict[int, Any], seen: set[int]) -> None:
        seen.add(id(self))
        mapper.enter_module(path, self)  # type: ignore[arg-type]
        d = self.__dict__
        for registry in ("_parameters", "_buffers"):
            slots = d[registry]
            for name, p in slots.items():
                if p is not None:
                    slots[name] = _mapped(memo, p, lambda: map_param(mapper, join_path(path, name), p), Param)
        flags = d["_flags"]
        for name, flag in flags.items():
            flags[name] = _mapped(memo, flag, lambda: mapper.map_flag(join_path(path, name), flag), Flag)
        for name, child in d["_modules"].items():
            if child is not None and id(child) not in seen:
                child._map(join_path(path, name), mapper, memo, seen)
        mapper.exit_module(path, self)  # type: ignore[arg-type]

    # --- sizes and devices ---------------------------------------------------------------------------------
    def num_params(self) -> int:
        """The number of parameter elements (buffers excluded), without initializing lazy parameters."""
        return sum(int(np.prod(p.lazy_shape, dtype=np.int64)) for p in self.parameters())  # type: ignore

    def collect_devices(self, devices: list[Device]) -> list[Device]:
        """`devices` plus every device of the module tree, without duplicates; lazy values are not initialized."""
        out = list(devices)
        for _, p in self.named_param_slots():  # type: ignore[attr-defined]
            if p.lazy_device not in out:
                out.append(p.lazy_device)
        return out

    def devices(self) -> list[Device]:
        """Every device of the module tree, without duplicates (lazy parameters report their init device)."""
        return self.collect_devices([])

    def to_device(self, device: Any) -> Module:
        """Move every value to `device` through a recorded copy: tracked parameters become intermediates."""
        device = as_device(device)
        for _, p in self.named_param_slots():  # type: ignore[attr-defined]
            p.to_device(device)
        return self  # type: ignore[return-value]

    def fork(self, device: Any) -> Module:
        """Copy every value to `device` as an independent leaf (own autodiff graph), same autodiff context."""
        device = as_device(device)
        for _, p in self.named_param_slots():  # type: ignore[attr-defined]
            p.fork(device)
        return self  # type: ignore[return-value]

    def to(self, *args: Any, device: Any = None, dtype: Any = None, non_blocking: bool = False) -> Module:
        """Move every parameter and buffer to a device and/or cast floating ones to a dtype, in place; a tensor
        argument gives both (its device and dtype), as torch's module.to(tensor); non_blocking changes nothing.

        Each value becomes a new tensor (build optimizers afterwards); gradients move and cast with it.
        """
        for a in args:
            if isinstance(a, (Tensor, Param)):
                device, dtype = a.device, a.dtype
            elif is_device_like(a):
                device = a
            else:
                dtype = a
        target = None if device is None else as_device(device)
        cast = None if dtype is None else as_dtype(dtype)
        if cast is not None and not cast.is_float:
            raise BrazeError(f"Module.to: only floating-point dtypes convert a module, got {cast}")
        for _, p in self.named_param_slots():  # type: ignore[attr-defined]
            _relocate(p, target, cast)
        return self  # type: ignore[return-value]

    def cpu(self) -> Module:
        """self, as Tensor.cpu(): every braze device is host memory."""
        return self  # type: ignore[return-value]

    def float(self) -> Module:
        return self.to(dtype="float32")

    def double(self) -> Module:
        return self.to(dtype="float64")

    def half(self) -> Module:
        """torch's float16 cast; braze has no float16, so this names the dtypes it has."""
        raise DTypeError("Module.half: float16 is not a braze dtype; floating-point parameters are float32 or "
                         "float64 (use .float() or .double())")

    def bfloat16(self) -> Module:
        """torch's bfloat16 cast; braze has no bfloat16, so this names the dtypes it has."""
        raise DTypeError("Module.bfloat16: bfloat16 is not a braze dtype; floating-point parameters are float32 or "
                         "float64 (use .float() or .double())")

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient: None (as torch's default), or zeros when set_to_none is False."""
        for p in self.parameters():  # type: ignore[attr-defined]
            g = p.grad
            if g is not None:
                p.grad = None if set_to_none else Tensor._wrap(np.zeros_like(g._data), True, g._device)


def _snapshot_param(p: Param | None, memo: dict[int, Any], own_array: bool = False) -> Param | None:
    """A parameter's validation clone: same id and configuration, value shared without autodiff.

    Buffers get their own array: layers update running statistics in place while training, and that
    must not reach a snapshot taken earlier.
    """
    if p is None:
        return None
    done = memo.get(id(p))
    if done is None:
        done = memo[id(p)] = p.clone()
        if own_array and done._value is not None:
            v = done._value
            done._set_value(Tensor._wrap(np.array(v._data, copy=True), v._autodiff, v._device))
        done._set_autodiff(False)
    return done


def _snapshot_flag(flag: Flag, memo: dict[int, Any]) -> Flag:
    done = memo.get(id(flag))
    if done is None:
        done = memo[id(flag)] = flag.clone().disable()
    return done


def _mapped(memo: dict[int, Any], value: Any, fn: Any, kind: type) -> Any:
    """The mapper's result for `value`, computed once per object so shared values stay shared."""
    done = memo.get(id(value))
    if done is None:
        done = fn()
        if not isinstance(done, kind):
            raise BrazeError(f"Module.map: the mapper returned {type(done).__name__} for a {kind.__name__}; "
                             f"map hooks must return a {kind.__name__}")
        memo[id(value)] = done
    return done


def _relocate(p: Param, device: Device | None, dtype: Any) -> None:
    """Give `p` a new value tensor on `device` (cast to float `dtype`), carrying its gradient along."""
    if dtype is not None and not p.lazy_dtype.is_float:
        dtype = None
    if dtype is None and (device is None or p.lazy_device == device):
        return
    grad = p.grad
    if device is not None:
        p.fork(device)
    if p._packed is not None:  # a quantized value keeps its codes and dequantizes to the new dtype
        p._packed = p._packed if dtype is None else p._packed.with_dtype(dtype)
        return
    if dtype is not None and p.lazy_dtype != dtype:
        v = p.base()
        p._set_value(Tensor._wrap(v._data.astype(dtype.numpy), v._autodiff, v._device))
    if grad is not None:
        array = grad._data if dtype is None else grad._data.astype(dtype.numpy)
        p.grad = Tensor._wrap(np.array(array, copy=True), True, p.lazy_device)
