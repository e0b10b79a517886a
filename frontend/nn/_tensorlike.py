"""TensorLike: operators, numpy conversion and Tensor methods forwarded to an object's effective value.

A Param is usable wherever a Tensor is: `x @ self.weight.T + self.bias` works because every operator and
unknown public attribute goes to `val()`, and op functions accept it through `__braze_tensor__`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor

_REFLECTED = ("add", "sub", "mul", "truediv", "pow", "matmul", "and", "or")
_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
_UNARY = ("neg", "pos", "abs", "invert", "bool", "float", "int", "index", "len", "iter")


class TensorLike:
    """Mixin for objects with a `val()` method returning a Tensor: behave as that Tensor in expressions."""

    __slots__ = ()
    __array_priority__ = 1001  # numpy defers `ndarray op param` to the param's reflected operator

    def __braze_tensor__(self) -> Tensor:
        return self.val()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return self.val().__array__(dtype, copy)

    def __getattr__(self, name: str) -> Any:
        # only reached for names the object does not define; private names never forward (copying, pickling)
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self.val(), name)

    def __getitem__(self, index: Any) -> Tensor:
        return self.val()[index]

    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        shape = self.shape
        return shape if dim is None else shape[dim]

    def dim(self) -> int:
        return len(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def T(self) -> Tensor:
        return self.val().T

    @property
    def mT(self) -> Tensor:
        return self.val().mT

    @property
    def data(self) -> Tensor:
        return self.val().data

    @data.setter
    def data(self, value: Any) -> None:
        self.val().data = value

    __hash__ = object.__hash__


def _forward(name: str) -> Any:
    dunder = f"__{name}__"

    def method(self: TensorLike, *args: Any) -> Any:
        return getattr(self.val(), dunder)(*args)

    method.__name__ = dunder
    return method


for _name in _REFLECTED:
    setattr(TensorLike, f"__{_name}__", _forward(_name))
    setattr(TensorLike, f"__r{_name}__", _forward(f"r{_name}"))
for _name in _COMPARISONS + _UNARY:
    setattr(TensorLike, f"__{_name}__", _forward(_name))
