"""Element types and tensor types: the static facts every IR value carries."""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

import numpy as np

from .errors import BrazeError, DTypeError, ShapeError, TensorSizeError


@dataclass(frozen=True, slots=True)
class DType:
    """An element type; `name` is its IR spelling (f32), `numpy` the numpy dtype it maps to."""

    name: str
    numpy_name: str
    kind: str  # "float", "int", "uint" or "bool"
    bits: int

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.numpy_name)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_floating_point(self) -> bool:
        """torch.dtype's name for is_float."""
        return self.is_float

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def itemsize(self) -> int:
        return max(self.bits // 8, 1)

    def __repr__(self) -> str:
        return f"braze.{self.numpy_name}"

    def __str__(self) -> str:
        return self.numpy_name


float32 = DType("f32", "float32", "float", 32)
float64 = DType("f64", "float64", "float", 64)
int32 = DType("i32", "int32", "int", 32)
int64 = DType("i64", "int64", "int", 64)
int8 = DType("i8", "int8", "int", 8)
uint8 = DType("u8", "uint8", "uint", 8)
bool_ = DType("bool", "bool", "bool", 8)

DTYPES: tuple[DType, ...] = (float32, float64, int32, int64, int8, uint8, bool_)
# 16-bit floats exist as names (braze.float16, braze.half, braze.bfloat16) so torch code that mentions them imports,
# and file readers decode their storage, but braze computes in neither: any use as a tensor dtype is refused.
float16 = DType("f16", "float16", "float", 16)
bfloat16 = DType("bf16", "bfloat16", "float", 16)
_STORAGE_ONLY = {"float16": float16, "half": float16, "f16": float16, "bfloat16": bfloat16, "bf16": bfloat16}
_BY_NAME = {d.name: d for d in DTYPES} | {d.numpy_name: d for d in DTYPES}
_BY_NUMPY = {np.dtype(d.numpy_name): d for d in DTYPES}


def as_dtype(spec: object) -> DType:
    """Accept a DType, an IR or numpy name ("f32", "float32"), a numpy dtype or a Python type."""
    if isinstance(spec, DType):
        if spec.bits == 16:
            _refuse_storage_only(spec.numpy_name)
        return spec
    if isinstance(spec, np.dtype) and spec in _BY_NUMPY:  # the eager hot path: numpy's dtype.name is slow
        return _BY_NUMPY[spec]
    if isinstance(spec, str) and spec in _BY_NAME:
        return _BY_NAME[spec]
    if spec is float:
        return float32
    if spec is int:
        return int64
    if spec is bool:
        return bool_
    if isinstance(spec, str) and spec in _STORAGE_ONLY:
        _refuse_storage_only(_STORAGE_ONLY[spec].numpy_name)
    try:
        name = np.dtype(spec).name  # type: ignore[call-overload]
    except TypeError:
        raise DTypeError(f"not a dtype: {spec!r}") from None
    if name in _STORAGE_ONLY:
        _refuse_storage_only(name)
    if name not in _BY_NAME:
        supported = ", ".join(d.numpy_name for d in DTYPES)
        raise DTypeError(f"unsupported dtype {name}; braze supports {supported}")
    return _BY_NAME[name]


def _refuse_storage_only(name: str) -> None:
    raise DTypeError(f"{name}: braze stores no {name} tensors and has no {name} arithmetic; use float32 (.float()) "
                     f"or float64")


def promote(a: DType, b: DType) -> DType:
    """The numpy result type of two dtypes, restricted to braze's dtypes."""
    return as_dtype(np.result_type(a.numpy, b.numpy))


MAX_TENSOR_BYTES_ENV = "BRAZE_MAX_TENSOR_BYTES"


def physical_memory() -> int | None:
    """This machine's physical memory in bytes, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):  # no sysconf (Windows) or no such name
        return None


# The machine's memory, so a tensor that cannot be held is refused with a clear error instead of an allocation
# that fails or swaps, and at most 1 TiB, which keeps kernel index arithmetic on byte offsets far from wrapping
# (an offset times a factor up to 2**22 stays below 2**63).
DEFAULT_MAX_TENSOR_BYTES = min(2 ** 40, physical_memory() or 2 ** 40)
# Tensors up to this size are always allowed, so the hot path of small eager tensors never reads the environment;
# it is also the smallest cap the environment variable may set.
MIN_MAX_TENSOR_BYTES = 2 ** 20
MAX_RANK = 64  # numpy's limit on array dimensions


def max_tensor_bytes() -> int:
    """The largest tensor in bytes: BRAZE_MAX_TENSOR_BYTES as read now (so a process can change it), else the
    machine's memory up to 1 TiB."""
    raw = os.environ.get(MAX_TENSOR_BYTES_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_TENSOR_BYTES
    text = raw.strip()
    if not text.isdigit() or len(text) > 19 or not MIN_MAX_TENSOR_BYTES <= int(text) <= sys.maxsize:
        raise BrazeError(f"{MAX_TENSOR_BYTES_ENV}={raw!r}: expected a number of bytes from {MIN_MAX_TENSOR_BYTES} "
                         f"(1 MiB) to {sys.maxsize}")
    return int(text)


def _check_extent(shape: tuple[int, ...], dtype: DType) -> None:
    """Refuse a shape whose bytes (counting only its non-empty dimensions, because strides are products of the
    dimensions even when one of them is 0) exceed the cap; Python ints, so the product cannot wrap."""
    if len(shape) > MAX_RANK:
        raise TensorSizeError(f"a tensor type of rank {len(shape)} has more than {MAX_RANK} dimensions")
    extent = math.prod(shape) * dtype.itemsize
    if not extent and shape:
        extent = math.prod(d or 1 for d in shape) * dtype.itemsize
    if extent > MIN_MAX_TENSOR_BYTES:  # skip formatting the message on the hot path
        check_bytes(f"tensor type {dtype.name}[{','.join(map(str, shape))}]", extent)


def check_bytes(what: str, nbytes: int) -> None:
    """Raise TensorSizeError naming `what` when `nbytes` exceeds the size limit."""
    if nbytes <= MIN_MAX_TENSOR_BYTES:
        return
    limit = max_tensor_bytes()
    if nbytes > limit:
        raise TensorSizeError(f"{what} needs {nbytes} bytes, more than the limit of {limit} bytes "
                              f"({MAX_TENSOR_BYTES_ENV})")


@dataclass(frozen=True, slots=True)
class TensorType:
    """The static type of an IR value: a shape of non-negative ints and an element type, within the size limit
    (`max_tensor_bytes`); a larger one raises TensorSizeError."""

    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self) -> None:
        shape = tuple(map(int, self.shape))
        if shape and min(shape) < 0:
            raise ShapeError(f"negative dimension in shape {shape}")
        dtype = as_dtype(self.dtype)
        _check_extent(shape, dtype)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)

    def check_size(self) -> None:
        """Raise TensorSizeError if the type exceeds the size limit as it is now (it may have been lowered since
        the type was made)."""
        _check_extent(self.shape, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def with_shape(self, shape: tuple[int, ...]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        return f"{self.dtype.name}[{','.join(map(str, self.shape))}]"


def type_of(array: np.ndarray) -> TensorType:
    """The TensorType of a numpy array (or anything np.asarray accepts)."""
    array = np.asarray(array)
    return TensorType(array.shape, as_dtype(array.dtype))
