"""Loss ops with torch.nn.functional semantics: cross_entropy (class indices or class probabilities) and mse_loss."""
from __future__ import annotations

import numpy as np

from ..attrs import AttrSpec
from ..errors import AttributeSchemaError, BrazeError, DTypeError, ShapeError
from ..registry import defop
from ..types import TensorType
from ._common import broadcast_shapes, require_float, same_dtype, unbroadcast
from ._window import dims

_REDUCTION = AttrSpec("reduction", "str", "mean", choices=("mean", "sum", "none"))


def _reduced_type(t: TensorType, reduction: str) -> TensorType:
    return t if reduction == "none" else t.with_shape(())


def _inverse(count: int) -> float:
    """1/count for a mean's gradient; the mean of nothing is NaN (as its forward value), and so is its gradient."""
    return 1.0 / count if count else float("nan")


# --- cross entropy ----------------------------------------------------------------------------------------


def _class_axis(rank: int) -> int:
    """Classes sit on axis 1 of a batched input (N,C,d1,...) and on axis 0 of an unbatched one (C,)."""
    return 1 if rank >= 2 else 0


def _cross_entropy_infer(x: TensorType, target: TensorType, *, reduction, ignore_index,
                         label_smoothing) -> TensorType:
    require_float("cross_entropy", x)
    if not 0.0 <= label_smoothing <= 1.0:
        raise AttributeSchemaError(f"cross_entropy: attribute 'label_smoothing' must be in [0, 1], "
                                   f"got {label_smoothing}")
    if x.rank == 0:
        raise ShapeError("cross_entropy: expected an input of shape (C,) or (N,C,d1,...), got ()")
    axis = _class_axis(x.rank)
    if x.shape[axis] == 0:
        raise ShapeError(f"cross_entropy: input {dims(x.shape)} has no classes (axis {axis} has size 0)")
    per_sample = x.shape[:axis] + x.shape[axis + 1:]
    if target.dtype.is_float:
        same_dtype("cross_entropy", x, target)
        if target.shape != x.shape:
            raise ShapeError(f"cross_entropy: class-probability target must have the input's shape {dims(x.shape)}, "
                             f"got {dims(target.shape)}")
    elif target.dtype.kind == "int" and target.dtype.bits >= 32:
        if target.shape != per_sample:
            raise ShapeError(f"cross_entropy: expected a class-index target of shape {dims(per_sample)} for input "
                             f"{dims(x.shape)}, got {dims(target.shape)}")
    else:
        raise DTypeError(f"cross_entropy: target must be class indices (int64 or int32) or class probabilities "
                         f"({x.dtype}), got {target}")
    return _reduced_type(TensorType(per_sample, x.dtype), reduction)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _cross_entropy_impl(x, target, *, reduction, ignore_index, label_smoothing):
    axis, classes = _class_axis(x.ndim), x.shape[_class_axis(x.ndim)]
    logp = _log_softmax(x, axis)
    if target.dtype.kind == "f":
        weights = target * (1.0 - label_smoothing) + label_smoothing / classes
        loss = -(weights * logp).sum(axis=axis)
        count = loss.size
    else:
        valid = target != ignore_index
        bad = target[valid & ((target < 0) | (target >= classes))]
        if bad.size:
            raise BrazeError(f"cross_entropy: target {bad.flat[0]} is out of bounds for {classes} classes")
        picked = np.take_along_axis(logp, np.expand_dims(np.where(valid, target, 0), axis), axis)
        loss = -(1.0 - label_smoothing) * np.squeeze(picked, axis)
        if label_smoothing:
            loss = loss - (label_smoothing / classes) * logp.sum(axis=axis)
        loss = np.where(valid, loss, 0.0)
        count = int(valid.sum())
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        loss = loss.sum() / np.asarray(count, x.dtype)
    return np.asarray(loss, dtype=x.dtype)


def _sample_scale(e, g, weights, reduction: str, count):
    """The cotangent of each sample's loss: g itself, or g spread by a sum/mean reduction (scaled by weights)."""
    if reduction == "none":
        return g if weights is None else e.mul(g, weights)
    if weights is None:
        return e.mul(g, _inverse(count)) if reduction == "mean" else g
    scaled = e.mul(weights, g)
    return e.div(scaled, e.sum(weights, axes=None, keepdim=False)) if reduction == "mean" else scaled


def _class_last_to_axis(e, onehot, rank: int):
    """Move the class axis that one_hot appends to axis 1 for batched inputs with extra dims."""
    if rank <= 2:
        return onehot
    t = rank - 1
    return e.transpose(onehot, perm=(0, t) + tuple(range(1, t)))


