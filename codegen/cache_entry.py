"""The file of one disk-cache entry (codegen/cache.py): how it is written, read and checked.

Layout: a magic line; the digest of everything after that line; a one-line JSON header (the key, the exported
symbols, the payload's size and a `meta` object), padded with spaces so that the payload starts PAYLOAD_ALIGNMENT
bytes aligned in the file; then the payload. The digest covers the header as well as the payload, so the meta of an
intact entry (an optimized graph's text, a module's layout) is what the cache wrote, exactly as far as its payload
is. It is a checksum tree of one level: the hex sha256 of the CRC-32 and length of each DIGEST_BLOCK_BYTES block of
the bytes after the digest line, so that the blocks of a large entry (a model's derived weights, tens of MB) are
checked on every core at once (zlib releases the GIL) and at three times sha256's speed (a warm ResNet-18 reads
45 MB of derived weights). The digest detects damage (a truncated or torn file, a flipped bit, an edited header);
it is not an authentication, and need not be one: whoever can write the cache directory can write the native code
this process runs, so the cache is trusted as far as the directory is (codegen/cache.py checks who owns it). An
entry larger than HASH_WHILE_READING_BYTES is read a block at a time into an aligned buffer while other threads
check the blocks already read.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

MAGIC = b"BRAZE-OBJECT 4\n"
DIGEST_LINE = 65  # the hex digest of the rest of the file (see digest_of) and a newline
DIGEST_BLOCK_BYTES = 4 << 20  # the blocks the digest checks one by one
MAX_ENTRY_BYTES = 256 * 2 ** 20  # far above the object of any one model
MAX_HEADER_BYTES = 64 * 2 ** 20  # the JSON header line (an optimized graph's text is in it) is shorter than this
PAYLOAD_ALIGNMENT = 64  # the payload starts this aligned in the file, so a buffer read aligned holds it aligned
HASH_WHILE_READING_BYTES = 8 << 20
READ_BLOCK_BYTES = 4 << 20


@dataclass(frozen=True)
class CacheEntry:
    """A validated cache entry: the object file bytes, the symbols it exports and its JSON meta object."""

    key: str
    payload: bytes | memoryview  # read-only
    symbols: tuple[str, ...]
    meta: dict = field(default_factory=dict)


def encode_entry(key: str, payload: bytes | memoryview, symbols: tuple[str, ...], meta: dict | None = None) -> bytes:
    """The bytes of a cache file: magic, the sha256 of everything after its line, a one-line JSON header (padded
    so that the payload starts on a PAYLOAD_ALIGNMENT boundary of the file), then the payload."""
    header = json.dumps({"key": key, "size": len(payload), "symbols": list(symbols), "meta": dict(meta or {})},
                        sort_keys=True).encode("ascii")
    start = len(MAGIC) + DIGEST_LINE + len(header) + 1
    header += b" " * (-start % PAYLOAD_ALIGNMENT) + b"\n"
    rest = header + payload
    return b"".join([MAGIC, digest_of(memoryview(rest)).encode("ascii"), b"\n", rest])


def digest_of(data: memoryview) -> str:
    """The digest of an entry's bytes after its digest line: the hex sha256 of the block_checks of its
    DIGEST_BLOCK_BYTES blocks (the last one shorter), the blocks checked on several threads when there are several."""
    starts = range(0, max(len(data), 1), DIGEST_BLOCK_BYTES)
    block = lambda at: block_check(data[at:at + DIGEST_BLOCK_BYTES])  # noqa: E731
    if len(starts) == 1:
        return hashlib.sha256(block(0)).hexdigest()
    with ThreadPoolExecutor(_hashing_threads()) as pool:
        return hashlib.sha256(b"".join(pool.map(block, starts))).hexdigest()


def block_check(block: memoryview | np.ndarray) -> bytes:
    """One block's part of the digest: its length and CRC-32, 12 bytes."""
    return len(block).to_bytes(8, "little") + zlib.crc32(block).to_bytes(4, "little")


