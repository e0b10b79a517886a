"""ModuleVisitor and ModuleMapper: the hooks Module.visit and Module.map call for every value in a module tree.

Tensor values (parameters and buffers) go to the hook of their dtype kind (float, int, bool), control flags
to the flag hook; enter_module/exit_module bracket each module with its dotted path ("" for the root).
Every hook defaults to doing nothing (visitor) or returning its argument unchanged (mapper).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .flag import Flag
from .param import Param

if TYPE_CHECKING:
    from .module import Module


def join_path(prefix: str, name: str) -> str:
    """The dotted path of `name` inside the module at `prefix` ("" is the root)."""
    return f"{prefix}.{name}" if prefix else name


def tensor_kind(param: Param) -> str:
    """"float", "int" or "bool": which hook a parameter goes to (from its dtype, without initializing it)."""
    return param._kind()


class ModuleVisitor:
    """Read-only traversal hooks; subclass and override the ones you need."""

    def enter_module(self, path: str, module: Module) -> None:
        """Called before a module's values and children."""

    def exit_module(self, path: str, module: Module) -> None:
        """Called after a module's values and children."""

    def visit_float(self, path: str, param: Param) -> None:
        """A floating-point parameter or buffer."""

    def visit_int(self, path: str, param: Param) -> None:
        """An integer parameter or buffer."""

    def visit_bool(self, path: str, param: Param) -> None:
        """A boolean parameter or buffer."""

    def visit_flag(self, path: str, flag: Flag) -> None:
        """A module-owned control flag."""


class ModuleMapper:
    """Transforming traversal hooks: each map_* returns the value that replaces its argument in the module."""

    def enter_module(self, path: str, module: Module) -> None:
        """Called before a module's values and children."""

    def exit_module(self, path: str, module: Module) -> None:
        """Called after a module's values and children."""

    def map_float(self, path: str, param: Param) -> Param:
        return param

    def map_int(self, path: str, param: Param) -> Param:
        return param

    def map_bool(self, path: str, param: Param) -> Param:
        return param

    def map_flag(self, path: str, flag: Flag) -> Flag:
        return flag
