"""The inputs and outputs of a compiled call: their checks, the documented conversions and the staging buffers.

An InputSpec checks one graph input (type, rank, shape, dtype, index range) with errors naming it, converts what
converts safely, and stages what the native code cannot read in place (not C-contiguous, not aligned to its dtype,
or converted) in an aligned buffer of its own. An OutputSpec allocates one graph output per call, or validates an
array the caller passed as `out=`, which the native code writes in place when it is aligned to its dtype (kernels
claim only element alignment) and otherwise through the spec's staging buffer, copied out after it has run.
"""
from __future__ import annotations

import ctypes
from functools import partial
from typing import Any, Callable

import numpy as np

from braze.ir.errors import BrazeError, DTypeError, IndexRangeError, ShapeError
from braze.ir.graph import Graph
from braze.ir.registry import get_op
from braze.ir.types import TensorType

from .memory import address, aligned_empty, aligned_maker

# Outputs up to this size are allocated by numpy as they come (numpy's small-block cache makes that cheapest); larger
# ones on a 64-byte boundary, where the kernels' vector stores never straddle two cache lines.
SMALL_OUTPUT_BYTES = 4096


def _describe(t: TensorType) -> str:
    return f"a {t.dtype.numpy_name} array of shape {t.shape} ({t})"


def index_bounds(graph: Graph) -> dict[str, int]:
    """Graph inputs used as indices (directly or through ops that preserve values, such as reshapes and casts): the
    exclusive upper bound their values must respect, from the registry's index_operands trait. Native kernels
    cannot raise, so the runtime checks these before a call instead of letting an out-of-range token id read a
    clamped row (kernels check indices computed inside the graph themselves)."""
    origin = {v.name: v.name for v in graph.inputs}
    bounds: dict[str, int] = {}
    for node in graph.nodes:
        op = get_op(node.op)
        if op.preserves_values and node.inputs and node.inputs[0].name in origin:
            origin[node.out.name] = origin[node.inputs[0].name]
        for position, bound in op.index_operands:
            indices = node.inputs[position]
            if indices.name in origin:
                name = origin[indices.name]
                bounds[name] = min(bounds.get(name, bound(node)), bound(node))
    return bounds


class InputSpec:
    """One graph input: its name, type and staging buffer, with the checks of a call."""

    __slots__ = ("index", "name", "type", "dtype", "shape", "nbytes", "staging", "staging_address", "bound")

    def __init__(self, index: int, name: str, typ: TensorType, bound: int | None = None) -> None:
        self.index, self.name, self.type, self.bound = index, name, typ, bound
        self.dtype, self.shape, self.nbytes = typ.dtype.numpy, typ.shape, typ.nbytes
        self.staging = aligned_empty(typ.shape, self.dtype)
        self.staging_address = address(self.staging)

    def label(self) -> str:
        return f"input {self.index} ('{self.name}')"

    def check(self, x: Any) -> np.ndarray:
        """The input as an ndarray of the right shape, after the checks and the documented conversions."""
        if type(x) is not np.ndarray:
            x = self._as_array(x)
        if x.shape != self.shape:
            if x.ndim != len(self.shape):
                raise ShapeError(f"{self.label()}: expected rank {len(self.shape)}, {_describe(self.type)}; "
                                 f"got rank {x.ndim} with shape {x.shape}")
            raise ShapeError(f"{self.label()}: expected {_describe(self.type)}; got shape {x.shape}")
        if x.dtype != self.dtype and not safe_conversion(x.dtype, self.dtype):
            raise DTypeError(f"{self.label()}: expected {_describe(self.type)}; got dtype {x.dtype}, which does "
                             f"not convert safely (convert it explicitly, e.g. x.astype(np.{self.dtype.name}))")
        if self.bound is not None and x.size and (x.min() < 0 or x.max() >= self.bound):
            bad = x[(x < 0) | (x >= self.bound)].flat[0]
            raise IndexRangeError(f"{self.label()}: index {bad} is out of range; the values index a dimension of "
                                  f"size {self.bound}, so they must lie in [0, {self.bound})")
        return x

    def _as_array(self, x: Any) -> np.ndarray:
        if isinstance(x, np.ndarray):
            return x
        if isinstance(x, np.generic) or (hasattr(x, "__array__") and not isinstance(x, (str, bytes, type))):
            try:
                return np.asarray(x)
            except Exception as exc:  # a broken __array__: report it as the user's input
                raise BrazeError(f"{self.label()}: expected {_describe(self.type)}; converting the "
                                 f"{type(x).__name__} failed: {exc}") from None
        raise BrazeError(f"{self.label()}: expected {_describe(self.type)}; got {type(x).__name__}")

    def pointer(self, x: np.ndarray) -> int:
        """The address to pass for x: its own data when usable as is, else the staging buffer filled from it."""
        if x.dtype == self.dtype and x.flags.c_contiguous and x.flags.aligned:
            return address(x)
        self.staging[...] = x
        return self.staging_address


def safe_conversion(got: np.dtype, want: np.dtype) -> bool:
    """Byte order only, or a widening numpy calls safe within integers or within floats (never across kinds)."""
    if got.newbyteorder("=") == want:
        return True
    same_family = got.kind == want.kind or (got.kind == "u" and want.kind == "i")
    return same_family and bool(np.can_cast(got, want, casting="safe"))


class OutputSpec:
    """One graph output: its type, how a call allocates it, and a staging buffer for out= arrays not aligned to their
    dtype (made on the first one)."""

    __slots__ = ("index", "type", "dtype", "shape", "nbytes", "staging", "staging_address", "new")

    def __init__(self, index: int, typ: TensorType) -> None:
        self.index, self.type = index, typ
        self.dtype, self.shape, self.nbytes = typ.dtype.numpy, typ.shape, typ.nbytes
        self.staging: np.ndarray | None = None
        self.staging_address = 0
        self.new: Callable[[], np.ndarray] = partial(np.empty, self.shape, self.dtype) \
            if self.nbytes <= SMALL_OUTPUT_BYTES else aligned_maker(self.shape, self.dtype)

    def accept(self, out: Any) -> np.ndarray:
        """A caller's `out=` array for this output, after checking that the native code can write it in place."""
        label = f"out[{self.index}]"
        if not isinstance(out, np.ndarray):
            raise BrazeError(f"{label}: expected a numpy array ({_describe(self.type)}); got {type(out).__name__}")
        if out.shape != self.shape or out.dtype != self.dtype:
            raise ShapeError(f"{label}: expected {_describe(self.type)}; got a {out.dtype} array of shape "
                             f"{out.shape}")
        flags = out.flags
        if not (flags.c_contiguous and flags.writeable):
            raise BrazeError(f"{label}: expected a writable C-contiguous array; pass np.ascontiguousarray(...) or "
                             f"a fresh np.empty{self.shape}")
        if self.staging is None and self.nbytes and not flags.aligned:
            self.staging = aligned_empty(self.shape, self.dtype)
            self.staging_address = address(self.staging)
        return out

    def pointer(self, out: np.ndarray) -> int:
        """Where the native code writes this output: the array itself when aligned to its dtype (a numpy array 16
        bytes past a cache line is written in place: staged, the copy of a 4 MB result cost 5% of an SGEMM of
        n = 1024 on one thread), else the staging buffer."""
        return address(out) if out.flags.aligned else self.staging_address

    def finish(self, out: np.ndarray, pointer: int) -> None:
        """Copy the staged result into `out` when the native code wrote the staging buffer."""
        if pointer == self.staging_address and self.nbytes:
            ctypes.memmove(address(out), pointer, self.nbytes)
