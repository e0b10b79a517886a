"""The file of one cache entry: its digest covers the header as well as the payload, a large entry is checked while
it is read (and lands aligned), block by block on several threads, and a damaged one of either size is refused."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from braze.codegen import cache, cache_entry

KEY = "ab" * 32
META = {"graph": "graph @g() -> () {\n  return\n}\n", "weights": [["w", "f32", [4], 0, 16]]}


@pytest.fixture(autouse=True)
def cache_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(root))
    monkeypatch.delenv("BRAZE_CACHE", raising=False)
    cache.reset_stats()
    return root


@pytest.fixture(params=["read", "mapped", "read, many digest blocks", "mapped, many digest blocks"])
def reading(request, monkeypatch) -> str:
    """Every way of reading an entry: read whole or mapped (as a large entry is), with the digest over one block or
    (as a large entry's) many, 100 bytes each."""
    if "mapped" in request.param:
        monkeypatch.setattr(cache_entry, "MAP_BYTES", 0)
    if "many" in request.param:
        monkeypatch.setattr(cache_entry, "DIGEST_BLOCK_BYTES", 100)
    return request.param


def payload() -> bytes:
    return np.arange(1000, dtype=np.float32).tobytes()


def test_cache_entry_round_trips_meta_and_payload(reading):
    assert cache.store(KEY, payload(), ("f",), META)
    entry = cache.load(KEY)
    assert entry is not None and entry.meta == META and entry.symbols == ("f",)
    assert bytes(entry.payload) == payload() and entry.payload.readonly


def test_cache_entry_digest_is_the_same_read_and_mapped(monkeypatch):
    monkeypatch.setattr(cache_entry, "DIGEST_BLOCK_BYTES", 100)
    cache.store(KEY, payload(), (), META)
    path = cache.entry_path(KEY)
    data = path.read_bytes()
    monkeypatch.setattr(cache_entry, "MAP_BYTES", 0)
    read, digest = cache_entry.read_entry_file(path)
    assert digest == cache_entry.digest_of(memoryview(data)[len(cache_entry.MAGIC) + cache_entry.DIGEST_LINE:])
    assert bytes(read) == data and read.readonly


def test_cache_entry_payload_in_pieces_is_the_file_of_the_payload_whole(monkeypatch):
    """Pieces of any size (here across 100-byte digest blocks) write, and digest, exactly the joined payload."""
    monkeypatch.setattr(cache_entry, "DIGEST_BLOCK_BYTES", 100)
    data = payload()
    cuts = [0, 7, 107, 108, 441, 1000, 2500, len(data)]
    pieces = [memoryview(data)[a:b] for a, b in zip(cuts, cuts[1:])] + [b""]
    whole = cache_entry.encode_entry(KEY, data, ("f",), META)
    assert cache_entry.encode_entry(KEY, pieces, ("f",), META) == whole
    assert cache_entry.encode_entry(KEY, bytearray(data), ("f",), META) == whole
    assert cache.store(KEY, pieces, ("f",), META) and cache.entry_path(KEY).read_bytes() == whole
    assert bytes(cache.load(KEY).payload) == data


def test_cache_entry_payload_starts_aligned_in_the_file():
    data = cache_entry.encode_entry(KEY, payload(), (), META)
    assert data.index(payload()) % cache_entry.PAYLOAD_ALIGNMENT == 0


def test_cache_entry_mapped_lands_aligned(monkeypatch):
    monkeypatch.setattr(cache_entry, "MAP_BYTES", 0)
    cache.store(KEY, payload(), (), META)
    entry = cache.load(KEY)
    assert np.frombuffer(entry.payload, np.uint8).ctypes.data % cache_entry.PAYLOAD_ALIGNMENT == 0


def damaged_meta(data: bytes) -> bytes:
    """The entry with one character of its graph text changed: the payload is untouched."""
    at = data.index(b"return")
    return data[:at] + b"r3turn" + data[at + 6:]


def flipped_payload(data: bytes) -> bytes:
    return data[:-10] + bytes([data[-10] ^ 1]) + data[-9:]


def flipped_middle(data: bytes) -> bytes:
    """One bit of the payload changed halfway through: with small digest blocks, in a block of its own."""
    at = len(data) - len(payload()) // 2
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1:]


def truncated(data: bytes) -> bytes:
    return data[:-1]


def swapped_blocks(data: bytes) -> bytes:
    """Two 100-byte runs of the payload (with small digest blocks, two whole digest blocks) exchanged: every
    block's own check still matches, only their order differs."""
    start = len(cache_entry.MAGIC) + cache_entry.DIGEST_LINE
    first = start + (len(data) - start) // 100 * 100 - 300
    a, b = data[first:first + 100], data[first + 100:first + 200]
    assert a != b
    return data[:first] + b + a + data[first + 200:]


def previous_format(data: bytes) -> bytes:
    """The same entry as the format before CRC-32 checks wrote it: magic 3 and a sha256 tree of the blocks."""
    rest = data[len(cache_entry.MAGIC) + cache_entry.DIGEST_LINE:]
    blocks = [hashlib.sha256(rest[at:at + cache_entry.DIGEST_BLOCK_BYTES]).digest()
              for at in range(0, len(rest), cache_entry.DIGEST_BLOCK_BYTES)]
    return b"BRAZE-OBJECT 3\n" + hashlib.sha256(b"".join(blocks)).hexdigest().encode() + b"\n" + rest


@pytest.mark.parametrize("damage", [damaged_meta, flipped_payload, flipped_middle, truncated, swapped_blocks,
                                    previous_format])
def test_cache_entry_damaged_anywhere_is_discarded(reading, damage):
    cache.store(KEY, payload(), (), META)
    path = cache.entry_path(KEY)
    path.write_bytes(damage(path.read_bytes()))
    cache.reset_stats()
    assert cache.load(KEY) is None
    assert cache.stats().rebuilds == 1 and not path.exists()
