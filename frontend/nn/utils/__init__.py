"""braze.nn.utils: gradient clipping and flat parameter vectors, as torch.nn.utils (variable-length sequences
for the recurrent layers are in braze.nn.utils.rnn).

Gradients are changed in place outside autodiff, as torch's do; `foreach` is accepted for compatibility and
changes nothing (every tensor takes the same path).
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from braze.ir.errors import BrazeError

from ... import movement as _movement
from ...autodiff import no_grad
from ...tensor import Tensor
from ..param import Param
from . import rnn


def _as_list(parameters: Any) -> list[Any]:
    """A single tensor or an iterable of them, as torch's `parameters` argument."""
    return [parameters] if isinstance(parameters, (Tensor, Param)) else list(parameters)


def _grads(parameters: Any) -> list[Tensor]:
    return [p.grad for p in _as_list(parameters) if p.grad is not None]


def vector_norm(array: np.ndarray, norm_type: float) -> np.ndarray:
    """torch.linalg.vector_norm of the flattened array, in the array's dtype."""
    a = np.abs(array.reshape(-1))
    if norm_type == math.inf:
        value = a.max(initial=0.0)
    elif norm_type == -math.inf:
        value = a.min(initial=math.inf)
    elif norm_type == 0:
        value = np.count_nonzero(a)
    elif norm_type == 1:
        value = a.sum()
    elif norm_type == 2:
        value = np.sqrt(np.dot(a, a))
    else:
        value = (a ** norm_type).sum() ** (1.0 / norm_type)
    return np.asarray(value, dtype=array.dtype)


def _scale_in_place(grad: Tensor, factor: np.ndarray) -> None:
    with no_grad(), np.errstate(invalid="ignore"):  # a non-finite norm scales to NaN, as torch
        grad.copy_(Tensor._wrap(grad._data * factor.astype(grad._data.dtype)))


def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float | str = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Scale the gradients so their joint `norm_type` norm is at most `max_norm`; returns the norm before.

    The norm is that of the per-gradient norms, so it equals the norm of all gradients concatenated; every
    gradient is multiplied by min(1, max_norm / (norm + 1e-6)), as torch does.
    """
    norm_type = float(norm_type)
    grads = _grads(parameters)
    if not grads:
        return Tensor(0.0)
    norms = [vector_norm(g._data, norm_type) for g in grads]
    total = vector_norm(np.stack(norms).astype(np.result_type(*norms)), norm_type)
    if error_if_nonfinite and not np.isfinite(total):
        raise BrazeError(f"clip_grad_norm_: the total norm of order {norm_type} for gradients from `parameters` is "
                         f"non-finite, so it cannot be clipped. To disable this error and scale the gradients by "
                         f"the non-finite norm anyway, set `error_if_nonfinite=False`")
    coef = np.minimum(np.asarray(max_norm, total.dtype) / (total + np.asarray(1e-6, total.dtype)), 1.0)
    for g in grads:
        _scale_in_place(g, coef)
    return Tensor._wrap(total)


def clip_grad_value_(parameters: Any, clip_value: float, foreach: bool | None = None) -> None:
    """Clamp every gradient elementwise into [-clip_value, clip_value], in place."""
    clip_value = float(clip_value)
    for g in _grads(parameters):
        with no_grad():
            g.copy_(Tensor._wrap(np.clip(g._data, -clip_value, clip_value)))


def parameters_to_vector(parameters: Iterable[Any]) -> Tensor:
    """The parameters flattened and concatenated into one vector (recorded by autodiff, as torch's cat)."""
    return _movement.cat([_movement.reshape(p, (-1,)) for p in _as_list(parameters)])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Any]) -> None:
    """Copy consecutive slices of `vec` into the parameters' values (outside autodiff)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    params = _as_list(parameters)
    total = sum(math.prod(p.shape) for p in params)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise BrazeError(f"vector_to_parameters: the parameters hold {total} elements, got a vector of shape "
                         f"{tuple(vec.shape)}")
    start = 0
    for p in params:
        count = math.prod(p.shape)
        piece = vec._data[start:start + count].reshape(p.shape)
        if isinstance(p, Param):
            p.assign(piece)
        else:
            p.data = np.array(piece, dtype=p.dtype.numpy)
        start += count


__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]
