"""torch.nn.functional's elementwise, margin, embedding and likelihood losses (l1, smooth_l1, huber, the binary
cross entropies, kl_div, the margin and triplet losses, poisson and gaussian nll, ...), each a composition of registered
ops, so eager, autodiff, tracing and compiled graphs all get them from the parts."""
from __future__ import annotations

import math
from typing import Any, Callable

from .. import functions as _f
from ..creation import arange, full_like
from ..promotion import as_tensor, binary_operands
from ..tensor import Tensor
from ..trace_context import TRACE
from .functional_activation import log1p_exp, logsigmoid
from .functional_distance import pairwise_distance

__all__ = ["l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
           "kl_div", "margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss", "cosine_embedding_loss",
           "triplet_margin_loss", "triplet_margin_with_distance_loss", "poisson_nll_loss", "gaussian_nll_loss",
           "multilabel_soft_margin_loss", "multi_margin_loss"]

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
    (1 - t) * x + (1 + (pos_weight - 1) * t) * log(1 + exp(-x)), the log by log1p_exp."""
    reduction = checked_reduction("binary_cross_entropy_with_logits",
                                  legacy_reduction(size_average, reduce, reduction))
    x, t = binary_operands(input, target)
    if tuple(x.shape) != tuple(t.shape):
        raise ValueError(f"binary_cross_entropy_with_logits: target size ({tuple(t.shape)}) must be the same as "
                         f"input size ({tuple(x.shape)})")
    softplus_neg = log1p_exp(_f.neg(x))
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


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0,
                        size_average: bool | None = None, reduce: bool | None = None,
                        reduction: str = "mean") -> Tensor:
    """max(0, -target * (input1 - input2) + margin): target 1 asks input1 to rank higher, -1 input2."""
    reduction = checked_reduction("margin_ranking_loss", legacy_reduction(size_average, reduce, reduction))
    x1, x2, y = (as_tensor(t) for t in (input1, input2, target))
    if not x1.ndim == x2.ndim == y.ndim:
        raise ValueError(f"margin_ranking_loss: all input tensors should have the same number of dimensions, got "
                         f"input1: {tuple(x1.shape)}, input2: {tuple(x2.shape)}, target: {tuple(y.shape)}")
    loss = _f.clamp(_f.add(_f.mul(_f.neg(y), _f.sub(x1, x2)), margin), min=0.0)
    return reduce_loss(loss, reduction)


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, size_average: bool | None = None,
                         reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """input where target is 1, max(0, margin - input) where it is -1 (as torch, both terms for any other value)."""
    reduction = checked_reduction("hinge_embedding_loss", legacy_reduction(size_average, reduce, reduction))
    x, y = binary_operands(input, target)
    hinge = _f.where(_f.ne(y, 1.0), _f.clamp(_f.sub(margin, x), min=0.0), 0.0)
    return reduce_loss(_f.add(hinge, _f.where(_f.ne(y, -1.0), x, 0.0)), reduction)


def soft_margin_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
                     reduction: str = "mean") -> Tensor:
    """log(1 + exp(-target * input)) by log1p_exp, which stays finite where exp overflows (torch gives inf there)."""
    reduction = checked_reduction("soft_margin_loss", legacy_reduction(size_average, reduce, reduction))
    x, y = binary_operands(input, target)
    return reduce_loss(log1p_exp(_f.neg(_f.mul(x, y))), reduction)


# torch's guard against zero magnitudes in cosine_embedding_loss
_COSINE_EMBEDDING_EPS = 1e-12


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0,
                          size_average: bool | None = None, reduce: bool | None = None,
                          reduction: str = "mean") -> Tensor:
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it is -1; the cosine along the last
    dim of (N, D) inputs with (N,) targets, or of (D,) inputs with a 0-d target."""
    reduction = checked_reduction("cosine_embedding_loss", legacy_reduction(size_average, reduce, reduction))
    x1, x2, y = (as_tensor(t) for t in (input1, input2, target))
    if y.ndim > 1:
        raise ValueError(f"cosine_embedding_loss: 0D or 1D target tensor expected, multi-target not supported, got "
                         f"target of shape {tuple(y.shape)}")
    if not x1.ndim == x2.ndim == y.ndim + 1:
        raise ValueError(f"cosine_embedding_loss: {y.ndim}D target tensor expects {y.ndim + 1}D input tensors, but "
                         f"found inputs with sizes {tuple(x1.shape)} and {tuple(x2.shape)}")
    axis = y.ndim
    magnitudes = [_f.add(_f.sum(_f.mul(t, t), axis), _COSINE_EMBEDDING_EPS) for t in (x1, x2)]
    cos = _f.div(_f.sum(_f.mul(x1, x2), axis), _f.sqrt(_f.mul(*magnitudes)))
    positive = _f.where(_f.eq(y, 1), _f.sub(1.0, cos), 0.0)
    negative = _f.where(_f.eq(y, -1), _f.clamp(_f.sub(cos, margin), min=0.0), 0.0)
    return reduce_loss(_f.add(positive, negative), reduction)


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average: bool | None = None,
                        reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """max(0, margin + d(anchor, positive) - d(anchor, negative)) with pairwise_distance d; with swap, the negative's
    distance is the smaller of its distances to the anchor and to the positive."""
    reduction = checked_reduction("triplet_margin_loss", legacy_reduction(size_average, reduce, reduction))
    return _triplet("triplet_margin_loss", anchor, positive, negative, lambda x, y: pairwise_distance(x, y, p, eps),
                    margin, swap, reduction)


