"""The disk cache of compiled objects: a second compile of the same LLVM IR loads machine code in about a millisecond.

An entry is keyed by the sha256 of the LLVM IR text and the target identity (triple, CPU name, feature string,
optimization level, llvmlite version), or, for the object of a whole graph, by the digest of the optimized graph's
text, the target and the code generator's version (codegen/module_layout.py), so that a warm load finds the object
without building LLVM IR. Its file (codegen/cache_entry.py) holds a magic line, the digest of all that follows (a
one-level tree of CRC-32 block checks, so a large entry is checked on every core), a JSON header with the key, the
exported symbols, the size of the payload and a `meta` object (what the runtime needs beside the code: a whole
graph's module layout; empty for a plain module), then the object file itself; the digest covers the header, so an
intact entry's meta is what this cache wrote. The optimized-graph entries of runtime/pass_cache.py use the same
format with no symbols: the graph's text in `meta`, derived weights as the payload; so do
runtime/prepared_cache.py's, a model's prepared weights. A whole graph's entry, and a runtime module's
(codegen/described.py), may also hold after its objects the shared object the system linker made of them
(codegen/shared_object.py, its size in `meta`): part of the entry, it is checked, counted, evicted and cleared with
it. A truncated, altered or foreign entry fails those checks, and one whose object does not link or does not export
the module's functions fails in the JIT: either way it is deleted and rebuilt, never called. Entries are written
atomically (a temporary file, then os.replace), so concurrent processes never see half an entry; the temporary files
of stores that were killed are removed by a later store once they are an hour old.

Only what the user's own directory holds is trusted: the directory is created private (0700), and a directory
that another user owns, or that others may write to, is not used (a UntrustedCacheWarning says why, once, and
compiles proceed without the cache), because a planted entry would run as the user's code. Entries are read only
if they are regular files owned by the user, no larger than MAX_ENTRY_BYTES (no FIFOs, devices or symlinks).

Size: the entries together stay under BRAZE_CACHE_MAX_MB megabytes (default 1024). Every hit sets its entry's
modification time to now (the time of last use, recorded by the cache itself: access times are unreliable on noatime
or relatime mounts), and a store that takes the directory over the cap deletes the least recently used entries until
it fits again (never the entry just stored). A process reading (or holding mapped, for a large entry:
codegen/cache_entry.py) an entry another one deletes keeps the file it opened. `info()` and `clear()` serve `braze
cache info|clear`.

Environment: BRAZE_CACHE=0 disables the cache; BRAZE_CACHE_DIR moves it (default: $XDG_CACHE_HOME/braze or
~/.cache/braze); BRAZE_CACHE_MAX_MB caps its size.
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from braze.ir.errors import BrazeError

from .cache_entry import MAX_ENTRY_BYTES, PAYLOAD_ALIGNMENT, Buffer, CacheEntry, decode_entry, encode_entry, \
    entry_parts, read_entry_file

CACHE_ENV = "BRAZE_CACHE"
CACHE_DIR_ENV = "BRAZE_CACHE_DIR"
MAX_MB_ENV = "BRAZE_CACHE_MAX_MB"
DEFAULT_MAX_MB = 1024.0
SUFFIX = ".bzo"
TEMP_SUFFIX = ".tmp"
STALE_TEMP_SECONDS = 3600.0

_lock = threading.Lock()
_warned: set[str] = set()


class UntrustedCacheWarning(UserWarning):
    """The cache directory is not the user's own, so it is not used."""


@dataclass
class CacheStats:
    """Counters since the process started (or the last reset): tests read these instead of timing."""

    hits: int = 0       # a valid entry was loaded
    misses: int = 0     # no entry: compiled and stored
    rebuilds: int = 0   # a corrupt, foreign or unlinkable entry was deleted and rebuilt
    stores: int = 0     # entries written
    write_errors: int = 0  # entries that could not be written (read-only or full directory)
    untrusted: int = 0  # lookups and stores skipped: the directory is not the user's own
    evictions: int = 0  # least recently used entries deleted to keep the cache under its size cap

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


_stats = CacheStats()


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


def load(key: str, *, counted: bool = True) -> CacheEntry | None:
    """The intact entry for `key`, or None (counting a miss, or a rebuild after deleting a bad entry). The caller
    links it, then counts a hit, or discards it when it does not link. `counted=False` counts nothing: for the
    cache's own bookkeeping (codegen/host.py), which the counters of compiled code leave out."""
    directory = cache_dir()
    if not trusted_directory(directory, create=False):
        return None
    path = directory / f"{key}{SUFFIX}"
    try:
        read = read_entry_file(path)
    except (FileNotFoundError, NotADirectoryError):
        if counted:
            count("misses")
        return None
    entry = decode_entry(key, *read) if read is not None else None
    if entry is None:
        discard(key, counted=counted)
    else:
        _touch(path)
    return entry


def _touch(path: Path) -> None:
    """Record a use of the entry at `path`: its modification time is the time of its last use."""
    try:
        os.utime(path)
    except OSError:
        pass


def discard(key: str, *, counted: bool = True) -> None:
    """Delete the entry for `key` (one that is corrupt or did not link) and count a rebuild."""
    if counted:
        count("rebuilds")
    _remove(entry_path(key))


