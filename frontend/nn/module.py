"""Module: named parameters, buffers, flags and children, registered by attribute assignment.

The structure (children plus parameters, recursive with dotted prefixes) makes parameter names line up
with a state_dict, and mirrors torch.nn so PyTorch code reads across unchanged. Training-state transitions,
traversal with visitors and device placement live in `transitions.TransitionsMixin`.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable

import numpy as np

from braze.ir.errors import BrazeError

from ..tensor import Tensor
from ..trace_context import TRACE
from . import display as _display
from . import hooks as _hooks
from .flag import Flag
from .lazy import alias
from .param import Param
from .recordable import Recordable
from .reparam import own_entries
from .reparam_module import ReparamMixin
from .state import StateMixin
from .transitions import TransitionsMixin
from .visitor import join_path

_REGISTRIES = ("_parameters", "_buffers", "_modules", "_flags")


def _buffer(value: Any, persistent: bool) -> Param:
    """A buffer: a Param that never requires grad, over the tensor's array (as torch keeps the tensor)."""
    t = value if isinstance(value, Tensor) else Tensor(value)
    p = Param(t.detach(), requires_grad=False)
    p.is_buffer, p.persistent = True, persistent
    return p


class Module(StateMixin, Recordable, TransitionsMixin, ReparamMixin, _hooks.HooksMixin):
    """Base class of layers and models: subclass it, assign parameters and children, define forward."""

    def __init__(self) -> None:
        d = self.__dict__
        d["_parameters"], d["_buffers"], d["_modules"], d["_flags"] = {}, {}, {}, {}
        d["_training"] = True
        for registry in _hooks.REGISTRIES:
            d[registry] = {}

    # --- registration ------------------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        if "_parameters" not in d:
            if isinstance(value, (Param, Tensor, Module, Flag)):
                raise BrazeError(f"cannot assign {type(value).__name__} {name!r} before Module.__init__() "
                                 f"(call super().__init__() first in {type(self).__name__}.__init__)")
            object.__setattr__(self, name, value)
        elif isinstance(value, Param):
            self._unregister(name)
            (d["_buffers"] if value.is_buffer else d["_parameters"])[name] = value
        elif isinstance(value, Module):
            self._unregister(name)
            d["_modules"][name] = value
        elif isinstance(value, Flag):
            self._unregister(name)
            d["_flags"][name] = value
        elif isinstance(value, Tensor):
            self._assign_tensor(name, value)
        elif value is None and any(name in d[r] for r in _REGISTRIES[:3]):
            for r in _REGISTRIES[:3]:
                if name in d[r]:
                    d[r][name] = None
        elif name == "training" and isinstance(value, (bool, np.bool_)):
            self._set_own_mode(bool(value))
        else:
            self._unregister(name)
            object.__setattr__(self, name, value)

    def _assign_tensor(self, name: str, value: Tensor) -> None:
        """A tensor replaces a buffer's value, or makes (or replaces, keeping the id) a parameter."""
        d = self.__dict__
        if name in d["_buffers"]:
            old = d["_buffers"][name]
            if old is None:
                d["_buffers"][name] = _buffer(value, name not in d.get("_non_persistent", ()))
            elif not (TRACE.watcher is not None and TRACE.watcher.assign(old, value)):  # traced: a buffer update
                old._set_value(alias(value, old.is_autodiff()))
            return
        old = d["_parameters"].get(name)
        self._unregister(name)
        if old is None:
            d["_parameters"][name] = Param(value)
        else:
            d["_parameters"][name] = Param(value, id=old.id, requires_grad=old.is_require_grad())

    def _unregister(self, name: str) -> None:
        d = self.__dict__
        for r in _REGISTRIES:
            d[r].pop(name, None)
        d.get("_non_persistent", set()).discard(name)
        if name in d and name != "_training":
            del d[name]

    def register_parameter(self, name: str, param: Param | Tensor | None) -> None:
        """Register `param` (a Param, a Tensor to wrap, or None for an absent optional parameter)."""
        self._check_name(name)
        if param is None:
            self._unregister(name)
            self.__dict__["_parameters"][name] = None
        else:
            setattr(self, name, param if isinstance(param, Param) else Param(param))

    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        """Register state that travels with the module but is never trained; raises if the tensor requires grad.

        A persistent buffer appears in state_dict (so it saves, loads and matches a torch checkpoint) but
        never in parameters(), so no optimizer sees it.
        """
        self._check_name(name)
        if tensor is not None and getattr(tensor, "requires_grad", False):
            raise BrazeError(f"register_buffer: buffer {name!r} requires grad; buffers are never trained "
                             f"(pass tensor.detach(), or register a parameter)")
        self._unregister(name)
        d = self.__dict__
        if not persistent:
            d.setdefault("_non_persistent", set()).add(name)
        d["_buffers"][name] = None if tensor is None else _buffer(tensor, persistent)

    def add_module(self, name: str, module: Module | None) -> None:
        self._check_name(name)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {type(module).__name__} is not a Module")
        self._unregister(name)
        self.__dict__["_modules"][name] = module

    register_module = add_module

    def register_flag(self, name: str, flag: Flag | bool = True) -> Flag:
        """Register a control flag (a Flag, or a bool for a new one) and return it."""
        self._check_name(name)
        flag = flag if isinstance(flag, Flag) else Flag(bool(flag))
        setattr(self, name, flag)
        return flag

    def _check_name(self, name: str) -> None:
        if "_parameters" not in self.__dict__:
            raise BrazeError(f"call super().__init__() in {type(self).__name__}.__init__ before registering {name!r}")
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"invalid attribute name {name!r} (a non-empty string without '.')")

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for r in _REGISTRIES:
            registry = d.get(r)
            if registry is not None and name in registry:
                return registry[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        d = self.__dict__
        for r in _REGISTRIES:
            if name in d.get(r, ()):
                del d[r][name]
                return
        object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        names = set(super().__dir__())
        for r in _REGISTRIES:
            names.update(self.__dict__.get(r, ()))
        return sorted(names)

    def flag(self, name: str) -> Flag:
        """This module's own flag `name` (module.training reads flags as a bool; this gives the Flag)."""
        flags = self.__dict__["_flags"]
        if name not in flags:
            raise AttributeError(f"{type(self).__name__} has no flag {name!r} (flags: {sorted(flags)})")
        return flags[name]

    def get_submodule(self, target: str) -> Module:
        """The descendant at dotted path `target` ("" is self)."""
        module: Module = self
        for part in target.split(".") if target else ():
            child = module.__dict__["_modules"].get(part)
            if child is None:
                raise AttributeError(f"{type(module).__name__} has no submodule {part!r} (in path {target!r})")
            module = child
        return module

    def get_parameter(self, target: str) -> Param:
        owner, _, name = target.rpartition(".")
        p = self.get_submodule(owner).__dict__["_parameters"].get(name)
        if p is None:
            raise AttributeError(f"no parameter {target!r}")
        return p

    # --- traversal -----------------------------------------------------------------------------------------
    def named_modules(self, memo: set[int] | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """(dotted path, module) for self first, then descendants depth-first in registration order."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in self.__dict__["_modules"].items():
            if child is not None:
                yield from child.named_modules(memo, join_path(prefix, name), remove_duplicate)

    def modules(self, remove_duplicate: bool = True) -> Iterator[Module]:
        """self, then every descendant depth-first (a shared module once unless remove_duplicate is False)."""
        for _, m in self.named_modules(remove_duplicate=remove_duplicate):
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        for name, child in self.__dict__["_modules"].items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def _named_values(self, registry: str, prefix: str, recurse: bool,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Any]]:
        seen: set[int] = set()
        modules = self.named_modules(prefix=prefix) if recurse else iter([(prefix, self)])
        for path, module in modules:
            for name, value in own_entries(module, registry):
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield join_path(path, name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Param]]:
        """(dotted name, Param) for every parameter (not buffers); a shared parameter appears once."""
        return self._named_values("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Param]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, value Tensor) for every buffer."""
        for name, p in self._named_values("_buffers", prefix, recurse, remove_duplicate):
            yield name, p.val()

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, t in self.named_buffers(recurse=recurse):
            yield t

    def named_flags(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Flag]]:
        """(dotted name, Flag) for every control flag."""
        return self._named_values("_flags", prefix, recurse)

    def flags(self, recurse: bool = True) -> Iterator[Flag]:
        for _, f in self.named_flags(recurse=recurse):
            yield f

    def named_param_slots(self, prefix: str = "") -> Iterator[tuple[str, Param]]:
        """(dotted path, Param) for parameters and buffers alike (each once), with the nested parameters of
        reparameterizations ("fc.weight.lora_a"): what records and tracers walk."""
        seen: set[int] = set()
        for path, module in self.named_modules(prefix=prefix):
            for registry in ("_parameters", "_buffers"):
                for name, p in own_entries(module, registry):
                    if p is not None and id(p) not in seen:
                        seen.add(id(p))
                        yield join_path(path, name), p

    # --- interface -----------------------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        watcher = TRACE.watcher
        if watcher is None:
            if _hooks.has_hooks(self):
                return _hooks.call_with_hooks(self, args, kwargs, tracing=False)
            return self.forward(*args, **kwargs)
        watcher.enter_module(self)  # a tracer tags the nodes forward creates with this module's path
        try:
            if _hooks.has_hooks(self):
                return _hooks.call_with_hooks(self, args, kwargs, tracing=True)
            return self.forward(*args, **kwargs)
        finally:
            watcher.exit_module(self)

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call fn on every descendant (children first) and on self; returns self (torch's Module.apply)."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def extra_repr(self) -> str:
        """Hyper-parameters shown in the repr header; layers override it."""
        return ""

    def __repr__(self) -> str:
        """torch's format: `Name(extra_repr)`, with `(name): child` lines for children."""
        return _display.torch_repr(self)

    def format(self) -> str:
        """The detailed tree: extra_repr, each parameter's dtype, shape and state, flags, and the parameter count."""
        return _display.detailed(self)