def triplet_margin_with_distance_loss(anchor: Tensor, positive: Tensor, negative: Tensor, *,
                                      distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
                                      margin: float = 1.0, swap: bool = False, reduction: str = "mean") -> Tensor:
    """triplet_margin_loss with any distance_function of two tensors (default pairwise_distance)."""
    reduction = checked_reduction("triplet_margin_with_distance_loss", reduction)
    return _triplet("triplet_margin_with_distance_loss", anchor, positive, negative,
                    pairwise_distance if distance_function is None else distance_function, margin, swap, reduction)


def _triplet(function: str, anchor: Tensor, positive: Tensor, negative: Tensor,
             distance: Callable[[Tensor, Tensor], Tensor], margin: float, swap: bool, reduction: str) -> Tensor:
    """max(0, margin + distance(anchor, positive) - distance(anchor, negative)), reduced; with swap, the negative's
    distance is the smaller of its distances to the anchor and to the positive."""
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    a, pos, neg = (as_tensor(t) for t in (anchor, positive, negative))
    if not a.ndim == pos.ndim == neg.ndim:
        raise ValueError(f"{function}: the anchor, positive, and negative tensors are expected to have the same number "
                         f"of dimensions, but got: anchor {a.ndim}D, positive {pos.ndim}D, and negative {neg.ndim}D "
                         f"inputs")
    d_pos, d_neg = distance(a, pos), distance(a, neg)
    if swap:
        d_neg = _f.minimum(d_neg, distance(pos, neg))
    return reduce_loss(_f.clamp(_f.sub(_f.add(d_pos, margin), d_neg), min=0.0), reduction)


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,
                     size_average: bool | None = None, eps: float = 1e-8, reduce: bool | None = None,
                     reduction: str = "mean") -> Tensor:
    """Poisson negative log-likelihood: exp(input) - target * input for log-rates, else input - target *
    log(input + eps); `full` adds Stirling's approximation of log(target!) where target > 1."""
    reduction = checked_reduction("poisson_nll_loss", legacy_reduction(size_average, reduce, reduction))
    x, t = binary_operands(input, target)
    if log_input:
        loss = _f.sub(_f.exp(x), _f.mul(t, x))
    else:
        loss = _f.sub(x, _f.mul(t, _f.log(_f.add(x, eps))))
    if full:
        above = _f.gt(t, 1.0)
        log_t = _f.log(_f.where(above, t, 1.0))  # no log of 0 or of a negative evaluated where the term is masked
        stirling = _f.add(_f.sub(_f.mul(t, log_t), t), _f.mul(_f.add(log_t, math.log(2 * math.pi)), 0.5))
        loss = _f.add(loss, _f.where(above, stirling, 0.0))
    return reduce_loss(loss, reduction)


