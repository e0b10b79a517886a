"""braze.runtime: runs compiled graphs.

- memory.py: 64-byte-aligned numpy buffers (weights, arena, scratch, staged inputs, outputs);
- executable.py: Executable, a compiled graph with its buffers, input validation and the native entry point;
- pool.py: the process-wide worker threads, which run their share of a call natively (no GIL, no wake-up);
- threads.py: how many threads a call uses (an explicit count, BRAZE_NUM_THREADS, or a size heuristic).

`Executable` is imported on first use, so importing braze does not load LLVM.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Executable"]


def __getattr__(name: str) -> Any:
    if name == "Executable":
        from .executable import Executable
        return Executable
    raise AttributeError(f"module 'braze.runtime' has no attribute {name!r}")
