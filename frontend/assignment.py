"""Indexed assignment (`x[index] = value`, masked_fill_, index_put) and in-place methods (`add_`, `triu_`, ...) as
functional updates with registered ops.

The updated tensor is computed as a new value from x's current one and then bound to `x`: eagerly its array and,
when either requires grad, its place in the autodiff graph (x becomes the result of the update, whose gradient
reaches x's old value except at the written positions, and the written value), while tracing its graph value.
As in torch, a leaf that requires grad cannot be changed in place while autodiff records, and each eager update
bumps x's version, so a backward through an op recorded with x's old value refuses to run. Positions known
without reading traced data (every index of an eager call; constant indices while tracing) become constant masks,
so the update is `where(mask, values, x)` with the values gathered by index_select: elementwise ops every compiled
graph can hold.
A traced index tensor's positions are data: the update is then the registered scatter op.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from braze.ir.errors import BrazeError, ShapeError

from .autodiff import GRAD_MODE
from .dispatch import apply
from .indexing import getitem
from .movement import normalize_dim
from .promotion import as_tensor, can_cast, cast
from .tensor import Tensor

LEAF_IN_PLACE = ("{what}: a leaf Variable that requires grad is being used in an in-place operation; assign "
                 "under braze.no_grad(), or into a non-leaf (x = w.clone(); x[...] = value)")


def setitem(x: Tensor, index: Any, value: Any) -> None:
    """x[index] = value, with torch's index kinds and broadcasting of value."""
    update_in_place(x, "x[...] = value", lambda old: assigned(old, index, value))


def assigned(x: Tensor, index: Any, value: Any, accumulate: bool = False) -> Tensor:
    """x with `value` written (or, with accumulate, added) at x[index], as a new tensor."""
    v = _like(x, value)
    mask = _leading_mask(x, index)
    if mask is not None and not accumulate and v.ndim <= x.ndim - mask.ndim:
        cond = apply("reshape", mask, shape=mask.shape + (1,) * (x.ndim - mask.ndim))
        out = apply("where", cond, v, x)
        if out.shape != x.shape:
            raise ShapeError(f"x[mask] = value: a value of shape {tuple(v.shape)} does not broadcast to the "
                             f"masked elements' shape {tuple(x.shape[mask.ndim:])}")
        return out
    positions = getitem(Tensor._wrap(np.arange(x.numel()).reshape(x.shape)), index)
    if not isinstance(positions._data, np.ndarray):
        return _scattered(x, positions, v, accumulate)
    return _written(x, positions._data, v, accumulate)


def _written(x: Tensor, positions: np.ndarray, v: Tensor, accumulate: bool) -> Tensor:
    """The update at constant positions: where(mask, values at their positions, x) (x + those values, with
    accumulate, which sums repeated positions)."""
    flat = positions.reshape(-1)
    if not flat.size:
        return x.clone()
    values = apply("reshape", apply("broadcast_to", v, shape=positions.shape), shape=(flat.size,))
    if accumulate:
        spread = apply("index_add", values, Tensor._wrap(flat), axis=0, shape=(x.numel(),))
        return apply("add", x, apply("reshape", spread, shape=tuple(x.shape)))
    source = np.zeros(x.numel(), np.int64)
    source[flat] = np.arange(flat.size)  # the last write to a position wins, as in numpy and torch on CPU
    hit = np.zeros(x.numel(), np.bool_)
    hit[flat] = True
    gathered = apply("index_select", values, Tensor._wrap(source), axis=0)
    return apply("where", Tensor._wrap(hit.reshape(x.shape)), apply("reshape", gathered, shape=tuple(x.shape)), x)


def _scattered(x: Tensor, positions: Tensor, v: Tensor, accumulate: bool) -> Tensor:
    """The update at traced positions: scatter (or scatter_add) into the flattened x."""
    count = positions.numel()
    flat_positions = apply("reshape", positions, shape=(count,))
    values = apply("reshape", apply("broadcast_to", v, shape=tuple(positions.shape)), shape=(count,))
    flat = apply("reshape", x, shape=(x.numel(),))
    if accumulate:
        out = apply("scatter_add", values, flat_positions, flat, axis=0, shape=(x.numel(),))
    else:
        out = apply("scatter", flat, flat_positions, values, axis=0)
    return apply("reshape", out, shape=tuple(x.shape))


def _like(x: Tensor, value: Any) -> Tensor:
    """The assigned value in x's dtype (a number as a constant of it)."""
    if not isinstance(value, Tensor):
        return Tensor._wrap(np.asarray(value, dtype=x._data.dtype))
    return value if value.dtype == x.dtype else cast(as_tensor(value), x.dtype)


def _leading_mask(x: Tensor, index: Any) -> Tensor | None:
    """A bool tensor index covering x's leading dims (alone in the index), else None."""
    if isinstance(index, tuple) and len(index) == 1:
        index = index[0]
    if isinstance(index, Tensor) and index.dtype.kind == "bool" and index.ndim \
            and tuple(index.shape) == tuple(x.shape[:index.ndim]):
        return index
    return None


