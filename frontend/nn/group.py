"""ParamGroup: a selection of a module's values (parameters, buffers, flags) by id, path glob or predicate.

Groups scope the group variants of the training-state methods (set_require_grad_group, freeze_group,
unfreeze_group), records of part of a module, and optimizer parameter groups.
"""
from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING, Any, Callable, Iterable

from .flag import Flag
from .param import Param, ParamId

if TYPE_CHECKING:
    from .module import Module

Value = Param | Flag
Matcher = Callable[[str, Value], bool]


class ParamGroup:
    """Matches values by (dotted path, value); combine groups with |, & and ~."""

    __slots__ = ("_match", "_description")

    def __init__(self, match: Matcher, description: str = "predicate") -> None:
        self._match, self._description = match, description

    @classmethod
    def ids(cls, ids: Iterable[int]) -> ParamGroup:
        """The values whose id is in `ids`."""
        wanted = frozenset(int(i) for i in ids)
        return cls(lambda path, value: int(value.id) in wanted, f"ids({len(wanted)})")

    @classmethod
    def ids_from_module(cls, module: Module) -> ParamGroup:
        """Every parameter, buffer and flag of `module` (usually a submodule): its whole subtree, by id."""
        ids = [p.id for _, p in module.named_param_slots()] + [f.id for _, f in module.named_flags()]
        group = cls.ids(ids)
        group._description = f"ids_from_module({type(module).__name__}, {len(ids)} values)"
        return group

    @classmethod
    def paths(cls, *patterns: str) -> ParamGroup:
        """The values whose dotted path matches one of the glob patterns ("encoder.*", "*.bias")."""
        if not patterns:
            raise ValueError("ParamGroup.paths: give at least one pattern")
        return cls(lambda path, value: any(fnmatch.fnmatchcase(path, p) for p in patterns),
                   f"paths({', '.join(map(repr, patterns))})")

    glob = paths

    @classmethod
    def predicate(cls, fn: Matcher) -> ParamGroup:
        """The values for which fn(path, value) is true."""
        return cls(fn, getattr(fn, "__name__", "predicate"))

    @classmethod
    def all(cls) -> ParamGroup:
        return cls(lambda path, value: True, "all")

    def matches(self, path: str, value: Value) -> bool:
        return bool(self._match(path, value))

    def __or__(self, other: ParamGroup) -> ParamGroup:
        return ParamGroup(lambda path, v: self.matches(path, v) or other.matches(path, v),
                          f"{self._description} | {other._description}")

    def __and__(self, other: ParamGroup) -> ParamGroup:
        return ParamGroup(lambda path, v: self.matches(path, v) and other.matches(path, v),
                          f"{self._description} & {other._description}")

    def __invert__(self) -> ParamGroup:
        return ParamGroup(lambda path, v: not self.matches(path, v), f"~({self._description})")

    def __sub__(self, other: ParamGroup) -> ParamGroup:
        return self & ~other

    def __repr__(self) -> str:
        return f"ParamGroup({self._description})"

    __str__ = __repr__


def group_ids(group: ParamGroup, module: Module) -> set[ParamId]:
    """The ids of the values of `module` that `group` matches."""
    out: set[Any] = {p.id for path, p in module.named_param_slots() if group.matches(path, p)}
    out.update(f.id for path, f in module.named_flags() if group.matches(path, f))
    return out
