"""Element types and tensor types: the static facts every IR value carries."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DTypeError


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
_BY_NAME = {d.name: d for d in DTYPES} | {d.numpy_name: d for d in DTYPES}
_BY_NUMPY = {np.dtype(d.numpy_name): d for d in DTYPES}


def as_dtype(spec: object) -> DType:
    """Accept a DType, an IR or numpy name ("f32", "float32"), a numpy dtype or a Python type."""
    if isinstance(spec, DType):
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
    try:
        name = np.dtype(spec).name  # type: ignore[call-overload]
    except TypeError:
        raise DTypeError(f"not a dtype: {spec!r}") from None
    if name not in _BY_NAME:
        supported = ", ".join(d.numpy_name for d in DTYPES)
        raise DTypeError(f"unsupported dtype {name}; braze supports {supported}")
    return _BY_NAME[name]


def promote(a: DType, b: DType) -> DType:
    """The numpy result type of two dtypes, restricted to braze's dtypes."""
    return as_dtype(np.result_type(a.numpy, b.numpy))


@dataclass(frozen=True, slots=True)
class TensorType:
    """The static type of an IR value: a shape of non-negative ints and an element type."""

    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self) -> None:
        shape = tuple(map(int, self.shape))
        if shape and min(shape) < 0:
            raise ValueError(f"negative dimension in shape {shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", as_dtype(self.dtype))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

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