def gaussian_nll_loss(input: Tensor, target: Tensor, var: Tensor | float, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean") -> Tensor:
    """0.5 * (log(max(var, eps)) + (input - target)**2 / max(var, eps)), plus 0.5 * log(2 pi) when `full`.

    var has the input's shape, or one dim fewer or one dim of size 1 (one variance shared along it), or is a
    float. As in torch the clamp to eps changes the value only: the gradient reaches var as if unclamped.
    """
    x, t = binary_operands(input, target)
    if isinstance(var, (int, float)):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = full_like(x, var)
    else:
        var = as_tensor(var)
        if TRACE.interceptor is None and bool((var._data < 0).any()):  # a value check: eager calls only
            raise ValueError("var has negative entry/entries")
    if tuple(var.shape) != tuple(x.shape):
        if tuple(var.shape) == tuple(x.shape[:-1]):
            var = _f.unsqueeze(var, -1)
        elif var.ndim != x.ndim or sum(v for s, v in zip(x.shape, var.shape) if s != v) != 1:
            raise ValueError("var is of incorrect size")
    reduction = checked_reduction("gaussian_nll_loss", reduction)
    var = _f.add(var, _f.sub(_f.clamp(var, min=eps), var).detach())
    loss = _f.mul(_f.add(_f.log(var), _f.div(_f.square(_f.sub(x, t)), var)), 0.5)
    if full:
        loss = _f.add(loss, 0.5 * math.log(2 * math.pi))
    return reduce_loss(loss, reduction)


def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                size_average: bool | None = None, reduce: bool | None = None,
                                reduction: str = "mean") -> Tensor:
    """Per sample, the mean over the classes (last dim) of the binary cross entropy of sigmoid(input) and target,
    from logsigmoid, which keeps both tails; `weight` scales each class."""
    reduction = checked_reduction("multilabel_soft_margin_loss", legacy_reduction(size_average, reduce, reduction))
    x, t = binary_operands(input, target)
    loss = _f.neg(_f.add(_f.mul(t, logsigmoid(x)), _f.mul(_f.sub(1.0, t), logsigmoid(_f.neg(x)))))
    if weight is not None:
        loss = _f.mul(loss, weight)
    return reduce_loss(_f.div(_f.sum(loss, x.ndim - 1), x.shape[-1]), reduction)


def multi_margin_loss(input: Tensor, target: Tensor, p: int = 1, margin: float = 1.0, weight: Tensor | None = None,
                      size_average: bool | None = None, reduce: bool | None = None,
                      reduction: str = "mean") -> Tensor:
    """Multi-class hinge loss of (N, C) or (C,) scores and class indices: per sample, the sum over the other classes
    i of max(0, margin - input[y] + input[i]) ** p, times weight[y], over C."""
    reduction = checked_reduction("multi_margin_loss", legacy_reduction(size_average, reduce, reduction))
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and as_tensor(weight).ndim != 1:
        raise ValueError("weight must be one-dimensional")
    x, y = as_tensor(input), as_tensor(target)
    if x.ndim > 2 or (x.ndim >= 1 and x.shape[-1] == 0):
        raise ValueError(f"multi_margin_loss: expected a non-empty vector or matrix, got input of shape "
                         f"{tuple(x.shape)}")
    samples, classes = (x.shape[0] if x.ndim == 2 else 1), (x.shape[-1] if x.ndim else 1)
    if y.ndim > 1 or y.numel() != samples:
        raise ValueError(f"multi_margin_loss: inconsistent target size, expected {samples} but got {tuple(y.shape)}")
    scores, picked = _f.reshape(x, (samples, classes)), _f.reshape(y, (samples, 1))
    hinge = _f.clamp(_f.add(_f.sub(scores, _f.gather(scores, 1, picked)), margin), min=0.0)
    if p == 2:
        hinge = _f.mul(hinge, hinge)
    if weight is not None:
        hinge = _f.mul(hinge, _f.unsqueeze(_f.index_select(as_tensor(weight), 0, _f.reshape(y, (samples,))), 1))
    others = _f.ne(arange(classes), picked)
    loss = _f.div(_f.sum(_f.where(others, hinge, 0.0), 1), classes)
    return reduce_loss(loss if y.ndim else _f.reshape(loss, ()), reduction)