def _hashing_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def decode_entry(key: str, data: bytes | memoryview, digest: str | None = None) -> CacheEntry | None:
    """The entry in `data` if it is intact (its digest covers the header and the payload, so the header's meta is
    as trustworthy as the payload) and belongs to `key`, else None. `digest`: the digest_of `data` after the digest
    line when the reader computed it already."""
    view = memoryview(data)
    digest_end = len(MAGIC) + DIGEST_LINE
    if view[:len(MAGIC)] != MAGIC or len(view) < digest_end or view[digest_end - 1:digest_end] != b"\n":
        return None
    end = _line_end(view, digest_end)
    if end is None:
        return None
    digest = digest or digest_of(view[digest_end:])
    if bytes(view[len(MAGIC):digest_end - 1]) != digest.encode("ascii"):
        return None
    try:
        header = json.loads(bytes(view[digest_end:end]).decode("ascii"))
        payload = view[end + 1:]  # not a copy: an entry may hold a model's derived weights
        valid = isinstance(header, dict) and header.get("key") == key and header.get("size") == len(payload)
        symbols = tuple(str(s) for s in header.get("symbols", ())) if valid else ()
        meta = header.get("meta", {}) if valid else {}
    except (ValueError, UnicodeDecodeError, TypeError, AttributeError):
        return None
    return CacheEntry(key, payload.toreadonly(), symbols, meta) if valid and isinstance(meta, dict) else None


def _line_end(view: memoryview, start: int) -> int | None:
    """The index of the first newline at or after `start` within MAX_HEADER_BYTES, read a block at a time."""
    block = 1 << 16
    for at in range(start, min(len(view), start + MAX_HEADER_BYTES), block):
        found = bytes(view[at:at + block]).find(b"\n")
        if found >= 0:
            return at + found
    return None


def read_entry_file(path: Path) -> tuple[memoryview, str | None] | None:
    """The bytes of an entry file and, for a large one, the digest_of what follows its digest line (computed while
    it was read), or None when it is not a regular file of the user's within the size limit (raises
    FileNotFoundError or NotADirectoryError when there is none)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError:  # a symlink (ELOOP), or unreadable
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES
                or (hasattr(os, "getuid") and info.st_uid != os.getuid())):
            return None
        try:
            if info.st_size < HASH_WHILE_READING_BYTES:
                data = f.read(info.st_size + 1)  # one byte more shows a file grown since
                return (memoryview(data), None) if len(data) <= info.st_size else None
            return _read_hashing(f, info.st_size)
        except OSError:
            return None


def _read_hashing(f: BinaryIO, size: int) -> tuple[memoryview, str] | None:
    """`size` bytes of `f` read into a PAYLOAD_ALIGNMENT-aligned buffer and the digest_of the bytes after the digest
    line, or None when the file is not `size` bytes long. Each digest block is read (READ_BLOCK_BYTES at a time) and
    checked by one of a pool of threads, so a large entry is copied and checked on every core at once (positioned
    reads and zlib release the GIL). The buffer is made read-only: an entry's arrays (a pass-cache entry's
    derived weights) can be shared rather than copied."""
    block = np.empty(size + PAYLOAD_ALIGNMENT, np.uint8)
    start = -block.ctypes.data % PAYLOAD_ALIGNMENT
    buffer = block[start:start + size]
    skip = min(len(MAGIC) + DIGEST_LINE, size)
    fd = f.fileno()

    def read(at: int, end: int) -> None:
        while at < end:
            count = _read_at(fd, buffer[at:min(end, at + READ_BLOCK_BYTES)], at)
            if count <= 0:
                raise EOFError
            at += count

    def digest_block(at: int) -> bytes:
        end = min(at + DIGEST_BLOCK_BYTES, size)
        read(at, end)
        return block_check(buffer[at:end])
    try:
        read(0, skip)
        with ThreadPoolExecutor(_hashing_threads()) as pool:
            digests = list(pool.map(digest_block, range(skip, size, DIGEST_BLOCK_BYTES) or [skip]))
        if _read_at(fd, np.empty(1, np.uint8), size):  # the file grew since its size was taken
            return None
    except EOFError:
        return None
    block.flags.writeable = buffer.flags.writeable = False
    return memoryview(buffer), hashlib.sha256(b"".join(digests)).hexdigest()


def _read_at(fd: int, into: np.ndarray, offset: int) -> int:
    """Read into `into` from `offset` of the file, without moving its position: how many bytes were read."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [into], offset)
    data = os.pread(fd, len(into), offset)
    into[:len(data)] = np.frombuffer(data, np.uint8)
    return len(data)