def _cross_entropy_vjp(e, g, out, x, target, *, reduction, ignore_index, label_smoothing):
    rank = len(x.shape)
    axis, classes = _class_axis(rank), x.shape[_class_axis(rank)]
    if target.dtype.is_float:
        per_sample = _sample_scale(e, g, None, reduction, int(np.prod(x.shape)) // classes)
        if reduction == "none":
            per_sample = e.unsqueeze(per_sample, axes=(axis,))
        weights = e.add(e.mul(target, 1.0 - label_smoothing), label_smoothing / classes)
        total = e.sum(weights, axes=(axis,), keepdim=True)
        dx = e.mul(e.sub(e.mul(e.softmax(x, axis=axis), total), weights), per_sample)
        dtarget = e.mul(e.mul(e.log_softmax(x, axis=axis), per_sample), label_smoothing - 1.0)
        return dx, dtarget
    valid = e.ne(target, ignore_index)
    onehot = e.one_hot(e.where(valid, target, e.scalar(0, target)), num_classes=classes, dtype=x.dtype)
    weights = _class_last_to_axis(e, onehot, rank)
    if label_smoothing:
        weights = e.add(e.mul(weights, 1.0 - label_smoothing), label_smoothing / classes)
    per_sample = e.unsqueeze(_sample_scale(e, g, e.cast(valid, dtype=x.dtype), reduction, None), axes=(axis,))
    return e.mul(e.sub(e.softmax(x, axis=axis), weights), per_sample), None


def _reduced(e, loss, reduction: str, count):
    """The per-sample loss kept, summed, or summed and divided by `count` (a number or a value)."""
    if reduction == "none":
        return loss
    total = e.sum(loss, axes=None, keepdim=False)
    if reduction == "sum":
        return total
    return e.div(total, count if hasattr(count, "shape") else e.scalar(count, loss))


def _cross_entropy_decompose(e, x, target, *, reduction, ignore_index, label_smoothing):
    """log_softmax, then the target's (smoothed) share of it picked with a one-hot product, as the reference."""
    rank = len(x.shape)
    axis, classes = _class_axis(rank), x.shape[_class_axis(rank)]
    logp = e.log_softmax(x, axis=axis)
    if target.dtype.is_float:
        weights = e.add(e.mul(target, 1.0 - label_smoothing), label_smoothing / classes)
        loss = e.neg(e.sum(e.mul(weights, logp), axes=(axis,), keepdim=False))
        return _reduced(e, loss, reduction, int(np.prod(loss.shape)))
    valid = e.ne(target, ignore_index)
    onehot = e.one_hot(e.where(valid, target, e.scalar(0, target)), num_classes=classes, dtype=x.dtype)
    picked = e.sum(e.mul(_class_last_to_axis(e, onehot, rank), logp), axes=(axis,), keepdim=False)
    loss = e.mul(picked, -(1.0 - label_smoothing))
    if label_smoothing:
        loss = e.sub(loss, e.mul(e.sum(logp, axes=(axis,), keepdim=False), label_smoothing / classes))
    loss = e.where(valid, loss, e.scalar(0.0, x))
    return _reduced(e, loss, reduction, e.sum(e.cast(valid, dtype=x.dtype), axes=None, keepdim=False))


cross_entropy = defop(
    "cross_entropy", ("input", "target"), infer=_cross_entropy_infer, impl=_cross_entropy_impl,
    vjp=_cross_entropy_vjp, decompose=_cross_entropy_decompose, category="loss",
    attrs=(_REDUCTION, AttrSpec("ignore_index", "int", -100), AttrSpec("label_smoothing", "float", 0.0)),
    doc="Softmax cross entropy over the class axis, as torch.nn.functional.cross_entropy; mean reduction "
        "divides by the number of non-ignored class-index targets.")

# --- mean squared error -----------------------------------------------------------------------------------


def _mse_infer(x: TensorType, target: TensorType, *, reduction) -> TensorType:
    dtype = same_dtype("mse_loss", x, target)
    require_float("mse_loss", x)
    return _reduced_type(TensorType(broadcast_shapes("mse_loss", x, target), dtype), reduction)


def _mse_impl(x, target, *, reduction):
    diff = x - target
    loss = diff * diff
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        loss = loss.sum() / np.asarray(loss.size, x.dtype)  # NaN when empty, as torch, without numpy's warning
    return np.asarray(loss, dtype=x.dtype)


def _mse_vjp(e, g, out, x, target, *, reduction):
    diff = e.sub(x, target)
    count = int(np.prod(diff.shape))
    scale = e.mul(g, 2.0 * _inverse(count) if reduction == "mean" else 2.0)
    g_diff = e.mul(diff, scale)
    return unbroadcast(e, g_diff, tuple(x.shape)), unbroadcast(e, e.neg(g_diff), tuple(target.shape))


def _mse_decompose(e, x, target, *, reduction):
    diff = e.sub(x, target)
    loss = e.mul(diff, diff)
    return _reduced(e, loss, reduction, int(np.prod(loss.shape)))


mse_loss = defop(
    "mse_loss", ("input", "target"), infer=_mse_infer, impl=_mse_impl, vjp=_mse_vjp, attrs=(_REDUCTION,),
    decompose=_mse_decompose, category="loss",
    doc="Squared difference, reduced by mean or sum or kept per element, as torch.nn.functional.mse_loss "
        "(operands broadcast).")
