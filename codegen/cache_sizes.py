"""The host's data cache sizes (and the L1's ways), which size the GEMM's cache blocks (see gemm_kernel.tiling_for).

Read once from Linux's sysfs (the caches of CPU 0); where that is unavailable or unreadable, the sizes of a
typical current x86 core stand in. Blocking only changes speed, never results, so a wrong guess is harmless.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class CacheSizes:
    """Bytes of the L1 data cache and L2 cache of one core, and of the L3 share of one core; the L1's ways."""

    l1d: int = 32 * 1024
    l2: int = 512 * 1024
    l3_per_core: int = 2 * 1024 * 1024
    l1d_ways: int = 8


def _parse_size(text: str) -> int | None:
    """'32K', '1024K', '32M' or a plain byte count as bytes (None for anything else)."""
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    return int(digits) * scale if digits.isdigit() and int(digits) > 0 else None


def _count(path: Path) -> int | None:
    """A positive count written in a sysfs file, or None (absent or anything else)."""
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text.isdigit() and int(text) > 0 else None


def _shared_by(cpu_list: str) -> int:
    """How many CPUs a sysfs shared_cpu_list such as '0-3,8-11' names (at least 1)."""
    count = 0
    for part in cpu_list.strip().split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            count += int(high) - int(low) + 1 if high else 1
    return max(count, 1)


def read_cache_sizes(root: Path = SYSFS) -> CacheSizes:
    """The cache sizes under a sysfs cache directory (index0, index1, ...), defaults for what is missing."""
    found: dict[str, int] = {}
    try:
        entries = sorted(root.glob("index*"))
        for entry in entries:
            level = (entry / "level").read_text().strip()
            kind = (entry / "type").read_text().strip()
            size = _parse_size((entry / "size").read_text())
            if size is None or kind == "Instruction":
                continue
            if level == "1":
                found["l1d"] = size
                ways = _count(entry / "ways_of_associativity")
                if ways is not None:
                    found["l1d_ways"] = ways
            elif level == "2":
                found["l2"] = size
            elif level == "3":
                shared = entry / "shared_cpu_list"
                found["l3_per_core"] = size // (_shared_by(shared.read_text()) if shared.exists() else 1)
    except (OSError, ValueError):
        pass
    return CacheSizes(**found)


@functools.lru_cache(maxsize=None)
def host_cache_sizes() -> CacheSizes:
    """The host's cache sizes, read once per process."""
    return read_cache_sizes() if os.name == "posix" else CacheSizes()


__all__ = ["CacheSizes", "host_cache_sizes", "read_cache_sizes"]
