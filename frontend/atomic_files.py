"""Reading record files safely and writing them atomically, with the temporary files of interrupted saves removed.

A save writes `.<name>.<random>.braze-tmp` in the target's directory, holds an exclusive flock on it while it
writes, and renames it over the target. A process killed mid-save leaves that file behind, unlocked; the next save
to the same directory removes every such file that no process holds locked and that has not been modified for
STALE_SECONDS (the age covers the instant between creating a temporary file and locking it). Without fcntl (on
Windows) leftovers are not removed.
"""
from __future__ import annotations

import os
import stat
import tempfile
import time

from braze.ir.errors import RecordError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

TEMP_SUFFIX = ".braze-tmp"
STALE_SECONDS = 10.0
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The contents of a regular file, or RecordError naming it (FIFOs and devices are refused, not read)."""
    source = os.fspath(path)
    try:
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as err:
        raise RecordError(f"{source}: cannot read: {err.strerror or err}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RecordError(f"{source}: cannot read: not a regular file")
        try:
            return f.read()
        except OSError as err:
            raise RecordError(f"{source}: cannot read: {err.strerror or err}") from None


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a file so that readers see the old contents or the new, never a partial one."""
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    remove_abandoned_temporaries(directory)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=TEMP_SUFFIX, dir=directory)
    except OSError as err:
        raise RecordError(f"{target}: cannot write: {err.strerror or err}") from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when the file is closed, also by a killed process
        # mkstemp creates the file private (0600); give it the mode a plain open() would have
        mode = stat.S_IMODE(os.stat(target).st_mode) if os.path.exists(target) else 0o666 & ~_UMASK
        os.chmod(temp, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            if fcntl is not None:
                os.replace(temp, target)  # still locked, so no other save takes it for abandoned
        if fcntl is None:
            os.replace(temp, target)  # Windows cannot rename an open file
    except OSError as err:
        _remove_quietly(temp)
        raise RecordError(f"{target}: cannot write: {err.strerror or err}") from None
    except BaseException:
        _remove_quietly(temp)
        raise


def remove_abandoned_temporaries(directory: str) -> list[str]:
    """Remove the temporary files of interrupted saves in `directory` (see the module doc); returns their names."""
    if fcntl is None:
        return []
    try:
        names = [n for n in os.listdir(directory) if n.startswith(".") and n.endswith(TEMP_SUFFIX)]
    except OSError:
        return []
    return [name for name in names if _remove_if_abandoned(os.path.join(directory, name))]


def _remove_if_abandoned(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or time.time() - info.st_mtime < STALE_SECONDS:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a live save holds it
        if os.stat(path, follow_symlinks=False).st_ino != info.st_ino:
            return False
        os.remove(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
