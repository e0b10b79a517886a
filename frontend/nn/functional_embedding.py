"""torch.nn.functional's embedding, embedding_bag and one_hot: row lookups composed from registered ops
(index_select, one_hot, matmul), so they trace and compile from existing kernels."""
from __future__ import annotations

from typing import Any

import numpy as np

from braze.ir.types import int64

from .. import functions as _f
from ..autodiff import is_grad_enabled, no_grad
from ..dispatch import apply
from ..tensor import Tensor
from ..trace_context import TRACE
from .functional_norm import store_in_place

__all__ = ["embedding", "embedding_bag", "one_hot"]


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of `weight` at the indices in `input` (shape input.shape + (embedding_dim,)).

    The row at padding_idx receives no gradient, as torch. With max_norm, each row looked up whose norm_type-norm
    exceeds max_norm is rescaled to norm max_norm in the weight itself (as torch, outside autodiff) before the
    lookup; the lookup's gradient reaches the weight unscaled. With scale_grad_by_freq, each row's gradient is
    divided by the number of times its index occurs in `input`, as torch. sparse=True gives the dense gradient of
    equal values (braze has no sparse tensors): zeros in the rows not looked up. Both together cannot be
    differentiated (torch's embedding_backward refuses them), so a lookup that autodiff records refuses them.
    """
    if scale_grad_by_freq and sparse and weight.requires_grad and is_grad_enabled():
        raise ValueError("embedding: scale_grad_by_freq=True is not supported with sparse=True when the weight "
                         "requires grad (torch's backward refuses it); supported: one of them, or no_grad()")
    index = _f.as_tensor(input)
    table = weight if max_norm is None else _renormed_rows(weight, index, max_norm, norm_type)
    out = apply("index_select", table, index, axis=0)
    if scale_grad_by_freq:
        out = apply("scale_grad", out, _inverse_counts(index, weight))
    if padding_idx is None:
        return out
    row = padding_idx + weight.shape[0] if padding_idx < 0 else padding_idx
    at_padding = _f.unsqueeze(_f.eq(index, row), -1)
    return _f.where(at_padding, out.detach(), out)


def _inverse_counts(index: Tensor, weight: Tensor) -> Tensor:
    """1 / (how often each entry's index occurs in `index`), shaped index.shape + (1,), in the weight's dtype."""
    flat = _f.reshape(index, (-1,))
    ones = Tensor._wrap(np.ones(flat.shape, weight.dtype.numpy))
    counts = apply("index_add", ones, flat, axis=0, shape=(weight.shape[0],))
    per_entry = _f.reshape(apply("index_select", counts, flat, axis=0), tuple(index.shape) + (1,))
    return _f.div(1.0, per_entry)


def _renormed_rows(weight: Tensor, index: Tensor, max_norm: float, norm_type: float) -> Tensor:
    """The weight with the looked-up rows of norm above max_norm scaled to max_norm, stored into the weight (when
    not tracing); returned as weight + (renormed - weight).detach(), so the lookup's gradient reaches the weight
    unscaled."""
    with no_grad():
        w = weight.detach()
        norms = _f.pow(_f.sum(_f.pow(_f.abs(w), norm_type), 1), 1.0 / norm_type)
        hits = _f.gt(_f.sum(one_hot(_f.reshape(index, (-1,)), w.shape[0]), 0), 0)
        scale = _f.where(_f.logical_and(hits, _f.gt(norms, max_norm)), _f.div(max_norm, _f.add(norms, 1e-7)), 1.0)
        renormed = _f.mul(w, _f.unsqueeze(scale, 1))
        shift = _f.sub(renormed, w)
    table = _f.add(weight, shift)  # read before the store below replaces the weight's array
    if TRACE.watcher is None:  # a traced graph renormalizes in every lookup instead (idempotent) and stores nothing
        store_in_place(weight, renormed)
    return table


EMBEDDING_BAG_MODES = ("sum", "mean", "max")


def _bags(index: Tensor, offsets: Any, include_last_offset: bool) -> tuple[Tensor, np.ndarray]:
    """The flat indices and the (bags, positions) 0/1 membership matrix of torch's (input, offsets) forms."""
    if index.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets has to be None if input is 2D")
        bags, length = index.shape
        return _f.reshape(index, (-1,)), np.repeat(np.eye(bags), length, axis=1)
    if index.ndim != 1 or offsets is None:
        raise ValueError(f"embedding_bag: expected a 2-d input, or a 1-d input with 1-d offsets, got input of shape "
                         f"{index.shape} and offsets {None if offsets is None else tuple(offsets.shape)}")
    starts = np.asarray(_f.as_tensor(offsets).numpy(), dtype=np.int64)  # the bag boundaries fix the graph's shape
    n = index.shape[0]
    ends = np.append(starts[1:], n) if not include_last_offset else starts[1:]
    starts = starts if not include_last_offset else starts[:-1]
    if starts.size and (starts[0] != 0 or np.any(np.diff(starts) < 0) or np.any(ends > n)):
        raise ValueError(f"embedding_bag: offsets must start at 0, not decrease and stay within the input's {n} "
                         f"entries, got {starts.tolist()}")
    positions = np.arange(n)
    return index, ((positions >= starts[:, None]) & (positions < ends[:, None])).astype(np.float64)


def embedding_bag(input: Tensor, weight: Tensor, offsets: Any = None, max_norm: float | None = None,
                  norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Any = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:
    """Sums, means or maxima of bags of embedding rows: each row of a 2-d input is a bag, or a 1-d input is
    split at `offsets`. Entries equal to padding_idx are left out; an empty bag gives zeros."""
    if mode not in EMBEDDING_BAG_MODES:
        raise ValueError(f"embedding_bag: mode={mode!r} is not supported; supported: 'sum', 'mean', 'max'")
    if per_sample_weights is not None and mode != "sum":
        raise ValueError(f"embedding_bag: per_sample_weights is only supported for mode='sum', got mode={mode!r}")
    index = _f.as_tensor(input)
    flat, member = _bags(index, offsets, include_last_offset)
    rows = embedding(flat, weight, None, max_norm, norm_type, scale_grad_by_freq, sparse)
    membership = Tensor._wrap(member.astype(weight.dtype.numpy))
    if padding_idx is not None:
        kept = _f.to_dtype(_f.ne(flat, padding_idx % weight.shape[0]), weight.dtype)
        membership = _f.mul(membership, kept)
    if mode == "max":
        taken = _f.gt(_f.unsqueeze(membership, -1), 0.0)
        picked = _f.amax(_f.where(taken, _f.unsqueeze(rows, 0), -np.inf), 1)
        return _f.where(_f.gt(_f.sum(membership, 1, keepdim=True), 0.0), picked, 0.0)
    if per_sample_weights is not None:
        membership = _f.mul(membership, _f.as_tensor(per_sample_weights))
    total = _f.matmul(membership, rows)
    if mode == "sum":
        return total
    return _f.div(total, _f.clamp(_f.sum(membership, 1, keepdim=True), min=1.0))


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding along a new last dim; num_classes=-1 takes the largest index + 1."""
    index = _f.as_tensor(tensor)
    if num_classes == -1:
        num_classes = int(index._data.max()) + 1 if index.numel() else 0
    return apply("one_hot", index, num_classes=num_classes, dtype=int64)
