"""The running trace of the current thread: what braze.trace installs while it records, one object per thread.

Three hooks make a trace: the op interceptor every `dispatch.apply` call consults, the watcher Module, Flag and
Param report their events to (nn/watch.py), and the frames of the running braze.trace calls (where a walk for the
user's source line stops). They are thread-local, as grad mode is: a trace in one thread never sees the eager
ops, module calls or flag reads of another.
"""
from __future__ import annotations

import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .nn.watch import Watcher

Interceptor = Callable[[str, tuple[Any, ...], dict[str, Any]], Any]


class TraceContext(threading.local):
    """This thread's interceptor, watcher and braze.trace frames (none, none and empty while nothing traces)."""

    def __init__(self) -> None:
        self.interceptor: Interceptor | None = None
        self.watcher: Watcher | None = None
        self.entries: list[FrameType] = []


TRACE = TraceContext()
