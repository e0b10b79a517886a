"""The tensors of a torch file: storages (flat runs of bytes) and the strided tensors a pickle describes over them.

Every tensor is a numpy view of its storage's elements, never a copy, so a file's arrays take no more memory than
its storages: tensors that share a storage share memory (as torch.load gives them), and an expanded tensor
(stride 0) stays one element read many times. A view whose elements may overlap (a zero or small stride) is
read-only, as np.broadcast_to's are. Sizes, strides and offsets are checked with Python ints before any view is
made, and a tensor's bytes must respect BRAZE_MAX_TENSOR_BYTES. bfloat16 becomes float32 (once per storage).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from braze.ir.errors import RecordError

from .read_limits import is_int, tensor_bytes
from .safetensors_io import bfloat16_to_float32

BF16 = "bfloat16"

# element type of each storage type ("bfloat16" is read as uint16 bits, then widened; None: known, not readable)
STORAGE_TYPES: dict[str, str | None] = {
    "DoubleStorage": "f8", "FloatStorage": "f4", "HalfStorage": "f2", "BFloat16Storage": BF16,
    "LongStorage": "i8", "IntStorage": "i4", "ShortStorage": "i2", "CharStorage": "i1", "ByteStorage": "u1",
    "BoolStorage": "?", "UntypedStorage": "u1", "ComplexFloatStorage": "c8", "ComplexDoubleStorage": "c16",
    "QInt8Storage": None, "QUInt8Storage": None, "QInt32Storage": None, "QUInt4x2Storage": None,
    "QUInt2x4Storage": None,
}
TORCH_DTYPES: dict[str, str | None] = {
    "float64": "f8", "double": "f8", "float32": "f4", "float": "f4", "float16": "f2", "half": "f2",
    "bfloat16": BF16, "int64": "i8", "long": "i8", "int32": "i4", "int": "i4", "int16": "i2", "short": "i2",
    "int8": "i1", "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8", "bool": "?",
    "complex64": "c8", "cfloat": "c8", "complex128": "c16", "cdouble": "c16",
    **{name: None for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                               "float8_e8m0fnu", "float4_e2m1fn_x2", "complex32", "chalf", "qint8", "quint8",
                               "qint32", "quint4x2", "quint2x4", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16",
                               *(f"{kind}{bits}" for kind in ("int", "uint") for bits in range(1, 8)))},
}


def element_dtype(element: str, byteorder: str = "little") -> np.dtype:
    """The numpy dtype of an element code as stored (bfloat16 as its uint16 bits)."""
    code = "u2" if element == BF16 else element
    return np.dtype(code).newbyteorder(">" if byteorder == "big" else "<")


def check_readable(kind: str, name: str, element: str | None) -> str:
    """The element code of a storage type or dtype, or RecordError naming a torch type braze cannot read."""
    if element is None:
        raise RecordError(f"the file holds a tensor of torch.{name}, which braze cannot read (it reads float, "
                          f"bfloat16, int, uint, bool and complex tensors; numpy has no {kind} of this kind): "
                          f"convert it, e.g. with .float(), before saving")
    return element


class Inert:
    """Base of the stand-ins a pickle may reference: pickle's BUILD opcode must not alter them."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise RecordError(f"the pickle tries to set the state of a {type(self).__name__}")


class Storage(Inert):
    """A flat run of bytes; they arrive with the persistent id (zip) or after the pickle (legacy). A legacy
    storage view is a run of elements of a root storage."""

    __slots__ = ("key", "element", "numel", "root", "offset", "raw", "byteorder", "_arrays")

    def __init__(self, key: str, element: str, numel: int, root: Storage | None = None, offset: int = 0) -> None:
        tensor_bytes(f"storage {key!r}", (numel,), element_dtype(element).itemsize)
        self.key, self.element, self.numel, self.root, self.offset = key, element, numel, root, offset
        self.raw: bytes | None = None
        self.byteorder = "little"
        self._arrays: dict[str, np.ndarray] = {}

    @property
    def nbytes(self) -> int:
        return self.numel * element_dtype(self.element).itemsize

    def fill(self, data: bytes, byteorder: str) -> None:
        if len(data) != self.nbytes:
            raise RecordError(f"storage {self.key!r} holds {len(data)} bytes but the pickle declares {self.numel} "
                              f"elements ({self.nbytes} bytes)")
        self.raw, self.byteorder = data, byteorder

    def elements(self, element: str) -> np.ndarray:
        """The storage's bytes as writable elements of type `element`, in native byte order (made once)."""
        if self.root is not None:
            return self.root.elements(element)[self.offset:self.offset + self.numel]
        if self.raw is None:
            raise RecordError(f"the data of storage {self.key!r} is missing from the file")
        if element not in self._arrays:
            stored = element_dtype(element, self.byteorder)
            if len(self.raw) % stored.itemsize:
                raise RecordError(f"storage {self.key!r} of {len(self.raw)} bytes does not hold whole "
                                  f"{stored.itemsize}-byte elements")
            array = np.frombuffer(self.raw, dtype=stored)
            self._arrays[element] = (bfloat16_to_float32(array) if element == BF16
                                     else array.astype(stored.newbyteorder("=")))
        return self._arrays[element]


class TensorRef(Inert):
    """A tensor described by the pickle, made into a view once every storage holds its bytes."""

    __slots__ = ("storage", "offset", "size", "stride", "element")

    def __init__(self, storage: Any, offset: Any, size: Any, stride: Any, element: str | None = None) -> None:
        if not isinstance(storage, Storage):
            raise RecordError(f"a tensor is rebuilt from a {type(storage).__name__}, not from a tensor storage")
        if not (is_int(offset) and offset >= 0):
            raise RecordError(f"a tensor has an invalid storage offset {str(offset)[:40]}")
        if not (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride)
                and all(is_int(s) and s >= 0 for s in stride)):
            raise RecordError(f"a tensor has an invalid size {str(size)[:80]} or stride {str(stride)[:80]}")
        self.element = element or storage.element
        tensor_bytes("a tensor", size, element_dtype(self.element).itemsize)
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def materialize(self) -> np.ndarray:
        flat = self.storage.elements(self.element)
        if 0 in self.size:
            return np.empty(self.size, dtype=flat.dtype)
        last = self.offset + sum((d - 1) * s for d, s in zip(self.size, self.stride))
        if last >= flat.size:
            raise RecordError(f"a tensor of size {self.size} with stride {self.stride} at offset {self.offset} "
                              f"reaches element {last} of storage {self.storage.key!r}, which has {flat.size}")
        return np.lib.stride_tricks.as_strided(flat[self.offset:], shape=self.size,
                                               strides=tuple(s * flat.itemsize for s in self.stride),
                                               writeable=not _may_overlap(self.size, self.stride))


def _may_overlap(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """False when every index reaches a distinct element: each stride, smallest first, passes the extent of the
    dimensions with smaller strides."""
    extent = 1
    for s, d in sorted((s, d) for d, s in zip(size, stride) if d > 1):
        if s < extent:
            return True
        extent = s * (d - 1) + extent
    return False
