"""Traced tensors: Tensors that stand for a graph value while braze.trace runs, with a type but no data.

A TracedTensor goes wherever an eager Tensor goes: every op on it reaches `dispatch.apply`, which the tracer
intercepts to append a node. Shape, dtype and device are known; the values are not, so anything that needs
them (`bool(t)`, `.item()`, `.numpy()`, `np.asarray(t)`, ...) raises a TraceError that names the user's source
line: the first stack frame outside the braze package.
"""
from __future__ import annotations

import linecache
import os
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from braze.ir.errors import TraceError
from braze.ir.graph import Value
from braze.ir.types import TensorType

from .autodiff import no_grad
from .device import Device
from .namespace import check_memory_format, preserve_format
from .tensor import Tensor
from .trace_context import TRACE

if TYPE_CHECKING:
    from .trace import Tracer

UNKNOWN = "the value of a traced tensor is not known while tracing"
_DATA_FLOW = ("a graph cannot depend on Python values computed from tensor data; keep the computation in "
              "tensor ops")
_CONTROL_FLOW = ("data-dependent Python control flow (if, while, and/or on tensor values) cannot be captured "
                 "in a graph; compute both sides and select with braze.where(condition, a, b), or decide "
                 "outside the traced code")

_BRAZE_DIRS: tuple[str, ...] = ()
_INSIDE: dict[str, bool] = {}


def _inside_braze(filename: str) -> bool:
    """Whether a frame's file belongs to the braze package (its facade, frontend or ir folders)."""
    global _BRAZE_DIRS
    inside = _INSIDE.get(filename)
    if inside is None:
        if not _BRAZE_DIRS:
            packages = ("braze", "braze.frontend", "braze.ir")
            _BRAZE_DIRS = tuple(os.path.dirname(os.path.abspath(sys.modules[p].__file__ or "")) + os.sep
                                for p in packages if p in sys.modules)
        inside = _INSIDE[filename] = os.path.abspath(filename).startswith(_BRAZE_DIRS)
    return inside


def user_frame() -> tuple[str, int, str] | None:
    """(file, line, function) of the innermost stack frame outside braze: the user code being traced, or the
    code that called braze.trace when the traced code is all braze's; None when braze itself called it."""
    # a walk stops at the innermost running braze.trace frame of this thread, so a trace started by braze itself
    # (the dump command) does not blame whatever script started braze
    entries = TRACE.entries
    stop = entries[-1] if entries else None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if not _inside_braze(code.co_filename):
            return code.co_filename, frame.f_lineno, code.co_name
        if frame is stop:  # only the caller of braze.trace is left to blame
            caller = frame.f_back
            if caller is None or _inside_braze(caller.f_code.co_filename):
                return None
            return caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name
        frame = frame.f_back
    return None


def trace_error(reason: str) -> TraceError:
    """A TraceError whose message starts with the user's file:line and shows that source line."""
    where = user_frame()
    if where is None:
        return TraceError(reason)
    file, line, function = where
    source = linecache.getline(file, line).strip()
    error = TraceError(f"{file}:{line}: {reason}" + (f"\n    in {function}: {source}" if source else ""))
    error.file, error.line = file, line  # type: ignore[attr-defined]
    return error


class Abstract:
    """What a traced tensor holds instead of an array: the facts inference gives (shape, numpy dtype).

    Frontend code may read `t._data.shape`, `.dtype`, `.ndim` and `.size`; anything else needs values and
    raises a TraceError.
    """

    __slots__ = ("shape", "dtype", "ndim", "size")

    def __init__(self, type: TensorType) -> None:
        self.shape, self.dtype = type.shape, type.dtype.numpy
        self.ndim, self.size = len(type.shape), type.size

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> NoReturn:
        raise trace_error(f"a traced tensor is converted to a numpy array: {UNKNOWN}; {_DATA_FLOW}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # protocol probes (numpy's __array_interface__, copy, ...) just miss
            raise AttributeError(name)
        raise trace_error(f"the data of a traced tensor is read (.{name}): {UNKNOWN}; {_DATA_FLOW}")


class TracedTensor(Tensor):
    """A Tensor standing for the graph value `value` of the running `tracer`."""

    __slots__ = ("value", "tracer")

    @staticmethod
    def of(value: Value, tracer: Tracer, device: Device | None = None) -> TracedTensor:
        t = object.__new__(TracedTensor)
        t._data, t._node, t._index, t._device = Abstract(value.type), None, 0, device
        t._requires_grad, t._autodiff, t.grad, t._version = False, True, None, 0
        t.value, t.tracer = value, tracer
        return t

    # --- values are unknown -------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        raise trace_error(f".numpy() of a traced tensor: {UNKNOWN}; {_DATA_FLOW}")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        raise trace_error(f"a traced tensor is converted to a numpy array: {UNKNOWN}; {_DATA_FLOW}")

    def item(self) -> bool | int | float:
        raise trace_error(f".item() of a traced tensor: {UNKNOWN}; {_DATA_FLOW}")

    def tolist(self) -> Any:
        raise trace_error(f".tolist() of a traced tensor: {UNKNOWN}; {_DATA_FLOW}")

    def __bool__(self) -> bool:
        raise trace_error(f"bool() of a traced tensor: {UNKNOWN}; {_CONTROL_FLOW}")

    def __float__(self) -> float:
        raise trace_error(f"float() of a traced tensor: {UNKNOWN}; {_DATA_FLOW}")

    def __int__(self) -> int:
        raise trace_error(f"int() of a traced tensor: {UNKNOWN}; {_DATA_FLOW}")

    def __index__(self) -> int:
        raise trace_error(f"a traced tensor is used as a Python index: {UNKNOWN}; {_DATA_FLOW}")

    def backward(self, gradient: Any = None) -> Any:
        raise trace_error("backward() while tracing: braze.trace records the forward pass only; differentiate "
                          "eagerly, or trace a function that computes gradients with ops")

    def __repr__(self) -> str:
        return f"TracedTensor(%{self.value.name}: {self.value.type})"

    def __format__(self, spec: str) -> str:
        if self.ndim == 0 and spec:
            return format(self.item(), spec)
        return format(repr(self), spec)

    # --- copies and in-place updates rebind the graph value -------------------------------------------------
    def detach(self) -> TracedTensor:
        """The same graph value: a forward graph has no autodiff to stop."""
        return TracedTensor.of(self.value, self.tracer, self._device)

    def inner(self) -> TracedTensor:
        return self.detach()

    @property
    def data(self) -> TracedTensor:
        return self.detach()

    @data.setter
    def data(self, value: Any) -> None:
        self.copy_(value)

    def clone(self, *, memory_format: Any = preserve_format) -> Tensor:
        """Recorded as eager clone computes it (a reshape to the same shape)."""
        from . import functions as _fn
        check_memory_format("clone", memory_format)
        return _fn.reshape(self, self.shape)

    def copy_(self, src: Any) -> TracedTensor:
        """Later uses of this tensor see `src` (broadcast and cast as eager copy_ does); nothing is overwritten."""
        from . import functions as _fn
        with no_grad():
            value = _fn.broadcast_to(_fn.to_dtype(_fn.as_tensor(src, self.dtype), self.dtype), self.shape)
        self.value = self.tracer.lift(value)
        return self
