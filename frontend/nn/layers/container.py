"""Containers Sequential, ModuleList, ModuleDict, ParameterList and ParameterDict, as torch.nn's: children and
parameters named "0", "1", ... or by key."""
from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Any, Iterable, Iterator, Mapping

from ...tensor import Tensor
from ..display import repeated_repr
from ..module import Module
from ..param import Param


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


def _as_parameter(value: Any) -> Any:
    """A plain Tensor becomes a Parameter, as torch's parameter containers convert what is put in; anything else
    (a Parameter, a module, any object) is kept as it is."""
    return Param(value) if isinstance(value, Tensor) else value


def _entry(container: Module, name: str) -> Any:
    """What a parameter container holds under `name`: a registered parameter, buffer or module, else the plain
    attribute. Read from the registries first, so a key that is also a method name ("keys") still gives the entry."""
    d = container.__dict__
    for registry in ("_parameters", "_buffers", "_modules"):
        if name in d[registry]:
            return d[registry][name]
    return d[name]


# torch.typename of a tensor of each dtype, which ParameterDict's repr shows
_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int64": "Long",
               "int32": "Int", "int8": "Char", "uint8": "Byte", "bool": "Bool"}


def _entry_lines(pairs: Iterable[tuple[Any, Any]], describe_dtype: Any) -> str:
    """torch's extra_repr of a parameter container: `  (key): Parameter containing: [<dtype> of size 3x4]` per
    tensor entry, `  (key): Object of type: <type>` for anything else."""
    lines = []
    for k, p in pairs:
        if isinstance(p, Param):
            kind = "Tensor" if p.is_buffer else "Parameter"
            size = "x".join(str(s) for s in p.lazy_shape)
            lines.append(f"  ({k}): {kind} containing: [{describe_dtype(p.lazy_dtype)} of size {size}]")
        else:
            lines.append(f"  ({k}): Object of type: {type(p).__name__}")
    return "\n".join(lines)


class ParameterList(Module):
    """A list of parameters registered under "0", "1", ..., so named_parameters, state dicts, optimizers, dtype
    conversion and tracing see them; a plain Tensor put in becomes a Parameter, any other object is kept as is."""

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        self._size = 0
        if values is not None:
            self += values

    def _name(self, idx: int) -> str:
        i, size = operator.index(idx), self._size
        if not -size <= i < size:
            raise IndexError(f"index {idx} is out of range")
        return str(i % size)

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            out = type(self)()
            return out.extend([self[i] for i in range(*idx.indices(len(self)))])
        return _entry(self, self._name(idx))

    def __setitem__(self, idx: int, param: Any) -> None:
        setattr(self, self._name(idx), _as_parameter(param))

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return iter([self[i] for i in range(len(self))])

    def __iadd__(self, parameters: Iterable[Any]) -> ParameterList:
        return self.extend(parameters)

    def __dir__(self) -> list[str]:
        return [key for key in super().__dir__() if not key.isdigit()]

    def append(self, value: Any) -> ParameterList:
        """Add `value` at the end (a Tensor as a Parameter); returns self."""
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values: Iterable[Any]) -> ParameterList:
        """Append each element of `values` (an iterable, never a tensor); returns self."""
        if not isinstance(values, Iterable) or isinstance(values, (Tensor, Param)):
            raise TypeError(f"ParameterList.extend should be called with an iterable, but got {type(values).__name__}")
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return _entry_lines(enumerate(self), lambda dtype: f"torch.{dtype}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """An ordered mapping of string keys to parameters, registered under their keys (state dict key "pdict.key");
    a plain Tensor put in becomes a Parameter, any other object is kept as is. A plain dict given to the
    constructor or update() enters in sorted key order, as torch; an OrderedDict, a ParameterDict or pairs keep
    their order."""

    def __init__(self, parameters: Any = None) -> None:
        super().__init__()
        self._keys: dict[str, None] = {}
        if parameters is not None:
            self.update(parameters)

    def _snapshot(self, memo: dict[int, Any]) -> Module:
        """valid()'s snapshot, with a key order of its own (a shared one would let the snapshot's keys change the
        original's)."""
        new = super()._snapshot(memo)
        new.__dict__["_keys"] = dict(self.__dict__["_keys"])
        return new

    @staticmethod
    def _key(key: Any) -> str:
        if not isinstance(key, str):
            raise TypeError(f"Index given to ParameterDict cannot be used as a key as it is not a string (type is "
                            f"'{type(key).__name__}').")
        return key

    def __getitem__(self, key: str) -> Any:
        if self._key(key) not in self._keys:
            raise KeyError(key)
        return _entry(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self._keys[self._key(key)] = None
        setattr(self, key, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __reversed__(self) -> Iterator[str]:
        return reversed(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def copy(self) -> ParameterDict:
        """A new ParameterDict holding the same entries (the same Parameter objects), in order."""
        return ParameterDict(OrderedDict((k, self[k]) for k in self._keys))

    def setdefault(self, key: str, default: Any = None) -> Any:
        """The entry `key`, first set to `default` (a Tensor as a Parameter) when absent."""
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self) -> None:
        """Remove every entry."""
        for k in list(self._keys):
            del self[k]

    def pop(self, key: str) -> Any:
        """Remove the entry `key` and return it."""
        value = self[key]
        del self[key]
        return value

    def popitem(self) -> tuple[str, Any]:
        """Remove and return the last inserted (key, entry) pair."""
        if not self._keys:
            raise KeyError("popitem(): ParameterDict is empty")
        key = next(reversed(self._keys))
        return key, self.pop(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def fromkeys(self, keys: Iterable[str], default: Any = None) -> ParameterDict:
        """A new ParameterDict with every key of `keys` set to `default`."""
        return ParameterDict((k, default) for k in keys)

    def keys(self) -> Iterable[str]:
        return self._keys.keys()

    def items(self) -> Iterable[tuple[str, Any]]:
        return ((k, self[k]) for k in self._keys)

    def values(self) -> Iterable[Any]:
        return (self[k] for k in self._keys)

    def update(self, parameters: Any) -> None:
        """Add or replace entries from a mapping (a plain dict in sorted key order, as torch) or (key, value) pairs."""
        if not isinstance(parameters, Iterable):
            raise TypeError(f"ParametersDict.update should be called with an iterable of key/value pairs, but got "
                            f"{type(parameters).__name__}")
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            pairs: Iterable[Any] = parameters.items()
        elif isinstance(parameters, Mapping):
            pairs = sorted(parameters.items())
        else:
            pairs = parameters
        for j, pair in enumerate(pairs):
            if not isinstance(pair, Iterable):
                raise TypeError(f"ParameterDict update sequence element #{j} should be Iterable; is "
                                f"{type(pair).__name__}")
            if len(pair) != 2:
                raise ValueError(f"ParameterDict update sequence element #{j} has length {len(pair)}; 2 is required")
            self[pair[0]] = pair[1]

    def extra_repr(self) -> str:
        return _entry_lines(self.items(), lambda dtype: f"torch.{_TYPE_NAMES.get(str(dtype), str(dtype))}Tensor")

    def __call__(self, input: Any) -> Any:
        raise RuntimeError("ParameterDict should not be called.")

    def __or__(self, other: ParameterDict) -> ParameterDict:
        merged = self.copy()
        merged.update(other)
        return merged

    def __ror__(self, other: ParameterDict) -> ParameterDict:
        merged = other.copy()
        merged.update(self)
        return merged

    def __ior__(self, other: ParameterDict) -> ParameterDict:
        self.update(other)
        return self


__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]
