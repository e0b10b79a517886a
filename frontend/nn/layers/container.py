"""Containers Sequential, ModuleList and ModuleDict, as torch.nn's: children named "0", "1", ... or by key."""
from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Any, Iterable, Iterator, Mapping

from ..display import repeated_repr
from ..module import Module


def _put(container: Module, name: str, module: Module) -> None:
    """Register `module` as child `name`; a child already there is replaced in its position, as a dict would."""
    if name in container._modules:
        if not isinstance(module, Module):
            raise TypeError(f"{type(container).__name__}: {type(module).__name__} is not a Module")
        container._modules[name] = module
    else:
        container.add_module(name, module)


class _Indexed(Module):
    """Children kept under the names "0".."n-1" and renumbered after insertions and deletions, as torch.

    The same module may be held at several positions (iteration and len count each position).
    """

    def _items(self) -> list[Module]:
        return list(self._modules.values())

    def _position(self, idx: int) -> int:
        i, size = operator.index(idx), len(self._modules)
        if not -size <= i < size:
            raise IndexError(f"index {idx} is out of range for a {type(self).__name__} of length {size}")
        return i % size

    def _rebuild(self, modules: list[Module]) -> None:
        """Re-register `modules` as the children "0".."n-1", in order."""
        for name in list(self._modules):
            delattr(self, name)
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._items())

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return self._slice(idx)
        return self._items()[self._position(idx)]

    def _slice(self, idx: slice) -> Any:
        return type(self)(self._items()[idx])

    def __setitem__(self, idx: int, module: Module) -> None:
        _put(self, list(self._modules)[self._position(idx)], module)

    def __delitem__(self, idx: int | slice) -> None:
        items = self._items()
        if isinstance(idx, slice):
            del items[idx]
        else:
            del items[self._position(idx)]
        self._rebuild(items)

    def append(self, module: Module) -> Any:
        """Add `module` at the end; returns self."""
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> Any:
        """Append each module of `modules`; returns self."""
        for m in list(modules):
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Put `module` before position `index` (as list.insert) and renumber the later children."""
        items = self._items()
        items.insert(index, module)
        self._rebuild(items)

    def pop(self, index: int = -1) -> Module:
        """Remove and return the child at `index`, renumbering the rest."""
        items = self._items()
        module = items.pop(self._position(index))
        self._rebuild(items)
        return module


class Sequential(_Indexed):
    """Children applied in order, each to the previous one's output.

    Built from modules (named "0", "1", ...) or from one OrderedDict of name -> module. Indexing gives a
    child, slicing a new Sequential of the same children under their names.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def _slice(self, idx: slice) -> Sequential:
        return type(self)(OrderedDict(list(self._modules.items())[idx]))

    def forward(self, input: Any) -> Any:
        for module in self._modules.values():
            input = module(input)
        return input

    def __add__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise TypeError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        return Sequential(*self._items(), *other._items())


class ModuleList(_Indexed):
    """A list of child modules, registered so their parameters belong to the parent; it has no forward."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList([*self._items(), *other])

    def __repr__(self) -> str:
        """torch's ModuleList repr: runs of equal children fold into `(i-j): n x child`."""
        return repeated_repr(self)


class ModuleDict(Module):
    """An ordered mapping of names to child modules (the keys are the children's names); it has no forward."""

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        _put(self, key, module)

    def __delitem__(self, key: str) -> None:
        if key not in self._modules:
            raise KeyError(key)
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._modules))

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def keys(self) -> Iterable[str]:
        return self._modules.keys()

    def items(self) -> Iterable[tuple[str, Module]]:
        return self._modules.items()

    def values(self) -> Iterable[Module]:
        return self._modules.values()

    def get(self, key: str, default: Any = None) -> Any:
        return self._modules.get(key, default)

    def pop(self, key: str) -> Module:
        """Remove the child `key` and return it."""
        module = self[key]
        del self[key]
        return module

    def clear(self) -> None:
        """Remove every child."""
        for key in list(self._modules):
            del self[key]

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add or replace children from a mapping or from (name, module) pairs, in their order."""
        pairs = modules.items() if isinstance(modules, (Mapping, ModuleDict)) else modules
        for j, pair in enumerate(pairs):
            if isinstance(pair, (str, bytes)) or len(pair) != 2:
                raise ValueError(f"ModuleDict update sequence element #{j} should be a (name, module) pair")
            self[pair[0]] = pair[1]


__all__ = ["Sequential", "ModuleList", "ModuleDict"]