def update_in_place(x: Tensor, what: str, update: Callable[[Tensor], Tensor]) -> Tensor:
    """Replace x's value by update(x's current value), in place; returns x.

    The update reads a stand-in for x's old value (its array and autodiff node), so recorded ops keep pointing at
    the old value while x moves on to the update's result.
    """
    from .traced import TracedTensor
    if isinstance(x, TracedTensor):
        x.value = x.tracer.lift(update(x))
        return x
    if x._requires_grad and x._node is None and GRAD_MODE.enabled:
        raise BrazeError(LEAF_IN_PLACE.format(what=what))
    old = Tensor._make(x._data, x._node, x._index, x._autodiff, x._device)
    old._requires_grad = x._requires_grad
    new = update(old)
    if new._node is not None:  # recorded: x becomes the update's result in the autodiff graph
        x._node, x._index, x._requires_grad = new._node, new._index, True
    x._data = new._data
    x._version += 1
    return x


def masked_fill_(self: Tensor, mask: Any, value: Any) -> Tensor:
    """Set the elements where `mask` is True to `value` in place; returns self."""
    from .functions import masked_fill
    return update_in_place(self, "masked_fill_", lambda old: masked_fill(old, mask, value))


def index_put(input: Tensor, indices: tuple[Any, ...], values: Any, accumulate: bool = False) -> Tensor:
    """input with `values` written (added, with accumulate) at input[indices], as a new tensor."""
    return assigned(input, tuple(indices), values, accumulate)


def index_put_(self: Tensor, indices: tuple[Any, ...], values: Any, accumulate: bool = False) -> Tensor:
    """index_put in place; returns self."""
    return update_in_place(self, "index_put_", lambda old: assigned(old, tuple(indices), values, accumulate))


def _fitted(name: str, input: Tensor, index: Tensor, src: Any) -> Tensor:
    """torch's scatter source: a number as a tensor of the index's shape, a larger source cut to it."""
    if not isinstance(src, Tensor):
        return apply("broadcast_to", _like(input, src), shape=tuple(index.shape))
    src = _like(input, src)
    if tuple(src.shape) != tuple(index.shape):
        if src.ndim != index.ndim or any(s < i for s, i in zip(src.shape, index.shape)):
            raise BrazeError(f"{name}: src of shape {tuple(src.shape)} is smaller than index {tuple(index.shape)}")
        src = getitem(src, tuple(slice(0, i) for i in index.shape))
    return src


def scatter(input: Tensor, dim: int, index: Tensor, src: Any = None, *, value: Any = None,
            reduce: str | None = None) -> Tensor:
    """input with src (or value) written at index along dim: out[..., index[i], ...] = src[i] (torch.scatter)."""
    if reduce not in (None, "add"):
        raise BrazeError(f"scatter: reduce={reduce!r} is not supported; supported values: None, 'add'")
    source = _fitted("scatter", input, index, value if src is None else src)
    axis = normalize_dim(dim, input.ndim)
    if reduce == "add":   # into input itself, in index order, as torch adds
        return apply("scatter_add", source, index, input, axis=axis, shape=tuple(input.shape))
    return apply("scatter", input, index, source, axis=axis)


def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """input with src added at index along dim (repeated positions sum)."""
    return scatter(input, dim, index, src, reduce="add")


def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: float = 1) -> Tensor:
    """input with alpha * source's slices added at the positions index selects along dim."""
    axis = normalize_dim(dim, input.ndim)
    source = _like(input, source if alpha == 1 else apply("mul", source, alpha))
    return apply("index_add", source, as_tensor(index), input, axis=axis, shape=tuple(input.shape))


def _in_place(fn: Any, name: str) -> Any:
    """fn(self, ...) as the in-place method `name`: the result, kept in self's dtype as torch keeps it, is bound to
    self; a result of a higher kind (a float result for an integer tensor) is refused as torch refuses it."""
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        def update(old: Tensor) -> Tensor:
            result = fn(old, *args, **kwargs)
            if result.dtype == old.dtype:
                return result
            if not can_cast(result.dtype, old.dtype):
                raise BrazeError(f"{name}: the result type {result.dtype} cannot be stored in place in a tensor of "
                                 f"dtype {old.dtype}; use the out-of-place {name[:-1]} or convert the tensor first")
            return cast(result, old.dtype)
        return update_in_place(self, name, update)
    method.__name__, method.__doc__ = name, f"{name[:-1]} in place; returns self."
    return method


# torch's in-place forms of Tensor methods (x.add_(y, alpha=2), mask.triu_(1), p.data.mul_(0.9), ...)
_IN_PLACE = ("add", "sub", "mul", "div", "pow", "neg", "abs", "sign", "square", "exp", "log", "sqrt", "rsqrt",
             "tanh", "sigmoid", "relu", "clamp", "clip", "tril", "triu", "sin", "cos", "log1p", "expm1", "floor",
             "ceil", "round", "fmod", "remainder", "true_divide", "multiply", "subtract", "divide", "negative")

Tensor.__setitem__ = setitem
for _fn in (scatter, scatter_add, index_add):
    setattr(Tensor, _fn.__name__, _fn)
    setattr(Tensor, _fn.__name__ + "_", _in_place(_fn, _fn.__name__ + "_"))
for _fn in (masked_fill_, index_put, index_put_):
    setattr(Tensor, _fn.__name__, _fn)
for _name in _IN_PLACE:
    setattr(Tensor, _name + "_", _in_place(getattr(Tensor, _name), _name + "_"))

__all__ = ["scatter", "scatter_add", "index_add", "index_put"]
