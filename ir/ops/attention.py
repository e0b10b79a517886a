"""Scaled dot-product attention as one op: softmax(q @ k^T * scale, masked) @ v over the last two axes.

q is (..., L, E), k (..., S, E), v (..., S, Ev) with equal leading (batch) axes; the result is (..., L, Ev). The
optional mask broadcasts to (..., L, S): a bool mask keeps the scores where it is True (the others become -inf),
a float mask of q's dtype is added to them. `causal` keeps score (i, j) only where j <= i, torch's top-left aligned
causal mask (torch.tril of an (L, S) matrix of ones), applied after the mask. A row whose every score is -inf gives
NaN, as the softmax of the decomposed form does, unless `zero_masked_rows` is set: then it gives 0, as torch's
F.scaled_dot_product_attention does.

The op is compiled by a kernel of its own (codegen/lower/attention.py) that never stores the (L, S) scores;
`attention_decomposition` writes the same function with registered ops (the chain the fuse_attention pass
recognizes), and the VJP is that chain's gradient.
"""
from __future__ import annotations

import numpy as np

from ..attrs import AttrSpec
from ..errors import DTypeError, ShapeError
from ..registry import defop
from ..row_rules import shared
from ..types import TensorType, bool_
from ._common import require_float, same_dtype, unbroadcast
from ._window import dims
from .reduce import _softmax_impl

_ATTRS = (AttrSpec("scale", "float"), AttrSpec("causal", "bool", False), AttrSpec("zero_masked_rows", "bool", False))


def _check_mask(q: TensorType, mask: TensorType, scores: tuple[int, ...]) -> None:
    if mask.dtype != bool_ and mask.dtype != q.dtype:
        raise DTypeError(f"attention: the mask must be bool (True keeps a score) or {q.dtype.name} (added to the "
                         f"scores), got {mask}")
    if mask.rank > len(scores) or any(d not in (1, s) for d, s in zip(mask.shape[::-1], scores[::-1])):
        raise ShapeError(f"attention: the mask {dims(mask.shape)} does not broadcast to the scores "
                         f"{dims(scores)} (..., L, S)")


def _attention_infer(q: TensorType, k: TensorType, v: TensorType, mask: TensorType | None = None, *,
                     scale: float, causal: bool, zero_masked_rows: bool) -> TensorType:
    same_dtype("attention", q, k, v)
    require_float("attention", q)
    if q.rank < 2 or k.rank != q.rank or v.rank != q.rank:
        raise ShapeError(f"attention: q (..., L, E), k (..., S, E) and v (..., S, Ev) must have one rank of at "
                         f"least 2, got {dims(q.shape)}, {dims(k.shape)}, {dims(v.shape)}")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ShapeError(f"attention: the batch axes of q {dims(q.shape)}, k {dims(k.shape)} and v {dims(v.shape)} "
                         f"differ")
    if k.shape[-1] != q.shape[-1] or v.shape[-2] != k.shape[-2]:
        raise ShapeError(f"attention: expected k (..., S, {q.shape[-1]}) and v (..., S, Ev) for q {dims(q.shape)}, "
                         f"got k {dims(k.shape)} and v {dims(v.shape)}")
    if mask is not None:
        _check_mask(q, mask, q.shape[:-1] + (k.shape[-2],))
    return q.with_shape(q.shape[:-1] + (v.shape[-1],))


def causal_keep(rows: int, cols: int) -> np.ndarray:
    """torch's causal mask: True at (i, j) where j <= i."""
    return np.tril(np.ones((rows, cols), dtype=bool))


def _scores(q, k, mask, scale: float, causal: bool) -> np.ndarray:
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(scale)
    ninf = q.dtype.type(-np.inf)
    if mask is not None:
        s = np.where(mask, s, ninf) if mask.dtype == np.bool_ else s + mask
    if causal:
        s = np.where(causal_keep(q.shape[-2], k.shape[-2]), s, ninf)
    return s.astype(q.dtype, copy=False)


def _attention_impl(q, k, v, mask=None, *, scale, causal, zero_masked_rows):
    s = _scores(q, k, mask, scale, causal)
    p = _softmax_impl(s, axis=-1)
    if zero_masked_rows and s.size:
        p = np.where(np.all(s == -np.inf, axis=-1, keepdims=True), q.dtype.type(0), p)
    return np.matmul(p, v).astype(q.dtype, copy=False)


