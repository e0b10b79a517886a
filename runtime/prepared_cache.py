"""The prepared weights of a model compiled before (packed GEMM panels, blocked conv filters), found on disk so that a
warm compile maps them instead of filling tens of MB of fresh memory.

A prepared weight is a function of the weight it is made from and of the module's prepare code. The optimized
graph's weights are named by the pass-cache key (runtime/pass_cache.py: the traced graph, the sha256 of every
traced weight, the passes and their options) and the prepare code by the module's key (codegen/graph_cache.py: the
optimized graph's text, the target and the code generator's version), so the two keys together name the prepared
bytes. Only models whose prepared weights come to at least MIN_BYTES are kept: below that, filling them costs less
than a lookup saves (a warm ResNet-18 fills 43 MB, 18-30 ms of page faults and packing on 2 cores).

Entry (codegen/cache.py's format, no symbols): `meta` lists each prepared slot's key, byte count and offset in the
payload, each 64-byte aligned, so that the arrays over a mapped entry are the Executable's prepared buffers without a
copy. An entry that does not list exactly the module's slots is deleted and the weights are prepared afresh.
"""
from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

from braze.codegen import cache
from braze.codegen.module_layout import PreparedSlot

KIND = "braze-prepared-weights 1"
MIN_BYTES = 8 << 20


def wanted(slots: Sequence[PreparedSlot]) -> bool:
    """Whether prepared weights this large are worth keeping on disk (and fit in one entry)."""
    return MIN_BYTES <= sum(slot.nbytes + cache.PAYLOAD_ALIGNMENT for slot in slots) <= cache.MAX_ENTRY_BYTES // 2


def key(pass_key: str, module_key: str) -> str:
    """The entry key of the prepared weights of the graph optimized under `pass_key`, built as module `module_key`."""
    return hashlib.sha256(f"{KIND}|{pass_key}|{module_key}".encode("ascii")).hexdigest()


def store(entry_key: str, slots: Sequence[PreparedSlot], buffers: Sequence[np.ndarray]) -> None:
    """Write the prepared buffers (one per slot, each at least the slot's size) under `entry_key`."""
    listed, chunks, offset = [], [], 0
    for slot, buffer in zip(slots, buffers, strict=True):
        data = memoryview(buffer).cast("B")[:slot.nbytes]
        padding = b"\0" * (-slot.nbytes % cache.PAYLOAD_ALIGNMENT)
        listed.append([slot.key, slot.nbytes, offset])
        chunks += [data, padding]
        offset += slot.nbytes + len(padding)
    cache.store(entry_key, chunks, (), {"kind": KIND, "slots": listed})


def load(entry_key: str, slots: Sequence[PreparedSlot]) -> list[np.ndarray] | None:
    """The prepared buffers stored under `entry_key` for these slots (read-only arrays over the entry), or None (no
    entry, or one that does not match the slots and is deleted)."""
    entry = cache.load(entry_key)
    if entry is None:
        return None
    buffers = _buffers(entry.meta, entry.payload, slots)
    if buffers is None:
        cache.discard(entry_key)
        return None
    cache.count("hits")
    return buffers


def _buffers(meta: dict[str, Any], payload: memoryview, slots: Sequence[PreparedSlot]) -> list[np.ndarray] | None:
    """The entry's arrays, one per slot in order, or None when its meta does not list exactly these slots as aligned
    spans of the payload."""
    listed = meta.get("slots")
    if meta.get("kind") != KIND or not isinstance(listed, list) or len(listed) != len(slots):
        return None
    whole = np.frombuffer(payload, np.uint8)
    buffers = []
    for slot, item in zip(slots, listed):
        if not (isinstance(item, list) and len(item) == 3 and item[:2] == [slot.key, slot.nbytes]
                and isinstance(item[2], int) and 0 <= item[2] <= item[2] + slot.nbytes <= len(whole)
                and item[2] % cache.PAYLOAD_ALIGNMENT == 0):
            return None
        buffers.append(whole[item[2]:item[2] + slot.nbytes])
    return buffers
