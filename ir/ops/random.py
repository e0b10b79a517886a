"""Counter-based random bits and the ops that use them (dropout).

A random decision for element i of a tensor is a pure function of (i, seed): no generator state, so eager
execution, the reference interpreter and compiled kernels (which evaluate the same hash per element, in any
order and on any thread) agree bit for bit.

hash32(i, seed) is MurmurHash3_x86_32 with hash seed 0 of the 12-byte message made of three little-endian
uint32 words (seed_lo, seed_hi, i), where seed_lo/seed_hi are the low/high halves of the seed's 64-bit two's
complement and i is the element's flat row-major index taken mod 2**32. All arithmetic is on uint32, mod 2**32:

    mix(h, k):  k *= 0xCC9E2D51; k = rotl(k, 15); k *= 0x1B873593
                h ^= k; h = rotl(h, 13); h = h * 5 + 0xE6546B64
    fmix(h):    h ^= h >> 16; h *= 0x85EBCA6B; h ^= h >> 13; h *= 0xC2B2AE35; h ^= h >> 16
    hash32(i, seed) = fmix(mix(mix(mix(0, seed_lo), seed_hi), i) ^ 12)

The seed words come first so the first two mixes are loop-invariant in a kernel.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..attrs import AttrSpec
from ..errors import AttributeSchemaError, DTypeError
from ..registry import defop
from ..types import TensorType, int64
from ._common import require_bool, require_float, require_rank

_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)
_MIX_ADD, _FMIX1, _FMIX2 = np.uint32(0xE6546B64), np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)
_MESSAGE_BYTES = np.uint32(12)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    k = _rotl(k * _C1, 15) * _C2
    return _rotl(h ^ k, 13) * np.uint32(5) + _MIX_ADD


def fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer: a bijection on uint32 with full avalanche."""
    with np.errstate(over="ignore"):
        h = h ^ (h >> np.uint32(16))
        h = h * _FMIX1
        h = h ^ (h >> np.uint32(13))
        h = h * _FMIX2
        return h ^ (h >> np.uint32(16))


def seed_words(seed: int) -> tuple[np.uint32, np.uint32]:
    """The low and high uint32 halves of a seed's 64-bit two's complement."""
    bits = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
    return np.uint32(bits & 0xFFFF_FFFF), np.uint32(bits >> 32)


def hash32(index: np.ndarray, seed: int) -> np.ndarray:
    """The counter-based hash of each index under `seed` (see the module docstring), as uint32."""
    index = np.asarray(index).astype(np.uint32)
    lo, hi = seed_words(seed)
    with np.errstate(over="ignore"):
        key = _mix(_mix(np.uint32(0), lo), hi)
        return fmix32(_mix(key, index) ^ _MESSAGE_BYTES)


def keep_threshold(p: float) -> int:
    """Elements whose hash is >= this are kept with probability about 1 - p."""
    return min(max(math.floor(p * 2.0 ** 32), 0), 2 ** 32 - 1)


def dropout_keep_mask(shape: Sequence[int], seed: int, p: float) -> np.ndarray:
    """Which elements dropout keeps: deterministic given (seed, shape); p >= 1 keeps none."""
    if p >= 1.0:
        return np.zeros(tuple(shape), dtype=bool)
    size = int(np.prod(shape, dtype=np.int64))
    bits = hash32(np.arange(size, dtype=np.int64), seed)
    return (bits >= np.uint32(keep_threshold(p))).reshape(tuple(shape))


# --- dropout ----------------------------------------------------------------------------------------------


def _dropout_infer(x: TensorType, training: TensorType, seed: TensorType, *, p) -> TensorType:
    if not 0.0 <= p <= 1.0:
        raise AttributeSchemaError(f"dropout: attribute 'p' must be in [0, 1], got {p}")
    require_float("dropout", x)
    require_bool("dropout", training, "the training flag")
    require_rank("dropout", training, 0, "the training flag")
    if seed.dtype != int64:  # the kernels read the seed as 8 bytes
        raise DTypeError(f"dropout: the seed must be i64[], got {seed}")
    require_rank("dropout", seed, 0, "the seed")
    return x


def _dropout_impl(x, training, seed, *, p):
    if not bool(training) or p == 0.0:
        return x.copy()
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    factor = np.where(dropout_keep_mask(x.shape, int(seed), p), x.dtype.type(scale), x.dtype.type(0))
    return x * factor  # a multiply, not a select, so NaN inputs stay NaN as in torch


def _dropout_vjp(e, g, out, x, training, seed, *, p):
    return e.dropout(g, training, seed, p=p), None, None


dropout = defop(
    "dropout", ("x", "training", "seed"), infer=_dropout_infer, impl=_dropout_impl, vjp=_dropout_vjp,
    attrs=(AttrSpec("p", "float", 0.5),), category="random",
    doc="Inverted dropout: when training, zero element i unless hash32(i, seed) >= floor(p * 2**32) and scale "
        "the kept ones by 1/(1-p); identity otherwise. The mask depends only on (seed, shape).")
