"""Declarative facts about frontend functions that tools read without running them (braze.api_table's table of
the supported torch API): which functions run eagerly only, and why."""
from __future__ import annotations

from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def eager_only(reason: str) -> Callable[[F], F]:
    """Mark a function that runs eagerly and raises a TraceError when traced; `reason` says why."""
    def mark(fn: F) -> F:
        fn.__braze_eager_only__ = reason  # type: ignore[attr-defined]
        return fn
    return mark


def eager_only_reason(fn: Any) -> str | None:
    """Why `fn` (a function, method or property getter) is eager only; None when it traces."""
    return getattr(getattr(fn, "fget", fn), "__braze_eager_only__", None)
