"""Evaluate registered ops on numpy arrays: the checked path shared by eager tensors, the interpreter and folding."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .errors import BrazeError
from .registry import Emitter, OpDef, get_op
from .types import DType, TensorType, as_dtype, type_of


def conform(op: OpDef, result: Any, expected: TensorType) -> np.ndarray:
    """Hold a reference result to its inferred type; a shape disagreement is a bug in the op definition."""
    array = np.asarray(result)
    if array.shape != expected.shape:
        raise BrazeError(f"{op.name}: reference produced shape {array.shape}, inference says {expected} "
                         f"(an op-definition bug)")
    if array.dtype != expected.dtype.numpy:
        array = array.astype(expected.dtype.numpy)
    return array


def evaluate_checked(op: OpDef, arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """Run `op` on arrays whose attributes are already checked: infer (raising on bad input), then compute."""
    out_types = op.infer_types([type_of(a) for a in arrays], attrs)
    results = op.run(arrays, attrs)
    return tuple(conform(op, r, t) for r, t in zip(results, out_types, strict=True))


def evaluate(name: str, arrays: Sequence[Any], attrs: dict[str, Any] | None = None) -> tuple[np.ndarray, ...]:
    """Apply the registered op `name` to numpy arrays; always returns a tuple of results."""
    op = get_op(name)
    return evaluate_checked(op, [np.asarray(a) for a in arrays], op.check_attrs(attrs or {}))


class Concrete:
    """A numpy array seen as an IR value (braze dtype, shape), for emitters that compute eagerly."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def dtype(self) -> DType:
        return as_dtype(self.array.dtype)

    def __repr__(self) -> str:
        return f"Concrete({self.array!r})"


class NumpyEmitter(Emitter):
    """Binds ops by computing them at once with the numpy references."""

    def bind(self, name: str, operands: Sequence[Any], attrs: dict[str, Any]) -> Any:
        results = evaluate(name, [o.array if isinstance(o, Concrete) else o for o in operands], attrs)
        wrapped = tuple(Concrete(r) for r in results)
        return wrapped[0] if len(wrapped) == 1 else wrapped


def vjp_numpy(name: str, cotangents: Any, operands: Sequence[np.ndarray],
              attrs: dict[str, Any] | None = None) -> tuple[np.ndarray | None, ...]:
    """The op's VJP evaluated with numpy: gradients of the operands for the given output cotangent(s)."""
    op = get_op(name)
    if op.vjp is None:
        raise NotImplementedError(f"no vjp rule for {name}")
    attrs = op.check_attrs(attrs or {})
    outs = evaluate_checked(op, operands, attrs)
    wrap = Concrete
    if op.num_results == 1:
        g, out = wrap(np.asarray(cotangents)), wrap(outs[0])
    else:
        g = tuple(None if c is None else wrap(np.asarray(c)) for c in cotangents)
        out = tuple(wrap(o) for o in outs)
    grads = op.vjp(NumpyEmitter(), g, out, *(wrap(np.asarray(x)) for x in operands), **attrs)
    return tuple(None if gr is None else gr.array for gr in grads)
