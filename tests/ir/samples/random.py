"""Samples for dropout, checked against a byte-level MurmurHash3_x86_32 written from its published description."""
import math
import struct

import numpy as np

from . import Sample, normal


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32 of `data` (any length), one Python int per step."""
    mask = 0xFFFFFFFF

    def rotl(v, r):
        return ((v << r) | (v >> (32 - r))) & mask

    h = seed
    tail_start = len(data) - len(data) % 4
    for (k,) in struct.iter_unpack("<I", data[:tail_start]):
        k = (rotl((k * 0xCC9E2D51) & mask, 15) * 0x1B873593) & mask
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & mask
    tail = data[tail_start:]
    if tail:
        k = int.from_bytes(tail, "little")
        h ^= (rotl((k * 0xCC9E2D51) & mask, 15) * 0x1B873593) & mask
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    return h ^ (h >> 16)


def naive_dropout(x, training, seed, p=0.5):
    if not training or p == 0.0:
        return x.copy()
    bits = int(seed) & (2 ** 64 - 1)
    threshold = min(math.floor(p * 2 ** 32), 2 ** 32 - 1)
    out = np.zeros_like(x)
    for i in range(x.size):
        word = struct.pack("<III", bits & 0xFFFFFFFF, bits >> 32, i & 0xFFFFFFFF)
        if p < 1.0 and murmur3_32(word) >= threshold:
            out.flat[i] = x.flat[i] / (1.0 - p)
    return out


def _dropout(label, x, training, seed, p):
    args = (x, np.array(training), np.array(seed, dtype=np.int64))
    return Sample("dropout", args, {"p": p}, label=label, expected=lambda x, t, s: naive_dropout(x, t, s, p))


SAMPLES = [
    _dropout("train", normal((4, 5), 1), True, 1234, 0.3),
    _dropout("train-negative-seed", normal((2, 3, 4), 2), True, -(2 ** 40) - 5, 0.5),
    _dropout("eval", normal((3, 4), 3), False, 7, 0.5),
    _dropout("p0", normal((6,), 4), True, 7, 0.0),
    _dropout("p1", normal((6,), 5), True, 7, 1.0),
]
