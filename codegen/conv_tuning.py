"""Conv2d kernel choices measured on this machine, kept per CPU: the table a tuning search (conv_search.py) fills.

The compiler picks a conv2d kernel (im2col, direct, channels) by rules measured on a few machines (conv.py). With
BRAZE_TUNE=1 a compile first times every kernel that covers each of its convs on this machine and records the
fastest here; compiles with BRAZE_TUNE=1 then take the recorded kernel for a shape the table holds, and the rules
for the rest. Without BRAZE_TUNE the table is neither read nor written: the search is off by default. It is not
compiled code: BRAZE_CACHE=0 (no code cache) leaves it in use, in the cache directory (BRAZE_CACHE_DIR).

One JSON file per target (its identity: triple, CPU name, features) in the cache directory's `tuning` folder, an
object mapping a shape key (spec_key) to its kernel and the times measured, in a folder read and written only when
it is the user's own and nobody else may write to it (as the cache's). The file is untrusted: one that does
not parse as such a table is set aside as empty (and replaced by the next record), and an entry naming no kernel of
KERNEL_NAMES, or one that does not cover the shape, is never used (conv.conv_kernel checks coverage). Records are
written whole to a temporary file and renamed over the table, so a reader never sees half a table.

digest() names the choices: module_layout puts it into every cache key while tuning is on, so code compiled with
one set of choices is never found by a compile with another; a compile worker lowers with the choices its parent
sends (choices_in_use), never with its own environment's, so its objects are the ones the keys name.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator, Mapping

from . import cache

TUNE_ENV = "BRAZE_TUNE"
KERNEL_NAMES = ("im2col", "direct", "channels")
MOST_TABLE_BYTES = 16 << 20  # a larger file is not a table this module wrote

_loaded: dict[Path, tuple[int, int, dict[str, Any]]] = {}  # path -> (mtime in ns, size, entries)
_in_use: ContextVar[dict[str, str] | None] = ContextVar("braze_conv_choices", default=None)


def enabled() -> bool:
    """Whether BRAZE_TUNE asks for the measured choices (and the search of missing ones)."""
    return os.environ.get(TUNE_ENV, "").strip().lower() in ("1", "on", "true", "yes")


def spec_key(spec: Any, width: int) -> str:
    """The table key of a conv2d shape at a vector width (ConvSpec's fields, in order)."""
    fields = (spec.n, spec.c, spec.h, spec.w, spec.c_out, spec.kh, spec.kw, *spec.stride, *spec.padding,
              *spec.dilation, spec.groups, int(spec.prepacked_weight), width)
    return "conv2d:" + ",".join(str(int(v)) for v in fields)


def table_path(target_identity: str) -> Path:
    """This target's table file."""
    name = hashlib.sha256(target_identity.encode("utf-8")).hexdigest()[:24]
    return cache.cache_dir() / "tuning" / f"conv-{name}.json"


def entries(target_identity: str) -> dict[str, Any]:
    """The table's valid entries (empty when there is no table, or the file is not one), re-read when it changed."""
    path = table_path(target_identity)
    try:
        stat = path.stat()
    except OSError:
        return {}
    if not cache.trusted_directory(path.parent, create=False):
        return {}
    known = _loaded.get(path)
    if known is not None and known[:2] == (stat.st_mtime_ns, stat.st_size):
        return known[2]
    found = _parse(path, stat.st_size)
    _loaded[path] = (stat.st_mtime_ns, stat.st_size, found)
    return found


def _parse(path: Path, size: int) -> dict[str, Any]:
    if size > MOST_TABLE_BYTES:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {key: entry for key, entry in data.items() if isinstance(key, str) and _valid(entry)}


def _valid(entry: Any) -> bool:
    if not isinstance(entry, dict) or entry.get("kernel") not in KERNEL_NAMES:
        return False
    seconds = entry.get("seconds", {})
    return isinstance(seconds, dict) and all(
        k in KERNEL_NAMES and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in seconds.items())


def active() -> bool:
    """Whether tuned_kernel may answer at all: tuning is on, or choices are in use."""
    return _in_use.get() is not None or enabled()


def tuned_kernel(spec: Any, width: int, target_identity: str) -> str | None:
    """The recorded kernel for `spec` at `width` while tuning is on (or in the choices in use), else None."""
    given = _in_use.get()
    if given is not None:
        return given.get(spec_key(spec, width))
    if not enabled():
        return None
    entry = entries(target_identity).get(spec_key(spec, width))
    return None if entry is None else entry["kernel"]


def choices(target_identity: str) -> dict[str, str]:
    """The kernel choices compiles take now ({} with tuning off): what a compile worker is sent to lower with."""
    if not enabled():
        return {}
    return {key: entry["kernel"] for key, entry in entries(target_identity).items()}


@contextmanager
def choices_in_use(given: Any) -> Iterator[None]:
    """tuned_kernel answers from `given` (a parent process's choices()) inside the block, whatever this process's
    environment and files say: a compile worker lowers with the choices its parent's cache keys name. Entries that
    are not a key and a kernel name are dropped."""
    valid = {k: v for k, v in given.items() if isinstance(k, str) and v in KERNEL_NAMES} \
        if isinstance(given, dict) else {}
    token = _in_use.set(valid)
    try:
        yield
    finally:
        _in_use.reset(token)


def record(spec: Any, width: int, target_identity: str, seconds: Mapping[str, float]) -> str:
    """Record the kernel of least time among `seconds` (kernel -> seconds per call) for `spec`; returns it."""
    kernel = min(seconds, key=lambda name: seconds[name])
    table = dict(entries(target_identity))
    table[spec_key(spec, width)] = {"kernel": kernel, "seconds": {k: float(v) for k, v in seconds.items()}}
    _write(table_path(target_identity), table)
    return kernel


def _write(path: Path, table: dict[str, Any]) -> None:
    """Replace the table file by `table` in one rename, in a directory of the user's own (made private if new;
    nothing is written to one others may write to, as for the cache: codegen/cache.py warns)."""
    if not (cache.trusted_directory(path.parent.parent, create=True) and
            cache.trusted_directory(path.parent, create=True)):
        return
    fd, temporary = tempfile.mkstemp(prefix=".tuning-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(table, f, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def digest(target_identity: str) -> str:
    """A name of the choices compiles take now: "" with tuning off, else a digest of the table's entries."""
    if not enabled():
        return ""
    text = json.dumps(choices(target_identity), sort_keys=True)
    return "tuned:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


__all__ = ["KERNEL_NAMES", "TUNE_ENV", "active", "choices", "choices_in_use", "digest", "enabled", "entries", "record",
           "spec_key", "table_path", "tuned_kernel"]
