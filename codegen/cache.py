"""The disk cache of compiled objects: a second compile of the same LLVM IR loads machine code in about a millisecond.

An entry is keyed by the sha256 of the LLVM IR text and the target identity (triple, CPU name, feature string,
optimization level, llvmlite version), or, for the object of a whole graph, by the digest of the optimized graph's
text, the target and the code generator's version (codegen/module_layout.py), so that a warm load finds the object
without building LLVM IR. Its file holds a magic line, a JSON header with the key, the exported symbols, the
sha256 and size of the payload and a `meta` object (what the runtime needs beside the code: a whole graph's module
layout; empty for a plain module), then the object file itself. A truncated, altered or foreign entry
fails those checks: it is deleted and rebuilt, never handed to the linker. Entries are written atomically (a
temporary file, then os.replace), so concurrent processes never see half an entry.

Environment: BRAZE_CACHE=0 disables the cache; BRAZE_CACHE_DIR moves it (default: $XDG_CACHE_HOME/braze or
~/.cache/braze).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

CACHE_ENV = "BRAZE_CACHE"
CACHE_DIR_ENV = "BRAZE_CACHE_DIR"
MAGIC = b"BRAZE-OBJECT 1\n"
SUFFIX = ".bzo"

_lock = threading.Lock()


@dataclass
class CacheStats:
    """Counters since the process started (or the last reset): tests read these instead of timing."""

    hits: int = 0       # a valid entry was loaded
    misses: int = 0     # no entry: compiled and stored
    rebuilds: int = 0   # a corrupt or foreign entry was deleted and rebuilt
    stores: int = 0     # entries written
    write_errors: int = 0  # entries that could not be written (read-only or full directory)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


_stats = CacheStats()


@dataclass(frozen=True)
class CacheEntry:
    """A validated cache entry: the object file bytes, the symbols it exports and its JSON meta object."""

    key: str
    payload: bytes
    symbols: tuple[str, ...]
    meta: dict = field(default_factory=dict)


def stats() -> CacheStats:
    """The live counters."""
    return _stats


def reset_stats() -> None:
    """Zero every counter."""
    with _lock:
        for name in CacheStats.__dataclass_fields__:
            setattr(_stats, name, 0)


def count(name: str) -> None:
    """Increment one counter (hits, misses, rebuilds, stores or write_errors)."""
    with _lock:
        setattr(_stats, name, getattr(_stats, name) + 1)


def enabled() -> bool:
    """False when BRAZE_CACHE is set to 0, off, false or no."""
    return os.environ.get(CACHE_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def cache_dir() -> Path:
    """The cache directory: BRAZE_CACHE_DIR, else the user cache directory's braze folder."""
    explicit = os.environ.get(CACHE_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "braze"


def make_key(ir_text: str, target_identity: str) -> str:
    """The sha256 hex digest identifying one LLVM module compiled for one target."""
    h = hashlib.sha256()
    for part in (target_identity, ir_text):
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def entry_path(key: str) -> Path:
    """Where the entry for `key` lives."""
    return cache_dir() / f"{key}{SUFFIX}"


def encode_entry(key: str, payload: bytes, symbols: tuple[str, ...], meta: dict | None = None) -> bytes:
    """The bytes of a cache file: magic, a one-line JSON header, then the payload."""
    header = {"key": key, "size": len(payload), "sha256": hashlib.sha256(payload).hexdigest(),
              "symbols": list(symbols), "meta": dict(meta or {})}
    return MAGIC + json.dumps(header, sort_keys=True).encode("ascii") + b"\n" + payload


def decode_entry(key: str, data: bytes) -> CacheEntry | None:
    """The entry in `data` if it is intact and belongs to `key`, else None."""
    if not data.startswith(MAGIC):
        return None
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        return None
    try:
        header = json.loads(data[len(MAGIC):end].decode("ascii"))
        payload = data[end + 1:]
        valid = (isinstance(header, dict) and header.get("key") == key and header.get("size") == len(payload)
                 and header.get("sha256") == hashlib.sha256(payload).hexdigest())
        symbols = tuple(str(s) for s in header.get("symbols", ())) if valid else ()
        meta = header.get("meta", {}) if valid else {}
    except (ValueError, UnicodeDecodeError, TypeError, AttributeError):
        return None
    return CacheEntry(key, payload, symbols, meta) if valid and symbols and isinstance(meta, dict) else None


def load(key: str) -> CacheEntry | None:
    """The valid entry for `key`, or None; counts a hit, a miss, or a rebuild (a bad entry, which is deleted)."""
    path = entry_path(key)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        count("misses")
        return None
    except OSError:
        count("rebuilds")
        _remove(path)
        return None
    entry = decode_entry(key, data)
    if entry is None:
        count("rebuilds")
        _remove(path)
        return None
    count("hits")
    return entry


def store(key: str, payload: bytes, symbols: tuple[str, ...], meta: dict | None = None) -> bool:
    """Write an entry atomically; returns False (and counts a write error) when the directory is not writable."""
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(encode_entry(key, payload, symbols, meta))
            os.replace(tmp, directory / f"{key}{SUFFIX}")
        except BaseException:
            _remove(Path(tmp))
            raise
    except OSError:
        count("write_errors")
        return False
    count("stores")
    return True


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
