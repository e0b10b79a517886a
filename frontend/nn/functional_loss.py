"""torch.nn.functional's elementwise losses (l1, smooth_l1, huber, the binary cross entropies, kl_div), each a
composition of registered ops, so eager, autodiff, tracing and compiled graphs all get them from the parts."""
from __future__ import annotations

from typing import Any

from .. import functions as _f
from .. import math_functions as _m
from ..promotion import binary_operands
from ..tensor import Tensor

__all__ = ["l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
           "kl_div"]

REDUCTIONS = ("none", "mean", "sum")


def legacy_reduction(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    """torch's mapping of the deprecated size_average/reduce flags onto `reduction`."""
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def checked_reduction(function: str, reduction: str, allowed: tuple[str, ...] = REDUCTIONS) -> str:
    """`reduction` itself, or a ValueError naming the function, the argument and the supported values."""
    if reduction not in allowed:
        raise ValueError(f"{function}: reduction={reduction!r} is not supported; expected one of "
                         f"{', '.join(repr(r) for r in allowed)}")
    return reduction


def reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    """The per-element loss kept, summed or averaged."""
    if reduction == "none":
        return loss
    return _f.sum(loss) if reduction == "sum" else _f.mean(loss)


def _distance(input: Any, target: Any) -> Tensor:
    """|input - target|, broadcast as torch."""
    return _f.abs(_f.sub(*binary_operands(input, target)))


def l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
            reduction: str = "mean") -> Tensor:
    """|input - target|, reduced."""
    reduction = checked_reduction("l1_loss", legacy_reduction(size_average, reduce, reduction))
    return reduce_loss(_distance(input, target), reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 * d**2 / beta where d = |input - target| < beta, else d - 0.5 * beta; beta=0 is the l1 loss."""
    reduction = checked_reduction("smooth_l1_loss", legacy_reduction(size_average, reduce, reduction))
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    d = _distance(input, target)
    if beta == 0.0:
        return reduce_loss(d, reduction)
    loss = _f.where(_f.lt(d, beta), _f.mul(_f.mul(d, d), 0.5 / beta), _f.sub(d, 0.5 * beta))
    return reduce_loss(loss, reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:
    """0.5 * d**2 where d = |input - target| < delta, else delta * (d - 0.5 * delta); optionally weighted."""
    checked_reduction("huber_loss", reduction)
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    d = _distance(input, target)
    loss = _f.where(_f.lt(d, delta), _f.mul(_f.mul(d, d), 0.5), _f.mul(_f.sub(d, 0.5 * delta), delta))
    return reduce_loss(loss if weight is None else _f.mul(loss, weight), reduction)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Tensor:
    """-(target * log(input) + (1 - target) * log(1 - input)), each log clamped at -100 as torch."""
    reduction = checked_reduction("binary_cross_entropy", legacy_reduction(size_average, reduce, reduction))
    x, t = binary_operands(input, target)
    if tuple(x.shape) != tuple(t.shape):
        raise ValueError(f"binary_cross_entropy: using a target size ({tuple(t.shape)}) that is different to the "
                         f"input size ({tuple(x.shape)}) is not supported")
    log_p = _f.clamp(_f.log(x), min=-100.0)
    log_q = _f.clamp(_f.log(_f.sub(1.0, x)), min=-100.0)
    loss = _f.neg(_f.add(_f.mul(t, log_p), _f.mul(_f.sub(1.0, t), log_q)))
    return reduce_loss(loss if weight is None else _f.mul(loss, weight), reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     size_average: bool | None = None, reduce: bool | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """binary_cross_entropy(sigmoid(input), target) computed stably from the logits, as torch:
    (1 - t) * x + (1 + (pos_weight - 1) * t) * (log1p(exp(-|x|)) + max(-x, 0))."""
    reduction = checked_reduction("binary_cross_entropy_with_logits",
                                  legacy_reduction(size_average, reduce, reduction))
    x, t = binary_operands(input, target)
    if tuple(x.shape) != tuple(t.shape):
        raise ValueError(f"binary_cross_entropy_with_logits: target size ({tuple(t.shape)}) must be the same as "
                         f"input size ({tuple(x.shape)})")
    softplus_neg = _f.add(_m.log1p(_f.exp(_f.neg(_f.abs(x)))), _f.clamp(_f.neg(x), min=0.0))
    scale = softplus_neg if pos_weight is None else \
        _f.mul(_f.add(_f.mul(_f.sub(pos_weight, 1.0), t), 1.0), softplus_neg)
    loss = _f.add(_f.mul(_f.sub(1.0, t), x), scale)
    return reduce_loss(loss if weight is None else _f.mul(loss, weight), reduction)


def kl_div(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
           reduction: str = "mean", log_target: bool = False) -> Tensor:
    """Pointwise target * (log(target) - input) for log-probabilities `input` (0 where target is 0); with
    log_target, exp(target) * (target - input). reduction="batchmean" divides the sum by the batch size."""
    reduction = checked_reduction("kl_div", legacy_reduction(size_average, reduce, reduction),
                                  REDUCTIONS + ("batchmean",))
    x, t = binary_operands(input, target)
    if log_target:
        loss = _f.mul(_f.exp(t), _f.sub(t, x))
    else:
        log_t = _f.log(_f.where(_f.gt(t, 0.0), t, 1.0))  # xlogy: 0 where target is 0, and no log(0) evaluated
        loss = _f.mul(t, _f.sub(log_t, x))
    if reduction == "batchmean":
        return _f.div(_f.sum(loss), x.shape[0] if x.ndim else 1)
    return reduce_loss(loss, reduction)
