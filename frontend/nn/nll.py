"""Negative log-likelihood over class indices, composed from registered ops (gather, where, index_select):
torch's nll_loss, and the class-index part cross_entropy with a class weight shares."""
from __future__ import annotations

from typing import Any

from braze.ir.errors import DTypeError, ShapeError

from .. import functions as _f
from ..dispatch import apply
from ..tensor import Tensor


def class_last(t: Tensor, axis: int) -> Tensor:
    """Move the class axis to the end, so one gather picks each sample's class."""
    return _f.permute(t, [a for a in range(t.ndim) if a != axis] + [axis]) if t.ndim > 1 else t


def picked_loss(logp: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int) -> tuple[Tensor, Tensor]:
    """Per sample: -weight[target] * logp[target] (0 where ignored), and the weights (0 where ignored).

    `logp` has the classes last; `target` holds class indices of the per-sample shape.
    """
    valid = _f.ne(target, ignore_index)
    safe = _f.where(valid, target, 0)
    picked = _f.squeeze(_f.gather(logp, -1, _f.unsqueeze(safe, -1)), -1)
    if weight is None:
        w_target = _f.to_dtype(valid, logp.dtype)
    else:
        w_target = _f.where(valid, apply("index_select", weight, safe, axis=0), 0.0)
    return _f.neg(_f.mul(picked, w_target)), w_target


def reduce_weighted(loss: Tensor, w_target: Tensor, reduction: str) -> Tensor:
    """torch's reductions of a class-index loss: "mean" divides by the total weight of the counted samples."""
    if reduction == "none":
        return loss
    return _f.sum(loss) if reduction == "sum" else _f.div(_f.sum(loss), _f.sum(w_target))


def nll_loss(input: Tensor, target: Any, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """torch.nn.functional.nll_loss on log-probabilities (N, C, d1, ...) or (C,) and class indices."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    target = _f.as_tensor(target)
    if target.dtype.kind not in ("int", "uint"):
        raise DTypeError(f"nll_loss: expected class-index targets (int64), got {target.dtype}")
    axis = 1 if input.ndim >= 2 else 0
    per_sample = tuple(input.shape[:axis]) + tuple(input.shape[axis + 1:])
    if tuple(target.shape) != per_sample:
        raise ShapeError(f"nll_loss: expected a target of shape {per_sample} for input {tuple(input.shape)}, got "
                         f"{tuple(target.shape)}")
    if weight is not None and tuple(weight.shape) != (input.shape[axis],):
        raise ShapeError(f"nll_loss: weight must have shape ({input.shape[axis]},), one per class, got "
                         f"{tuple(weight.shape)}")
    loss, w_target = picked_loss(class_last(input, axis), target, weight, ignore_index)
    return reduce_weighted(loss, w_target, reduction)
