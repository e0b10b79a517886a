"""Tensor's math, reduction and shape methods: the functions of `functions` bound as methods.

A function whose first parameter is `input` and whose other parameters match torch's method is bound as
is (`t.sum(dim=1)` is `braze.sum(t, dim=1)`); methods whose signature differs from the function's
(varargs shapes, `.T`) are written out below.
"""
from __future__ import annotations

from typing import Any

from braze.ir.errors import BrazeError
from braze.ir.types import bool_

from . import arrangement, binning, elementary, ordering, pointwise, reductions
from . import functions as F
from . import data_dependent as D
from . import linalg as L
from . import math_functions as MF
from .creation import multinomial
from .movement import repeat
from .namespace import contiguous_format
from .tensor import Tensor

_SAME_AS_FUNCTION = (
    "add", "sub", "mul", "div", "true_divide", "pow", "neg", "abs", "sign", "square", "exp", "log", "sqrt", "rsqrt",
    "tanh", "sigmoid", "erf", "relu", "clamp", "clip", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
    "logical_not", "logical_and", "logical_or", "masked_fill", "sum", "mean", "max", "min", "amax", "amin",
    "argmax", "argmin", "var", "std", "logsumexp", "softmax", "log_softmax", "matmul", "transpose", "t",
    "flatten", "squeeze", "unsqueeze", "narrow", "chunk", "unbind", "gather", "index_select",
    "broadcast_to", "negative", "multiply", "subtract", "divide", "swapaxes", "roll", "repeat_interleave",
    "movedim", "moveaxis", "unflatten", "tril", "triu", "diagonal", "sort", "argsort", "topk", "cumsum", "cumprod")

for _name in _SAME_AS_FUNCTION:
    setattr(Tensor, _name, getattr(F, _name))


def _sizes(args: tuple[Any, ...]) -> tuple[int, ...]:
    """Sizes given as separate ints or as one sequence."""
    if len(args) == 1 and not isinstance(args[0], int):
        return tuple(args[0])
    return tuple(args)


def reshape(self: Tensor, *shape: Any) -> Tensor:
    """The same elements under a new shape; one dimension may be -1."""
    return F.reshape(self, _sizes(shape))


def view_as(self: Tensor, other: Tensor) -> Tensor:
    """self reshaped to other's shape."""
    return F.reshape(self, other.shape)


def permute(self: Tensor, *dims: Any) -> Tensor:
    """The dims reordered (given as ints or one sequence)."""
    return F.permute(self, _sizes(dims))


def expand(self: Tensor, *sizes: Any) -> Tensor:
    """Repeat size-1 dimensions (and add leading ones) to reach `sizes`; -1 keeps a dimension."""
    return F.broadcast_to(self, _sizes(sizes))


def expand_as(self: Tensor, other: Tensor) -> Tensor:
    """self broadcast to other's shape."""
    return F.broadcast_to(self, other.shape)


def split(self: Tensor, split_size: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces of `split_size` along `dim`, or of the listed sizes (torch's Tensor.split names it split_size)."""
    return F.split(self, split_size, dim)


def flip(self: Tensor, *dims: Any) -> Tensor:
    """The elements reversed along `dims` (given as ints or one sequence)."""
    return F.flip(self, _sizes(dims))


def where(self: Tensor, condition: Tensor, other: Any) -> Tensor:
    """Elements of self where `condition` holds, else of `other` (torch's Tensor.where)."""
    return F.where(condition, self, other)


def type_as(self: Tensor, other: Tensor) -> Tensor:
    """self converted to other's dtype."""
    return F.to_dtype(self, other.dtype)


def _T(self: Tensor) -> Tensor:
    """The dims reversed (a matrix transpose for 2-D tensors)."""
    return F.permute(self, tuple(reversed(range(self.ndim))))


def _mT(self: Tensor) -> Tensor:
    """The last two dims swapped: a batch of matrices transposed."""
    if self.ndim < 2:
        raise ValueError(f"mT: expects a tensor of rank >= 2, got shape {self.shape}")
    return F.transpose(self, -2, -1)


def element_size(self: Tensor) -> int:
    """The bytes one element takes."""
    return self.dtype.itemsize


def is_contiguous(self: Tensor, memory_format: Any = contiguous_format) -> bool:
    """True: braze tensors are dense in row-major order (the contiguous format)."""
    if memory_format is not contiguous_format:
        raise BrazeError(f"is_contiguous: memory_format={memory_format!r} is not supported; braze tensors are "
                         f"row-major, so only braze.contiguous_format applies")
    return True


def _require_bool(name: str, *operands: Any) -> None:
    for o in operands:
        if isinstance(o, Tensor) and o.dtype != bool_:
            raise TypeError(f"{name}: bitwise operators work on bool tensors only here, got {o.dtype}")


def __and__(self: Tensor, other: Any) -> Tensor:
    _require_bool("&", self, other)
    return F.logical_and(self, other)


def __or__(self: Tensor, other: Any) -> Tensor:
    _require_bool("|", self, other)
    return F.logical_or(self, other)


def __invert__(self: Tensor) -> Tensor:
    _require_bool("~", self)
    return F.logical_not(self)


for _fn in (reshape, view_as, permute, expand, expand_as, split, flip, where, type_as, element_size, is_contiguous,
            __and__, __or__, __invert__):
    setattr(Tensor, _fn.__name__, _fn)
Tensor.repeat = repeat
for _name in MF.__all__:
    setattr(Tensor, _name, getattr(MF, _name))
for _name in D.__all__:
    setattr(Tensor, _name, getattr(D, _name))
Tensor.floor_divide = F.floor_divide
Tensor.__floordiv__ = F.floor_divide
Tensor.__rfloordiv__ = lambda self, other: F.floor_divide(other, self)
Tensor.__mod__ = MF.remainder
Tensor.__rmod__ = lambda self, other: MF.remainder(other, self)
Tensor.multinomial = multinomial
for _name in ("bmm", "addmm", "baddbmm", "outer", "ger"):
    setattr(Tensor, _name, getattr(L, _name))
for _module in (elementary, pointwise, reductions, arrangement, binning, ordering, L):
    for _name in getattr(_module, "TENSOR_METHODS", ()):
        setattr(Tensor, _name, getattr(_module, _name))
Tensor.view = reshape
Tensor.nelement = Tensor.numel
Tensor.is_cuda = property(lambda self: False, doc="False: every braze tensor is in host memory.")
Tensor.is_cpu = property(lambda self: True, doc="True: every braze tensor is in host memory.")
Tensor.reshape_as = view_as
Tensor.__rand__ = __and__
Tensor.__ror__ = __or__
Tensor.T = property(_T)
Tensor.mT = property(_mT)
