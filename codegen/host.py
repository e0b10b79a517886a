"""The host's target without loading LLVM: what llvmlite said about this machine, recorded in the disk cache.

Asking LLVM for the host triple, CPU name and features loads llvmlite (30-60 ms), most of a warm compile whose code
is found as a shared object (codegen/shared_object.py). The answer depends only on the CPU, the llvmlite build, the
CPU asked for (BRAZE_CPU) and the code generator, so it is kept as a cache entry (codegen/cache.py; no payload, the
Target in its meta; left out of the cache's counters, which count compiled code) keyed by a fingerprint of exactly those: the identification lines of the first processor in
/proc/cpuinfo (vendor, family, model, stepping, model name, flags or features), the path, size and modification time
of llvmlite's native library, the requested CPU name and builder_version(). Another CPU (a cache directory shared
between machines), another llvmlite or another braze gives another key, so a record is never applied to a machine it
does not describe. Without /proc/cpuinfo or llvmlite's library on disk there is no fingerprint, and LLVM is asked as
before; with the cache off it is asked once per process.
"""
from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Callable

from . import cache
from .module_layout import builder_version
from .target import Target

CPUINFO = Path("/proc/cpuinfo")
# The lines of a processor's block that name the CPU and what it can do (x86, then AArch64 spellings); clock
# speeds, core ids and bogomips vary between reads and are left out.
_CPU_FIELDS = frozenset({"vendor_id", "cpu family", "model", "model name", "stepping", "flags", "CPU implementer",
                         "CPU architecture", "CPU variant", "CPU part", "CPU revision", "Features"})
_MAX_CPUINFO_BYTES = 1 << 16  # one processor's block is a few kilobytes

_lock = threading.Lock()
_known: dict[tuple[str, bool], Target] = {}
_identities: dict[Target, str] = {}  # the identity recorded with each target read from a record


def recorded_target(requested: str, ask: Callable[[str], Target], *, runnable: bool = False) -> Target:
    """The target for the CPU named `requested` (empty: the host's own; `runnable`: limited to what this host runs,
    codegen/target.py's runnable_features), from this host's record, else `ask`ed of LLVM and recorded; the same
    Target object for the rest of the process."""
    with _lock:
        known = _known.get((requested, runnable))
    if known is not None:
        return known
    key = _record_key(requested + (" runnable here" if runnable else ""))
    target = _read_record(key) if key is not None and cache.enabled() else None
    if target is None:
        target = ask(requested)
        if key is not None and cache.enabled():
            cache.store(key, b"", (), _record_meta(target), counted=False)
    with _lock:
        return _known.setdefault((requested, runnable), target)


def recorded_identity(target: Target) -> str | None:
    """The identity recorded with a target read from a host record (exactly that target: same fields), or None."""
    with _lock:
        return _identities.get(target)


def _record_key(requested: str) -> str | None:
    """The cache key of the host record for `requested`, or None when this host has no fingerprint."""
    cpu, library = _cpu_identification(), _llvmlite_library()
    if cpu is None or library is None:
        return None
    return cache.make_key("\n".join(["braze-host-target", builder_version(), f"cpu {requested}", library, cpu]), "")


def _cpu_identification() -> str | None:
    """The identifying lines of the first processor in /proc/cpuinfo, or None where there is none."""
    try:
        with CPUINFO.open("rb") as f:
            text = f.read(_MAX_CPUINFO_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    lines = []
    for line in text.splitlines():
        if not line.strip():
            break  # the end of the first processor's block
        name = line.split(":", 1)[0].strip()
        if name in _CPU_FIELDS:
            lines.append(" ".join(line.split()))
    return "\n".join(lines) if lines else None


def _llvmlite_library() -> str | None:
    """The path, size and modification time of llvmlite's native library, found without importing llvmlite."""
    try:
        spec = importlib.util.find_spec("llvmlite")
    except (ImportError, ValueError):
        return None
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    found = sorted(p for folder in folders for p in (Path(folder) / "binding").glob("libllvmlite*"))
    if not found:
        return None
    info = found[0].stat()
    return f"{found[0]} {info.st_size} {info.st_mtime_ns}"


def _record_meta(target: Target) -> dict[str, object]:
    return {"triple": target.triple, "cpu": target.cpu, "features": target.features,
            "vector_width": target.vector_width, "identity": target.identity}


def _read_record(key: str) -> Target | None:
    """The Target of the record under `key`, or None (a malformed record is discarded)."""
    entry = cache.load(key, counted=False)
    if entry is None:
        return None
    meta = entry.meta
    strings = [meta.get(name) for name in ("triple", "cpu", "features", "identity")]
    width = meta.get("vector_width")
    if not all(isinstance(s, str) for s in strings) or not strings[3] or type(width) is not int or width <= 0:
        cache.discard(key, counted=False)
        return None
    triple, cpu, features, identity = strings
    target = Target(triple, cpu, features, width)
    with _lock:
        _identities[target] = identity
    return target
