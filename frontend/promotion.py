"""torch's dtype promotion for the frontend; the IR never promotes, so casts are inserted here through apply.

Operands fall in three groups, as in torch: tensors with dimensions, zero-dimensional tensors, and Python
numbers ("wrapped" scalars, which take the default float32 for floats and int64 for ints). A group of a
lower category (bool < integer < float) never changes the dtype of a higher one: int32 tensor * 2 stays
int32, float32 tensor + float64 0-d tensor stays float32, but int tensor * 2.5 becomes float32.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from braze.ir.errors import DTypeError
from braze.ir.types import DType, as_dtype, bool_, float32, int64, promote

from .dispatch import apply
from .tensor import Tensor, as_array, dtype_of

_CATEGORY = {"bool": 0, "uint": 1, "int": 1, "float": 2}
SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


def _category(d: DType | None) -> int:
    return -1 if d is None else _CATEGORY[d.kind]


def _promote_same_group(a: DType | None, b: DType) -> DType:
    if a is None or a == b:
        return b
    ca, cb = _category(a), _category(b)
    if ca != cb:
        return a if ca > cb else b
    try:
        return promote(a, b)
    except DTypeError:
        raise DTypeError(f"no braze dtype holds both {a} and {b} (numpy promotes them to "
                         f"{np.result_type(a.numpy, b.numpy)})") from None


def _combine(higher: DType | None, lower: DType | None) -> DType | None:
    """torch's combine_categories: the lower group only matters when its category is higher."""
    if higher is None:
        return lower
    if lower is None or higher.is_float:
        return higher
    if higher == bool_ or _category(lower) > _category(higher):
        return _promote_same_group(higher, lower)
    return higher


def promote_types(type1: DType, type2: DType) -> DType:
    """torch.promote_types: the smallest dtype both convert to without leaving the higher category."""
    return _promote_same_group(as_dtype(type1), as_dtype(type2))


def can_cast(from_: DType, to: DType) -> bool:
    """torch.can_cast: whether a value may be stored as `to` without moving to a lower category (float to integer,
    integer to bool); in-place ops store their result under this rule."""
    return _category(as_dtype(from_)) <= _category(as_dtype(to))


def scalar_dtype(value: Any) -> DType:
    """The dtype a Python number takes on its own: bool, int64 or the default float32."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return int64
    if isinstance(value, (float, np.floating)):
        return float32
    raise TypeError(f"expected a tensor or a number, got {type(value).__name__}")


def result_dtype(*operands: Any) -> DType:
    """The dtype torch gives an elementwise op on these operands (tensors, arrays or numbers)."""
    dim = zero = wrapped = None
    for o in operands:
        if isinstance(o, SCALARS):
            wrapped = _promote_same_group(wrapped, scalar_dtype(o))
            continue
        t = as_operand(o)
        if t._data.ndim:
            dim = _promote_same_group(dim, t.dtype)
        else:
            zero = _promote_same_group(zero, t.dtype)
    result = _combine(dim, _combine(zero, wrapped))
    if result is None:
        raise TypeError("an op needs at least one operand")
    return result


def as_operand(value: Any) -> Tensor:
    """A Tensor for anything apply accepts as an operand (numbers excluded: they need a dtype)."""
    if isinstance(value, Tensor):
        return value
    convert = getattr(type(value), "__braze_tensor__", None)
    if convert is not None:
        return convert(value)
    if isinstance(value, np.ndarray):
        return Tensor._wrap(value)
    raise TypeError(f"expected a tensor, got {type(value).__name__}")


def as_tensor(data: Any, dtype: Any = None) -> Tensor:
    """A Tensor sharing `data` when it already is one (or an array of the dtype), else a new constant."""
    if isinstance(data, Tensor):
        return data if dtype is None else to_dtype(data, dtype)
    if getattr(type(data), "__braze_tensor__", None) is not None:
        return as_tensor(as_operand(data), dtype)
    return Tensor._wrap(as_array(data, dtype))


def to_dtype(input: Tensor, dtype: Any) -> Tensor:
    """`input` converted to `dtype` (itself when it already has it)."""
    return cast(input, as_dtype(dtype))


def cast(t: Tensor, dtype: DType) -> Tensor:
    """`t` as `dtype` through the cast op (so autodiff sees it); `t` itself when it already is."""
    return t if dtype_of(t._data) == dtype else apply("cast", t, dtype=dtype)


def coerce(operands: Sequence[Any], dtype: DType | str | None = None) -> list[Tensor]:
    """Operands as Tensors of one dtype (the promoted one unless given); numbers become constants."""
    target = result_dtype(*operands) if dtype is None else as_dtype(dtype)
    out = []
    for o in operands:
        if isinstance(o, SCALARS):
            out.append(Tensor._wrap(np.asarray(o, dtype=target.numpy)))
        else:
            out.append(cast(as_operand(o), target))
    return out


def binary_operands(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Promote the two operands of a binary op; the common cases (same dtype, tensor and number) are fast."""
    if type(a) is Tensor:
        ad = a._data.dtype
        if type(b) is Tensor and b._data.dtype == ad:
            return a, b
        if type(b) is float and ad.kind == "f":
            return a, Tensor._wrap(np.asarray(b, dtype=ad))
    x, y = coerce((a, b))
    return x, y