def _swap(e, x):
    rank = len(x.shape)
    return e.transpose(x, perm=tuple(range(rank - 2)) + (rank - 1, rank - 2))


def _masked_scores(e, q, k, mask, scale: float, causal: bool):
    s = e.mul(e.matmul(q, _swap(e, k)), scale)
    if mask is not None:
        s = e.where(mask, s, e.scalar(-np.inf, s)) if mask.dtype == bool_ else e.add(s, mask)
    if causal:
        s = e.where(e.constant(causal_keep(q.shape[-2], k.shape[-2])), s, e.scalar(-np.inf, s))
    return s


def _probabilities(e, s, zero_masked_rows: bool):
    """softmax(s) over the last axis; rows of -inf only give 0 when zero_masked_rows is set."""
    p = e.softmax(s, axis=-1)
    if zero_masked_rows:
        empty = e.eq(e.max(s, axes=(-1,), keepdim=True), -np.inf)
        p = e.where(empty, e.scalar(0.0, p), p)
    return p


def attention_probabilities(e, q, k, mask=None, *, scale: float, causal: bool, zero_masked_rows: bool):
    """The op's softmax(q @ k^T * scale, masked) written with registered ops (the weights v is averaged with)."""
    return _probabilities(e, _masked_scores(e, q, k, mask, scale, causal), zero_masked_rows)


def attention_decomposition(e, q, k, v, mask=None, *, scale: float, causal: bool, zero_masked_rows: bool):
    """The op written with registered ops: matmul, mul, where or add, softmax, matmul (for ONNX export)."""
    p = attention_probabilities(e, q, k, mask, scale=scale, causal=causal, zero_masked_rows=zero_masked_rows)
    return e.matmul(p, v)


def _attention_vjp(e, g, out, q, k, v, mask=None, *, scale, causal, zero_masked_rows):
    """The decomposition's gradient: the probabilities recomputed, then softmax's and both matmuls' rules."""
    p = attention_probabilities(e, q, k, mask, scale=scale, causal=causal, zero_masked_rows=zero_masked_rows)
    dv = e.matmul(_swap(e, p), g)
    dp = e.matmul(g, _swap(e, v))
    ds = e.mul(p, e.sub(dp, e.sum(e.mul(dp, p), axes=(-1,), keepdim=True)))
    dq = e.mul(e.matmul(ds, k), scale)
    dk = e.mul(e.matmul(_swap(e, ds), q), scale)
    if mask is None:
        return dq, dk, dv
    dmask = None if mask.dtype == bool_ else unbroadcast(e, ds, tuple(mask.shape))
    return dq, dk, dv, dmask


def _attention_work(node) -> int:
    """Multiply-adds of both products (every score of every row), plus the elements written."""
    q, k, v = node.inputs[:3]
    rows = q.type.size // max(q.shape[-1], 1)
    return rows * k.shape[-2] * (q.shape[-1] + v.shape[-1]) + node.out.type.size


def _attention_rows(node, carried: tuple[bool, ...], rows: int):
    """Row by row along a batch axis that queries, keys and values all carry; a mask carries it too or broadcasts."""
    rank = len(node.out.shape)
    q, k, v, *mask = zip(node.inputs, carried)
    if rank < 3 or not all(c and len(x.shape) == rank for x, c in (q, k, v)):
        return None
    if mask and not (len(mask[0][0].shape) == rank if mask[0][1] else shared(mask[0][0], rank)):
        return None
    return node.attr


attention = defop(
    "attention", ("q", "k", "v", "mask?"), infer=_attention_infer, impl=_attention_impl, vjp=_attention_vjp,
    attrs=_ATTRS, work=_attention_work, rows=_attention_rows,
    doc="softmax(q @ k^T * scale + mask) @ v over (..., L, E) queries, (..., S, E) keys and (..., S, Ev) values; "
        "a bool mask keeps scores where True, a float mask is added, causal keeps j <= i; rows with every score "
        "-inf give NaN, or 0 with zero_masked_rows (torch's F.scaled_dot_product_attention).")
