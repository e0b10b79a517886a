"""Module-level events a tracer must see besides op applications: module calls, flag and mode reads, assignments.

Op applications reach a tracer through `dispatch.intercept`; these events do not go through `apply`, so Module,
Flag and Param report them to the current thread's watcher (TRACE.watcher, frontend/trace_context.py). braze.trace
installs a Watcher for the duration of one trace (frontend/trace.py); eagerly there is none and each event costs
one thread-local lookup.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator

from ..trace_context import TRACE

if TYPE_CHECKING:
    from .flag import Flag
    from .module import Module
    from .param import Param


class Watcher:
    """The callbacks; this base class ignores every event."""

    def enter_module(self, module: Module) -> None:
        """`module.__call__` starts (its forward runs next)."""

    def exit_module(self, module: Module) -> None:
        """`module.__call__` ends, normally or with an exception."""

    def read_flag(self, flag: Flag) -> None:
        """Python code reads a flag's value (`bool(flag)`, `flag.value`, `module.training`)."""

    def read_mode(self, module: Module, value: bool) -> None:
        """Python code reads `module.training` of a module that owns no flags."""

    def assign(self, param: Param, value: Any) -> bool:
        """`param.assign(value)` is called; True when the watcher took it over (nothing must be stored)."""
        return False


@contextlib.contextmanager
def watching(watcher: Watcher) -> Iterator[Watcher]:
    """Report this thread's events to `watcher` inside the block (the previous watcher, if any, is restored after)."""
    previous, TRACE.watcher = TRACE.watcher, watcher
    try:
        yield watcher
    finally:
        TRACE.watcher = previous