def store(key: str, payload: Buffer | Sequence[Buffer], symbols: tuple[str, ...], meta: dict | None = None, *,
          counted: bool = True) -> bool:
    """Write an entry atomically, its payload given whole or in pieces (written one after the other, not joined);
    returns False (and counts a write error) when the directory is not writable. `counted` as for load."""
    directory = cache_dir()
    try:
        if not trusted_directory(directory, create=True):
            return False
        _remove_abandoned_temporaries(directory)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=TEMP_SUFFIX, dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                for part in entry_parts(key, payload, symbols, meta):
                    f.write(part)
            os.replace(tmp, directory / f"{key}{SUFFIX}")
        except BaseException:
            _remove(Path(tmp))
            raise
    except OSError:
        if counted:
            count("write_errors")
        return False
    if counted:
        count("stores")
    _evict(directory, keep=f"{key}{SUFFIX}")
    return True


def max_bytes() -> int:
    """The size cap of the cache in bytes: BRAZE_CACHE_MAX_MB megabytes (a positive number; default 1024)."""
    raw = os.environ.get(MAX_MB_ENV, "").strip()
    if not raw:
        return int(DEFAULT_MAX_MB * 2 ** 20)
    try:
        mb = float(raw)
    except ValueError:
        mb = float("nan")
    if not 0 < mb < float("inf"):
        raise BrazeError(f"{MAX_MB_ENV} must be a positive number of megabytes, got {raw!r}")
    return max(1, int(mb * 2 ** 20))


def _entries(directory: Path) -> list[tuple[Path, os.stat_result]]:
    """The entry files of the directory (regular files only) with their status, least recently used first."""
    found = []
    for path in directory.glob(f"*{SUFFIX}"):
        try:
            info = path.lstat()
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            found.append((path, info))
    return sorted(found, key=lambda item: (item[1].st_mtime_ns, item[0].name))


def _evict(directory: Path, keep: str) -> None:
    """Delete the least recently used entries (never `keep`) until the entries fit under max_bytes()."""
    entries = _entries(directory)
    total, cap = sum(info.st_size for _, info in entries), max_bytes()
    for path, info in entries:
        if total <= cap:
            break
        if path.name != keep:
            _remove(path)
            total -= info.st_size
            count("evictions")


@dataclass(frozen=True)
class CacheInfo:
    """What `braze cache info` shows: where the cache is, how much it holds and its cap."""

    path: Path
    enabled: bool
    trusted: bool
    entries: int
    bytes: int
    max_bytes: int

    def __str__(self) -> str:
        state = "on" if self.enabled else f"off ({CACHE_ENV}=0)"
        if not self.trusted:
            state += ", not used: the directory is not yours alone"
        return (f"path     {self.path}\nstate    {state}\nentries  {self.entries}\n"
                f"size     {self.bytes / 2 ** 20:.1f} MB ({self.bytes} bytes)\n"
                f"cap      {self.max_bytes / 2 ** 20:.1f} MB ({MAX_MB_ENV})")


def info() -> CacheInfo:
    """The cache directory, whether it is used, its entry count and size, and its size cap."""
    directory = cache_dir()
    trusted = trusted_directory(directory, create=False)
    entries = _entries(directory) if trusted and directory.is_dir() else []
    return CacheInfo(directory, enabled(), trusted, len(entries), sum(i.st_size for _, i in entries), max_bytes())


def clear() -> int:
    """Delete every entry (and temporary file) of the cache directory; returns how many entries were deleted.
    Raises BrazeError for a directory that is not the user's own (its files are not the cache's to delete)."""
    directory = cache_dir()
    if not trusted_directory(directory, create=False):
        raise BrazeError(f"not clearing {directory}: it is not your own directory (see {CACHE_DIR_ENV})")
    if not directory.is_dir():
        return 0
    entries = _entries(directory)
    for path, _ in entries:
        _remove(path)
    for path in directory.glob(f".*{TEMP_SUFFIX}"):
        if path.is_file() and not path.is_symlink():
            _remove(path)
    return len(entries)


def _remove_abandoned_temporaries(directory: Path) -> None:
    """Delete the temporary files of stores that were killed: an entry is written in one call, so a temporary
    file older than STALE_TEMP_SECONDS belongs to no live store."""
    now = time.time()
    for path in directory.glob(f".*{TEMP_SUFFIX}"):
        try:
            if path.is_file() and not path.is_symlink() and now - path.stat().st_mtime > STALE_TEMP_SECONDS:
                path.unlink()
        except OSError:
            pass


def trusted_directory(directory: Path, create: bool) -> bool:
    """Whether `directory` is the user's own and writable by nobody else (creating it private, 0700, if asked);
    warns once per directory when it is not. A missing directory is trusted: it holds nothing."""
    if create:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if not hasattr(os, "getuid"):
        return True
    problem = None
    if info.st_uid != os.getuid():
        problem = f"it is owned by uid {info.st_uid}, not by you (uid {os.getuid()})"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"others may write to it (mode {stat.S_IMODE(info.st_mode):o})"
    if problem is None:
        return True
    count("untrusted")
    with _lock:
        first = str(directory) not in _warned
        _warned.add(str(directory))
    if first:
        warnings.warn(f"braze: not using the compile cache {directory}: {problem}, so an entry planted there would "
                      f"run as your code. Set {CACHE_DIR_ENV} to a directory of your own (or {CACHE_ENV}=0); "
                      f"compiling continues without the cache.", UntrustedCacheWarning, stacklevel=4)
    return False


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
