"""Weight quantization: a Quantizer (scheme and block size) turns a float weight into a QuantizedTensor, packed
codes plus scales, whose value is computed by the registered `dequantize` op (so eager code, autodiff and a
tracer all see the same op).

Schemes (the codes and scales are those of the `dequantize` op, braze.ir.ops.reparam):
- "int8": symmetric, per output channel (row `i` of the weight viewed as (shape[0], -1)): scale = max|row| / 127,
  code = round(w / scale) in [-127, 127]. Round-trip error: at most half a step, scale / 2, per element (plus
  the float32 rounding of code * scale, below 2**-24 of the value).
- "int8-tensor": the same with one scale for the whole tensor.
- "int4": blocks of block_size consecutive values of the row-major flattened weight, each scaled by its absolute
  maximum; code = the nearest of the 15 levels k / 7, k = -7..7. Error: at most absmax / 14 per element.
- "nf4": the same blocks, codes rounded to the nearest of the 16 NormalFloat levels (bitsandbytes' code book,
  QLoRA). Error: at most absmax * g / 2 where g is the width of the code-book interval holding w / absmax; over
  the whole code book g / 2 <= (1 - 0.6961928) / 2 = 0.1519036.
A block or row of zeros gets scale 0 and dequantizes to zeros exactly.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from braze.ir.errors import BrazeError
from braze.ir.ops.reparam import LEVELS, SCHEMES, packed_types
from braze.ir.types import DType, as_dtype, float32

from ..device import Device, as_device
from ..dispatch import apply
from ..tensor import Tensor
from .lazy import alias, as_tensor

# Half the widest gap between consecutive NF4 levels: the worst-case nf4 error per unit of block absmax.
NF4_HALF_GAP = max(b - a for a, b in zip(LEVELS["nf4"], LEVELS["nf4"][1:])) / 2


class QuantizedTensor:
    """A quantized weight: codes and scales Tensors, the scheme and block size, and the weight's shape and dtype.

    `dequantize()` applies the registered op (then casts when the weight's dtype is not float32). The codes and
    scales are never written in place: loading or moving makes new tensors, so clones sharing them stay intact.
    """

    __slots__ = ("codes", "scales", "scheme", "block_size", "shape", "dtype")

    def __init__(self, codes: Tensor, scales: Tensor, scheme: str, block_size: int, shape: tuple[int, ...],
                 dtype: Any = float32) -> None:
        self.codes, self.scales = codes, scales
        self.scheme, self.block_size, self.shape = scheme, int(block_size), tuple(int(s) for s in shape)
        self.dtype: DType = as_dtype(dtype)

    @property
    def device(self) -> Device:
        return self.codes.device

    @property
    def nbytes(self) -> int:
        """The bytes the packed codes and scales occupy."""
        return int(self.codes._data.nbytes + self.scales._data.nbytes)

    def dequantize(self) -> Tensor:
        """The float value, computed through the registered `dequantize` op."""
        out = apply("dequantize", self.codes, self.scales, scheme=self.scheme, block_size=self.block_size,
                    shape=self.shape)
        return out if self.dtype == float32 else apply("cast", out, dtype=self.dtype)

    def stored_tensors(self) -> tuple[tuple[str, Tensor], ...]:
        """(path suffix, Tensor) of what is stored: the record and trace names of the codes and scales."""
        return (".codes", self.codes), (".scales", self.scales)

    def layout(self) -> tuple[tuple[str, tuple[int, ...], DType], ...]:
        """(path suffix, shape, dtype) of the stored tensors."""
        codes, scales = packed_types(self.scheme, self.block_size, self.shape)
        return (".codes", codes.shape, codes.dtype), (".scales", scales.shape, scales.dtype)

    def replaced(self, suffix: str, array: np.ndarray) -> QuantizedTensor:
        """A copy whose codes (suffix ".codes") or scales (".scales") are `array`, as new tensors."""
        tensors = dict(self.stored_tensors())
        old = tensors[suffix]
        tensors[suffix] = Tensor._wrap(np.array(array, dtype=old._data.dtype, copy=True), old._autodiff, old._device)
        return QuantizedTensor(tensors[".codes"], tensors[".scales"], self.scheme, self.block_size, self.shape,
                               self.dtype)

    def in_context(self, autodiff: bool) -> QuantizedTensor:
        """This value with its tensors in the given autodiff context (self when they already are)."""
        if self.codes._autodiff == autodiff:
            return self
        return QuantizedTensor(alias(self.codes, autodiff), alias(self.scales, autodiff), self.scheme,
                               self.block_size, self.shape, self.dtype)

    def to(self, device: Any) -> QuantizedTensor:
        """A copy on `device` (codes and scales are never tracked, so a move and a fork are the same copy)."""
        device = as_device(device)
        moved = [Tensor._wrap(np.array(t._data, copy=True), t._autodiff, device) for t in (self.codes, self.scales)]
        return QuantizedTensor(*moved, self.scheme, self.block_size, self.shape, self.dtype)

    def with_dtype(self, dtype: Any) -> QuantizedTensor:
        """The same codes dequantizing to another float dtype."""
        return QuantizedTensor(self.codes, self.scales, self.scheme, self.block_size, self.shape, dtype)

    def clone(self) -> QuantizedTensor:
        """A copy whose tensors are new objects over the same arrays."""
        return QuantizedTensor(alias(self.codes), alias(self.scales), self.scheme, self.block_size, self.shape,
                               self.dtype)

    def __deepcopy__(self, memo: dict[int, Any]) -> QuantizedTensor:
        return self.to(self.device)

    def error_bound(self) -> np.ndarray:
        """The largest round-trip error the scheme allows for each element (float64, of the weight's shape)."""
        scales = self.scales._data.astype(np.float64)
        n = int(np.prod(self.shape, dtype=np.int64))
        if self.scheme == "int8":
            return np.broadcast_to((scales / 2).reshape((-1,) + (1,) * (len(self.shape) - 1)), self.shape).copy()
        if self.scheme == "int8-tensor":
            return np.full(self.shape, scales[0] / 2)
        half_step = 1 / 14 if self.scheme == "int4" else NF4_HALF_GAP
        return (np.repeat(scales, self.block_size)[:n] * half_step).reshape(self.shape)

    def __repr__(self) -> str:
        block = f", block_size={self.block_size}" if self.scheme in ("int4", "nf4") else ""
        return f"QuantizedTensor({self.scheme}{block}, {self.dtype}{list(self.shape)}, {self.nbytes} bytes)"


class Quantizer:
    """A quantization scheme: "int8" (per output channel), "int8-tensor", "int4" or "nf4" (blockwise).

    block_size is the number of consecutive values (of the row-major flattened weight) sharing one scale in the
    4-bit schemes; the int8 schemes ignore it.
    """

    def __init__(self, scheme: str = "int8", block_size: int = 64) -> None:
        if scheme not in SCHEMES:
            raise BrazeError(f"Quantizer: unknown scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
        if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size <= 0:
            raise BrazeError(f"Quantizer: block_size must be a positive int, got {block_size!r}")
        self.scheme, self.block_size = scheme, int(block_size)

    @property
    def bits(self) -> int:
        return 8 if self.scheme.startswith("int8") else 4

    def quantize(self, value: Any) -> QuantizedTensor:
        """The quantized form of a float tensor (or array, or Param's value), on the same device."""
        t = as_tensor(value)
        if not t.dtype.is_float:
            raise BrazeError(f"Quantizer: only floating-point tensors can be quantized, got {t.dtype}")
        if self.scheme == "int8" and t.ndim == 0:
            raise BrazeError("Quantizer: the per-channel int8 scheme needs a tensor of rank >= 1; use 'int8-tensor'")
        codes, scales = quantize_array(t._data, self.scheme, self.block_size)
        return QuantizedTensor(Tensor._wrap(codes, True, t._device), Tensor._wrap(scales, True, t._device),
                               self.scheme, self.block_size, tuple(t.shape), t.dtype)

    def __repr__(self) -> str:
        block = f", block_size={self.block_size}" if self.bits == 4 else ""
        return f"Quantizer({self.scheme!r}{block})"


def quantize_array(array: np.ndarray, scheme: str, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes, scales) of `array` in `scheme`: the inverse of the `dequantize` op up to the scheme's error."""
    w = np.asarray(array, dtype=np.float64)
    if scheme in ("int8", "int8-tensor"):
        count = w.shape[0] if scheme == "int8" else 1
        rows = w.reshape(count, w.size // count if count else 0)  # no -1: a weight may have 0 rows
        scales = (np.abs(rows).max(axis=1, initial=0.0) / 127).astype(np.float32)
        divisor = np.where(scales > 0, scales, 1).astype(np.float64)[:, None]
        codes = np.clip(np.rint(rows / divisor), -127, 127).astype(np.int8).reshape(w.shape)
        return codes, scales
    flat = w.reshape(-1)
    n = flat.size
    padded = np.zeros(-(-n // block_size) * block_size)
    padded[:n] = flat
    blocks = padded.reshape(-1, block_size)
    scales = np.abs(blocks).max(axis=1).astype(np.float32)
    divisor = np.where(scales > 0, scales, 1).astype(np.float64)[:, None]
    indices = nearest_level(blocks / divisor, scheme).reshape(-1)[:n]
    return pack_nibbles(indices), scales


def nearest_level(normalized: np.ndarray, scheme: str) -> np.ndarray:
    """The index of the nearest 4-bit level of each value (a value on a midpoint takes the lower level, as
    bitsandbytes' comparisons `x > midpoint` do)."""
    levels = np.asarray(LEVELS[scheme], dtype=np.float64)
    midpoints = (levels[1:] + levels[:-1]) / 2
    return np.searchsorted(midpoints, normalized, side="left").astype(np.uint8)


def pack_nibbles(indices: np.ndarray) -> np.ndarray:
    """4-bit indices two per byte, low nibble first (an odd count is padded with a zero nibble)."""
    even = np.zeros(indices.size + indices.size % 2, dtype=np.uint8)
    even[:indices.size] = indices
    return (even[0::2] | (even[1::2] << 4)).astype(np.uint8)


__all__ = ["Quantizer", "QuantizedTensor", "quantize_array"]
