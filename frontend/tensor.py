"""The eager Tensor: a numpy array with autodiff bookkeeping and torch's method and operator API.

Every computation goes through `dispatch.apply` (via `functions`), so eager execution, autodiff and a
future tracer share one path; this file holds only data access, conversions and thin method bindings.
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from braze.ir.errors import BrazeError
from braze.ir.types import DType, as_dtype

from .device import CPU, Device, as_device, is_device_like
from .markers import eager_only
from .namespace import check_memory_format, preserve_format
from .size import Size

_DTYPES: dict[np.dtype, DType] = {}


def dtype_of(array: np.ndarray) -> DType:
    """The braze DType of a numpy array (cached by numpy dtype)."""
    d = _DTYPES.get(array.dtype)
    if d is None:
        d = _DTYPES[array.dtype] = as_dtype(array.dtype)
    return d


def as_array(data: Any, dtype: Any = None) -> np.ndarray:
    """Array for tensor data: Python floats -> float32, ints -> int64, bools -> bool; numpy keeps its dtype. With a
    dtype, Python floats convert to it directly (0.1 as float64 is 0.1, not 0.1 rounded to float32 first)."""
    if isinstance(data, Tensor):
        array = data._data
    elif isinstance(data, (np.ndarray, np.generic)):
        array = np.asarray(data)
    else:
        array = np.asarray(data)
        if array.dtype == np.float64 and dtype is None:
            array = array.astype(np.float32)
    if dtype is not None:
        array = array.astype(as_dtype(dtype).numpy, copy=False)
    dtype_of(array)  # rejects dtypes braze does not support
    return array


_READS_VALUES = "reads the values into Python"


class Tensor:
    """An eager n-dimensional array that records the ops applied to it for reverse-mode autodiff."""

    # _version counts in-place changes (torch's version counter): autodiff refuses a backward through an op whose
    # operand changed after it was recorded.
    __slots__ = ("_data", "_node", "_index", "_requires_grad", "_autodiff", "_device", "_version", "grad",
                 "__weakref__")
    __array_priority__ = 1000  # numpy defers `ndarray op Tensor` to the Tensor's reflected operator

    def __init__(self, data: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> None:
        self._data = np.array(as_array(data, dtype), copy=True)
        self._node, self._index, self._requires_grad, self._autodiff, self.grad = None, 0, False, True, None
        self._device, self._version = as_device(device), 0
        if requires_grad:
            self.requires_grad_(True)

    @staticmethod
    def _make(data: np.ndarray, node: Any, index: int, autodiff: bool, device: Device | None = None) -> Tensor:
        """Result `index` of the recorded `node` (None for a leaf); the eager hot path skips __init__.

        A tensor made without a device (an internal constant) is not placed yet: it reports the default
        device and takes the device of the operands it is combined with.
        """
        t = object.__new__(Tensor)
        t._data, t._node, t._index, t._device = data, node, index, device
        t._requires_grad, t._autodiff, t.grad, t._version = node is not None, autodiff, None, 0
        return t

    @staticmethod
    def _wrap(data: np.ndarray, autodiff: bool = True, device: Device | None = None) -> Tensor:
        """A leaf tensor over `data` (no copy), not requiring grad."""
        return Tensor._make(data, None, 0, autodiff, device)

    # --- data and metadata --------------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        """The dims as a braze.Size (a tuple of ints)."""
        return Size.of(self._data.shape)

    @property
    def dtype(self) -> DType:
        """The element type (a braze DType)."""
        return dtype_of(self._data)

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return self._data.ndim

    @property
    def device(self) -> Device:
        """Where the tensor lives (every device is host memory; ops refuse operands of different devices)."""
        return self._device or CPU

    def dim(self) -> int:
        """The number of dims."""
        return self._data.ndim

    def is_floating_point(self) -> bool:
        """Whether the element type is a float type (torch's name for the test)."""
        return self.dtype.is_float

    def numel(self) -> int:
        """The number of elements."""
        return int(self._data.size)

    def size(self, dim: int | None = None) -> Size | int:
        """The shape, or one dimension of it (negative dims count from the end)."""
        if dim is None:
            return Size.of(self._data.shape)
        return self._data.shape[_fn.normalize_dim(dim, self._data.ndim)]

    @eager_only(_READS_VALUES)
    def numpy(self) -> np.ndarray:
        """The underlying array (shared, as torch's .numpy()); detach first when it requires grad."""
        if self._requires_grad:
            raise BrazeError("numpy(): the tensor requires grad; call .detach().numpy()")
        return self._data

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        array = self._data if dtype is None else self._data.astype(dtype)
        return np.array(array, copy=True) if copy else array

    @eager_only(_READS_VALUES)
    def item(self) -> bool | int | float:
        """The single element as a Python number."""
        if self._data.size != 1:
            raise BrazeError(f"item(): only a one-element tensor converts to a Python number, shape {self.shape}")
        return self._data.reshape(()).item()

    @eager_only(_READS_VALUES)
    def tolist(self) -> Any:
        """The elements as nested Python lists."""
        return self._data.tolist()

    def __len__(self) -> int:
        if not self._data.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        if not self._data.ndim:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise BrazeError(f"the truth value of a tensor with {self._data.size} elements is ambiguous")
        return bool(self._data.reshape(()))

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if not self.dtype.is_integer or self._data.size != 1:
            raise TypeError(f"only a one-element integer tensor can be used as an index, got {self.dtype}{self.shape}")
        return int(self.item())

    def __format__(self, spec: str) -> str:
        return format(self.item(), spec) if self._data.ndim == 0 else format(repr(self), spec)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        extras = []
        if self._data.dtype.name not in ("float32", "int64", "bool") or self._data.size == 0:
            extras.append(f"dtype={self.dtype!r}")
        if self._device is not None and self._device != CPU:
            extras.append(f"device='{self._device}'")
        if self._node is not None:
            extras.append(f"grad_fn=<{self._node.op.name}>")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + ", ".join([format_array(self._data)] + extras) + ")"

    # --- autodiff -----------------------------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        """Whether the tensor is part of autodiff: a leaf marked for gradients or a recorded op's result."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Mark a leaf tensor as one whose gradient backward computes; returns self."""
        if self._node is not None:
            raise BrazeError("requires_grad_: only leaf tensors can change requires_grad (use .detach() first)")
        if requires_grad and not self._autodiff:
            raise BrazeError("requires_grad_: this tensor has autodiff disabled (.inner()); it cannot require grad")
        if requires_grad and not self.dtype.is_float:
            raise BrazeError(f"requires_grad_: only floating-point tensors can require grad, got {self.dtype}")
        self._requires_grad = bool(requires_grad)
        return self

    def is_require_grad(self) -> bool:
        """Whether backward computes a gradient for this tensor."""
        return self._requires_grad

    def is_tracked(self) -> bool:
        """Part of a recorded autodiff graph: requires grad or was produced by a recorded op."""
        return self._requires_grad or self._node is not None

    def is_autodiff(self) -> bool:
        """Whether autodiff is enabled for this tensor (False for .inner() views)."""
        return self._autodiff

    @property
    def is_leaf(self) -> bool:
        """True unless the tensor was produced by a recorded op."""
        return self._node is None

    @property
    def grad_fn(self) -> str | None:
        """The name of the op that produced this tensor in the recorded graph (None for leaves)."""
        return None if self._node is None else self._node.op.name

    def detach(self) -> Tensor:
        """The same data as a new leaf that does not require grad."""
        return Tensor._wrap(self._data, self._autodiff, self._device)

    def inner(self) -> Tensor:
        """The same data as a tensor without autodiff: ops on it are never recorded."""
        return Tensor._wrap(self._data, False, self._device)

    @property
    def data(self) -> Tensor:
        """The values as a detached tensor; assigning replaces them (outside autodiff), as torch's .data."""
        return self.detach()

    @data.setter
    def data(self, value: Any) -> None:
        self._data = as_array(value, self.dtype) if not isinstance(value, Tensor) else value._data

    @eager_only("eager autodiff; a traced graph's gradients come from braze.grad_graph or compile_train_step")
    def backward(self, gradient: Any = None) -> Any:
        """Accumulate gradients into the leaves' .grad; returns this call's Gradients mapping."""
        return _ad.backward(self, gradient)

    def copy_(self, src: Any) -> Tensor:
        """Overwrite the values (broadcast and cast to this tensor's shape and dtype); returns self.

        While autodiff records and either side requires grad, this is an in-place update (assignment.py): the
        gradient reaches src, and a leaf that requires grad is refused, as torch. Otherwise the array is written
        in place when this tensor owns it; a view of another array or an op's recorded result is replaced by a
        fresh array instead, so no other tensor or recorded graph sees the change.
        """
        if _ad.GRAD_MODE.enabled and (self._requires_grad or getattr(src, "_requires_grad", False)):
            from .assignment import update_in_place
            return update_in_place(self, "copy_", lambda old: _fn.broadcast_to(
                _fn.to_dtype(_fn.as_tensor(src, self.dtype), self.dtype), self.shape))
        with _ad.no_grad():
            value = _fn.broadcast_to(_fn.to_dtype(_fn.as_tensor(src, self.dtype), self.dtype), self.shape)
        if self._data.flags.writeable and self._data.base is None and self._node is None:
            np.copyto(self._data, value._data)
        else:
            self._data = np.array(value._data, copy=True)
        self._version += 1
        return self

    def zero_(self) -> Tensor:
        """Set every element to 0 in place."""
        return self.copy_(0)

    def fill_(self, value: float) -> Tensor:
        """Set every element to `value` in place."""
        return self.copy_(value)

    def clone(self, *, memory_format: Any = preserve_format) -> Tensor:
        """A copy of the data that stays in the autodiff graph (the gradient passes through unchanged)."""
        check_memory_format("clone", memory_format)
        out = _fn.reshape(self, self.shape)
        out._data = np.array(out._data, copy=True)
        return out

    # --- dtype conversions --------------------------------------------------------------------------------
    def to(self, *args: Any, dtype: Any = None, device: Any = None, non_blocking: bool = False, copy: bool = False,
           memory_format: Any = preserve_format) -> Tensor:
        """Convert to a dtype (or another tensor's dtype and device) and/or move to a device, with torch's forms:
        to(dtype), to(device, dtype), to(other), with non_blocking and copy also positionally after them.

        A move is a copy recorded by autodiff (the `copy` op), so a moved tensor that requires grad is an
        intermediate whose gradient flows back to the original; a tensor already there is returned as is unless
        copy=True. non_blocking has nothing to overlap (every device is host memory) and is accepted.
        """
        flags = [a for a in args if isinstance(a, bool)]
        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif is_device_like(a):
                device = a
            elif not isinstance(a, bool):
                dtype = a
        if len(flags) > 2:
            raise TypeError(f"to(): at most two bool arguments (non_blocking, copy), got {len(flags)}")
        copy = flags[1] if len(flags) == 2 else copy
        check_memory_format("to", memory_format)
        out = self if dtype is None or as_dtype(dtype) == self.dtype else _fn.to_dtype(self, dtype)
        if device is not None and out.device != (device := as_device(device)):
            out = _dispatch.apply("copy", out)
            out._device = device
        return out.clone() if copy and out is self else out

    def type(self, dtype: Any) -> Tensor:
        """self converted to `dtype`."""
        return _fn.to_dtype(self, dtype)

    def float(self) -> Tensor:
        """self as float32."""
        return _fn.to_dtype(self, "float32")

    def double(self) -> Tensor:
        """self as float64."""
        return _fn.to_dtype(self, "float64")

    def long(self) -> Tensor:
        """self as int64."""
        return _fn.to_dtype(self, "int64")

    def int(self) -> Tensor:
        """self as int32."""
        return _fn.to_dtype(self, "int32")

    def bool(self) -> Tensor:
        """self as bool."""
        return _fn.to_dtype(self, "bool")

    def half(self) -> Tensor:
        """Refused: braze has no float16 arithmetic (the DTypeError says what to use)."""
        return _fn.to_dtype(self, "float16")

    def cpu(self) -> Tensor:
        """self: braze tensors are always on the CPU."""
        return self

    def contiguous(self) -> Tensor:
        """self: braze tensors have no strided views to compact."""
        return self

    # --- operators ----------------------------------------------------------------------------------------
    def __add__(self, o: Any) -> Tensor: return _fn.add(self, o)
    def __radd__(self, o: Any) -> Tensor: return _fn.add(o, self)
    def __sub__(self, o: Any) -> Tensor: return _fn.sub(self, o)
    def __rsub__(self, o: Any) -> Tensor: return _fn.sub(o, self)
    def __mul__(self, o: Any) -> Tensor: return _fn.mul(self, o)
    def __rmul__(self, o: Any) -> Tensor: return _fn.mul(o, self)
    def __truediv__(self, o: Any) -> Tensor: return _fn.div(self, o)
    def __rtruediv__(self, o: Any) -> Tensor: return _fn.div(o, self)
    def __pow__(self, o: Any) -> Tensor: return _fn.pow(self, o)
    def __rpow__(self, o: Any) -> Tensor: return _fn.pow(o, self)
    def __matmul__(self, o: Any) -> Tensor: return _fn.matmul(self, o)
    def __rmatmul__(self, o: Any) -> Tensor: return _fn.matmul(o, self)
    def __neg__(self) -> Tensor: return _fn.neg(self)
    def __pos__(self) -> Tensor: return self
    def __abs__(self) -> Tensor: return _fn.abs(self)
    def __eq__(self, o: Any) -> Tensor: return _fn.eq(self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Tensor: return _fn.ne(self, o)  # type: ignore[override]
    def __lt__(self, o: Any) -> Tensor: return _fn.lt(self, o)
    def __le__(self, o: Any) -> Tensor: return _fn.le(self, o)
    def __gt__(self, o: Any) -> Tensor: return _fn.gt(self, o)
    def __ge__(self, o: Any) -> Tensor: return _fn.ge(self, o)

    def __getitem__(self, index: Any) -> Tensor:
        return _indexing.getitem(self, index)


def format_array(data: np.ndarray) -> str:
    """The array as torch prints it: 4 decimals (or scientific notation for wide ranges), aligned columns."""
    if data.dtype.kind != "f":
        return np.array2string(data, separator=", ", prefix="tensor(")
    finite = np.abs(data[np.isfinite(data)])
    nonzero = finite[finite != 0]
    if nonzero.size and np.all(nonzero == np.round(nonzero)) and nonzero.max() < 1e8:
        fmt = "{:.0f}."
    elif nonzero.size and (nonzero.max() / nonzero.min() > 1000 or nonzero.max() >= 1e8 or nonzero.min() < 1e-4):
        fmt = "{:.4e}"
    else:
        fmt = "{:.4f}"
    width = max((len(fmt.format(v)) for v in data.reshape(-1)[np.isfinite(data.reshape(-1))]), default=0)

    def one(v: float) -> str:
        return (fmt.format(v) if np.isfinite(v) else str(v)).rjust(width)
    return np.array2string(data, separator=", ", prefix="tensor(", formatter={"float_kind": one})


from . import autodiff as _ad  # noqa: E402  (these modules build on Tensor)
from . import dispatch as _dispatch  # noqa: E402
from . import functions as _fn  # noqa: E402
from . import indexing as _indexing  # noqa: E402
from . import methods as _methods  # noqa: E402, F401  (binds the math and shape methods onto Tensor)
from . import creation_methods as _creation_methods  # noqa: E402, F401  (binds new_zeros, normal_, ... onto Tensor)
from . import assignment as _assignment  # noqa: E402, F401  (binds __setitem__, masked_fill_, index_put onto Tensor)
