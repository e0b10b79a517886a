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
entry of MAP_BYTES or more is mapped read-only rather than read (no copy, no fresh pages: a warm ResNet-18's 45 MB of
derived weights stay in the page cache, and the arrays made over them are what the runtime keeps) and its blocks are
checked on every core at once. A mapped file cut short under a reader would fault; braze never does that (entries
are written whole and renamed into place, removed by unlinking, and an unlinked file stays whole for whoever maps it),
and whoever else can is trusted anyway, as said above.
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import stat
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence


MAGIC = b"BRAZE-OBJECT 4\n"
DIGEST_LINE = 65  # the hex digest of the rest of the file (see digest_of) and a newline
DIGEST_BLOCK_BYTES = 4 << 20  # the blocks the digest checks one by one
MAX_ENTRY_BYTES = 256 * 2 ** 20  # far above the object of any one model
MAX_HEADER_BYTES = 64 * 2 ** 20  # the JSON header line (an optimized graph's text is in it) is shorter than this
PAYLOAD_ALIGNMENT = 64  # the payload starts this aligned in the file, so a buffer read aligned holds it aligned
MAP_BYTES = 8 << 20  # an entry this large or larger is mapped, not read


@dataclass(frozen=True)
class CacheEntry:
    """A validated cache entry: the object file bytes, the symbols it exports and its JSON meta object."""

    key: str
    payload: bytes | memoryview  # read-only
    symbols: tuple[str, ...]
    meta: dict = field(default_factory=dict)


Buffer = bytes | bytearray | memoryview


def encode_entry(key: str, payload: Buffer | Sequence[Buffer], symbols: tuple[str, ...],
                 meta: dict | None = None) -> bytes:
    """The bytes of a cache file (entry_parts joined)."""
    return b"".join(entry_parts(key, payload, symbols, meta))


def entry_parts(key: str, payload: Buffer | Sequence[Buffer], symbols: tuple[str, ...],
                meta: dict | None = None) -> list[Buffer]:
    """The pieces of a cache file, in order: magic, the digest of everything after its line, a one-line JSON header
    (padded so that the payload starts on a PAYLOAD_ALIGNMENT boundary of the file), then the payload, given whole
    or in pieces (a model's prepared weights: written as they are, never joined into one copy)."""
    pieces = _byte_views([payload] if isinstance(payload, (bytes, bytearray, memoryview)) else payload)
    size = sum(len(piece) for piece in pieces)
    header = json.dumps({"key": key, "size": size, "symbols": list(symbols), "meta": dict(meta or {})},
                        sort_keys=True).encode("ascii")
    start = len(MAGIC) + DIGEST_LINE + len(header) + 1
    header += b" " * (-start % PAYLOAD_ALIGNMENT) + b"\n"
    rest = [memoryview(header), *pieces]
    return [MAGIC, digest_of(rest).encode("ascii") + b"\n", *rest]


def _byte_views(buffers: Sequence[Buffer]) -> list[memoryview]:
    return [view for view in (memoryview(b).cast("B") for b in buffers) if len(view)]


def digest_of(data: Buffer | Sequence[Buffer]) -> str:
    """The digest of an entry's bytes after its digest line (whole, or in consecutive pieces): the hex sha256 of the
    block_checks of its DIGEST_BLOCK_BYTES blocks (the last one shorter), the blocks checked on several threads when
    there are several."""
    blocks = _blocks(_byte_views([data] if isinstance(data, (bytes, bytearray, memoryview)) else data))
    if len(blocks) == 1:
        return hashlib.sha256(block_check(blocks[0])).hexdigest()
    with ThreadPoolExecutor(_hashing_threads()) as pool:
        return hashlib.sha256(b"".join(pool.map(block_check, blocks))).hexdigest()


def _blocks(pieces: list[memoryview]) -> list[list[memoryview]]:
    """The consecutive bytes of `pieces` cut into DIGEST_BLOCK_BYTES blocks, each a list of slices (at least one
    block, empty for no bytes)."""
    blocks: list[list[memoryview]] = [[]]
    room = DIGEST_BLOCK_BYTES
    for piece in pieces:
        while len(piece):
            if room == 0:
                blocks.append([])
                room = DIGEST_BLOCK_BYTES
            blocks[-1].append(piece[:room])
            taken = len(blocks[-1][-1])
            piece, room = piece[taken:], room - taken
    return blocks


def block_check(block: Buffer | Sequence[Buffer]) -> bytes:
    """One block's part of the digest (the block whole or in consecutive pieces): its length and CRC-32, 12 bytes."""
    pieces = [block] if isinstance(block, (bytes, bytearray, memoryview)) else block
    crc, size = 0, 0
    for piece in pieces:
        crc, size = zlib.crc32(piece, crc), size + len(memoryview(piece).cast("B"))
    return size.to_bytes(8, "little") + crc.to_bytes(4, "little")


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
    """The bytes of an entry file (read-only) and, for a mapped one, the digest_of what follows its digest line
    (computed on several threads as the pages came in), or None when it is not a regular file of the user's within
    the size limit (raises FileNotFoundError or NotADirectoryError when there is none)."""
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
            if info.st_size < max(MAP_BYTES, 1):
                data = f.read(info.st_size + 1)  # one byte more shows a file grown since
                return (memoryview(data), None) if len(data) <= info.st_size else None
            view = memoryview(mmap.mmap(fd, info.st_size, access=mmap.ACCESS_READ))
        except (OSError, ValueError):
            return None
    skip = min(len(MAGIC) + DIGEST_LINE, len(view))
    return view, digest_of(view[skip:])
