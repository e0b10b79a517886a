"""The Python state a traced forward pass may not change in its modules, because a compiled graph cannot repeat it.

A graph runs no Python. A forward pass that counts its calls, appends to a list kept on the module or keeps a
traced tensor as an attribute would do so once, while tracing, and never when the graph runs: the compiled model
(or a compiled training step) would silently part from the eager one, and a traced tensor left on a module has no
value once tracing ends. trace() takes a ModuleState of the traced module tree before forward runs and calls its
check() after, which raises a TraceError naming the module's path and the attribute:

- an attribute of plain data (numbers, strings, None, and lists, tuples, dicts and sets of them) that forward set,
  changed or deleted;
- an attribute, a parameter or a buffer that forward bound to a traced tensor (or to a container holding one);
- a parameter or buffer that forward updated in place (`self.count.add_(1)`): assigning the new value is the
  update a graph can return.

What forward may do: assign a buffer (it becomes a graph output, written back by whoever runs the graph), build an
attribute from constants on first use (a cache of rotary tables, a lazily made child module or parameter whose
values do not depend on the traced inputs), and read anything.
"""
from __future__ import annotations

import copy
from typing import Any

from braze.ir.errors import TraceError

from .nn import hooks as _hooks
from .nn.module import Module
from .nn.param import Param
from .tensor import Tensor
from .traced import Abstract, TracedTensor

_PLAIN = (bool, int, float, complex, str, bytes, type(None))
_PLAIN_ITEMS = 10_000  # larger containers are compared by identity only (a snapshot would copy them)
_REGISTRIES = ("_parameters", "_buffers", "_modules", "_flags")
_OWN = frozenset((*_REGISTRIES, *_hooks.REGISTRIES, "_training", "_non_persistent"))
_DATA, _OBJECT = "data", "object"


class ModuleState:
    """A snapshot of every module's own attributes and registry entries under `root`, to compare after tracing."""

    def __init__(self, root: Module) -> None:
        self._modules = [(path, module, _attributes(module), _entries(module))
                         for path, module in root.named_modules()]
        self._registries = [(module, {r: dict(vars(module)[r]) for r in _REGISTRIES}) for _, module, _, _ in
                            self._modules]
        self._arrays = [(tensor, tensor._data) for _, module, _, entries in self._modules
                        for _, param in entries.values() for _, tensor in param.stored_tensors()]

    def check(self) -> None:
        """Raise a TraceError for the first change forward made that a compiled graph cannot repeat, after putting
        every module's attributes and registries back as they were (the model is left as tracing found it)."""
        try:
            self._check()
        except TraceError:
            self._restore()
            raise

    def _restore(self) -> None:
        for (_, module, before, _), (_, registries) in zip(self._modules, self._registries):
            d = vars(module)
            for name in [name for name in d if name not in _OWN and name not in before]:
                del d[name]
            for name, (kind, value) in before.items():
                d[name] = copy.deepcopy(value) if kind == _DATA else value
            for registry, entries in registries.items():
                d[registry].clear()
                d[registry].update(entries)
        for tensor, data in self._arrays:
            tensor._data = data

    def _check(self) -> None:
        for path, module, before, entries in self._modules:
            where = f"module '{path}' ({type(module).__name__})" if path else f"the model ({type(module).__name__})"
            after = _attributes(module)
            registered = {name for r in _REGISTRIES for name in vars(module)[r]}
            for name in sorted(set(before) | set(after)):
                if name not in after and name in registered and before[name][1] is None:
                    continue  # None replaced by a parameter, buffer or child module: checked with the entries
                _check_attribute(where, name, before.get(name), after.get(name), vars(module).get(name))
            for name, (kind, param) in _entries(module).items():
                if not _holds_traced(param):
                    continue
                if entries.get(name, ("", None))[1] is param:
                    raise TraceError(f"forward of {where} updates {kind} {name!r} in place: a graph computes new "
                                     f"values rather than writing into its leaves; assign the new value instead "
                                     f"(self.{name} = ...), which a graph returns as a {kind} update")
                raise TraceError(f"forward of {where} binds {kind} {name!r} to a traced tensor: its value exists "
                                 f"only inside the graph; return it as an output instead")


def _check_attribute(where: str, name: str, before: tuple[str, Any] | None, after: tuple[str, Any] | None,
                     value: Any) -> None:
    if before is None and after is None:
        return
    if before is not None and after is not None and (before[1] is after[1] or (
            before[0] == after[0] == _DATA and before[1] == after[1])):
        return
    if after is not None and _holds_traced(value):
        raise TraceError(f"forward of {where} keeps a traced tensor in attribute {name!r}: its value exists only "
                         f"inside the graph; return it as an output instead")
    lazily_made = after is not None and after[0] == _OBJECT and (before is None or before[0] == _OBJECT
                                                                or before[1] is None)
    if not lazily_made:
        was = "unset" if before is None else _shown(before)
        now = "deleted" if after is None else _shown(after)
        raise TraceError(f"forward of {where} changes attribute {name!r} ({was} -> {now}): a compiled graph runs "
                         f"no Python, so the change would happen once, while tracing, and never on a call; keep "
                         f"such state outside forward, or in a buffer")


def _attributes(module: Module) -> dict[str, tuple[str, Any]]:
    """The module's own attributes (not its registries or braze's bookkeeping): plain data as a deep copy, anything
    else by identity."""
    return {name: ((_DATA, copy.deepcopy(value)) if _plain(value) else (_OBJECT, value))
            for name, value in vars(module).items() if name not in _OWN}


def _entries(module: Module) -> dict[str, tuple[str, Any]]:
    """The module's parameters and buffers by name: (what it is, the Param)."""
    d = vars(module)
    return {**{name: ("parameter", p) for name, p in d["_parameters"].items() if p is not None},
            **{name: ("buffer", p) for name, p in d["_buffers"].items() if p is not None}}


def _plain(value: Any, budget: list[int] | None = None) -> bool:
    budget = [_PLAIN_ITEMS] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        return False
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_plain(item, budget) for item in value)
    if isinstance(value, dict):
        return all(_plain(k, budget) and _plain(v, budget) for k, v in value.items())
    return False


def _holds_traced(value: Any, depth: int = 0) -> bool:
    """Whether `value` is, or holds within a few levels of containers, a traced tensor (or a tensor made from one,
    such as its detached copy: its data is the traced tensor's Abstract, not an array)."""
    if isinstance(value, Tensor):
        return isinstance(value, TracedTensor) or isinstance(value._data, Abstract)
    if isinstance(value, Param):
        return any(_holds_traced(t) for _, t in value.stored_tensors())
    if depth < 4 and isinstance(value, (list, tuple, set, frozenset)):
        return any(_holds_traced(item, depth + 1) for item in value)
    if depth < 4 and isinstance(value, dict):
        return any(_holds_traced(item, depth + 1) for item in value.values())
    return False


def _shown(state: tuple[str, Any]) -> str:
    text = repr(state[1]) if state[0] == _DATA else f"a {type(state[1]).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["ModuleState"]
