"""The single entry point through which every eager tensor operation runs: `apply(name, *operands, **attrs)`."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from braze.ir.errors import BrazeError
from braze.ir.evaluate import evaluate_checked
from braze.ir.registry import OpDef, get_op

from .autodiff import GRAD_MODE, Node
from .device import Device
from .tensor import Tensor, as_array
from .trace_context import TRACE, Interceptor

_OPS: dict[str, OpDef] = {}
_NO_ATTRS: dict[str, Any] = {}


@contextlib.contextmanager
def intercept(handler: Interceptor) -> Iterator[None]:
    """Route every apply call of this thread to `handler(name, operands, attrs)` inside the block (see apply)."""
    previous, TRACE.interceptor = TRACE.interceptor, handler
    try:
        yield
    finally:
        TRACE.interceptor = previous


def apply(name: str, *operands: Any, **attrs: Any) -> Any:
    """Apply the registered op `name` eagerly and record it for autodiff; one Tensor, or a tuple per result.

    Operands may be Tensors, objects with a `__braze_tensor__()` method returning a Tensor (module
    parameters), numpy arrays, or Python numbers (constants of the first tensor operand's dtype; dtype
    promotion is the caller's job, the IR never promotes). Attributes are checked against the op's schema
    once, the op's inference runs before its numpy reference (so bad shapes raise the op's ShapeError), and
    the application is recorded when grad mode is on, the op has a VJP and an operand requires grad.
    Operands without autodiff (`Tensor.inner()`) give results without autodiff; mixing them with operands
    that require grad while recording is an error.

    Interception: while `intercept(handler)` is active in this thread (a tracer), every call first goes to
    `handler(name, operands, attrs)` with the raw operands and attributes; the handler returns the result
    (e.g. graph values, or eager_apply's tensors after recording a node) or NotImplemented to let the eager
    path run. Op functions therefore never need to know whether they run eagerly or under a tracer.
    """
    interceptor = TRACE.interceptor
    if interceptor is not None:
        result = interceptor(name, operands, attrs)
        if result is not NotImplemented:
            return result
    return eager_apply(name, *operands, **attrs)


def eager_apply(name: str, *operands: Any, **attrs: Any) -> Any:
    """apply without interception: evaluate now and record for autodiff (see apply)."""
    op = _OPS.get(name)
    if op is None:
        op = _OPS[name] = get_op(name)
    tensors = operands
    for o in operands:
        if type(o) is not Tensor:
            tensors = _convert(operands)
            break
    device = None
    for t in tensors:
        if t._device is not None and t._device is not device:
            device = t._device if device is None else _same_device(name, device, t._device)
    checked = op.check_attrs(attrs) if (attrs or op.attrs) else _NO_ATTRS
    results = evaluate_checked(op, [t._data for t in tensors], checked)
    autodiff, requires = True, False
    for t in tensors:
        if t._requires_grad:
            requires = True
        if not t._autodiff:
            autodiff = False
    node = None
    if requires and GRAD_MODE.enabled and op.vjp is not None:
        if not autodiff:
            raise BrazeError(f"{name}: an operand without autodiff (from .inner()) is combined with one that "
                             f"requires grad; use .detach() to treat it as a constant")
        node = Node(op, checked, tensors, results)
    if len(results) == 1:
        return Tensor._make(results[0], node, 0, autodiff, device)
    return tuple(Tensor._make(r, node, i, autodiff, device) for i, r in enumerate(results))


def _same_device(name: str, device: Device, other: Device) -> Device:
    """The operands' common device; tensors on different devices never combine implicitly."""
    if other != device:
        raise BrazeError(f"{name}: operands are on different devices, {device} and {other}; "
                         f"move one with .to(device) first")
    return device


def _convert(operands: tuple[Any, ...]) -> tuple[Tensor, ...]:
    """Operands as Tensors: parameters through __braze_tensor__, arrays and numbers as constants."""
    out: list[Tensor | None] = []
    like = None
    for o in operands:
        if isinstance(o, Tensor):
            t = o
        elif (convert := getattr(type(o), "__braze_tensor__", None)) is not None:
            t = convert(o)
            if not isinstance(t, Tensor):
                raise TypeError(f"{type(o).__name__}.__braze_tensor__ returned {type(t).__name__}, not a Tensor")
        elif isinstance(o, (bool, int, float, np.generic)):
            out.append(None)  # a number waits for the dtype of the first tensor operand
            continue
        else:
            t = Tensor._wrap(as_array(o))
        like = t if like is None else like
        out.append(t)
    return tuple(t if t is not None else _number(o, like) for t, o in zip(out, operands))


def _number(value: Any, like: Tensor | None) -> Tensor:
    if like is None:
        return Tensor._wrap(as_array(value))
    return Tensor._wrap(np.asarray(value, dtype=like._data.dtype))
