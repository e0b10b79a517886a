"""Loss modules (CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss,
KLDivLoss, the margin, embedding and triplet losses, PoissonNLLLoss, GaussianNLLLoss), as torch.nn's: arguments,
defaults, and weights kept as buffers."""
from __future__ import annotations

from typing import Any, Callable

from ... import functions as _f
from .. import functional as F
from ..module import Module
from .distance import PairwiseDistance

_REDUCTIONS = ("none", "mean", "sum")


def _checked_reduction(size_average: bool | None, reduce: bool | None, reduction: str,
                       allowed: tuple[str, ...] = _REDUCTIONS) -> str:
    reduction = F._reduction(size_average, reduce, reduction)
    if reduction not in allowed:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _buffer(value: Any) -> Any:
    return None if value is None else _f.as_tensor(value).detach()


class _Loss(Module):
    """A loss with torch's reduction argument and its deprecated size_average/reduce spellings."""

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = _checked_reduction(size_average, reduce, reduction)


class CrossEntropyLoss(Module):
    """Softmax cross entropy between logits (N, C, ...) and class indices or class probabilities.

    A per-class `weight` is kept as the buffer "weight" (in the state dict, never trained), as torch.
    """

    def __init__(self, weight: Any = None, size_average: bool | None = None, ignore_index: int = -100,
                 reduce: bool | None = None, reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
        self.register_buffer("weight", _buffer(weight))
        self.ignore_index, self.label_smoothing = int(ignore_index), float(label_smoothing)
        self.reduction = _checked_reduction(size_average, reduce, reduction)

    def forward(self, input: Any, target: Any) -> Any:
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class MSELoss(_Loss):
    """Mean (or summed, or per-element) squared difference between input and target."""

    def forward(self, input: Any, target: Any) -> Any:
        return F.mse_loss(input, target, reduction=self.reduction)


class NLLLoss(Module):
    """Negative log-likelihood of class indices given log-probabilities; `weight` per class (a buffer)."""

    def __init__(self, weight: Any = None, size_average: bool | None = None, ignore_index: int = -100,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__()
        self.register_buffer("weight", _buffer(weight))
        self.ignore_index = int(ignore_index)
        self.reduction = _checked_reduction(size_average, reduce, reduction)

    def forward(self, input: Any, target: Any) -> Any:
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean (or summed, or per-element) absolute difference."""

    def forward(self, input: Any, target: Any) -> Any:
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(Module):
    """Squared difference below beta (scaled by 1/(2 beta)), absolute difference above."""

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
                 beta: float = 1.0) -> None:
        super().__init__()
        self.reduction, self.beta = _checked_reduction(size_average, reduce, reduction), float(beta)

    def forward(self, input: Any, target: Any) -> Any:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(Module):
    """Half the squared difference below delta, delta * (|d| - delta / 2) above."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__()
        self.reduction, self.delta = _checked_reduction(None, None, reduction), float(delta)

    def forward(self, input: Any, target: Any) -> Any:
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class BCELoss(Module):
    """Binary cross entropy between probabilities and targets; `weight` per element (a buffer)."""

    def __init__(self, weight: Any = None, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__()
        self.register_buffer("weight", _buffer(weight))
        self.reduction = _checked_reduction(size_average, reduce, reduction)

    def forward(self, input: Any, target: Any) -> Any:
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(Module):
    """Binary cross entropy of sigmoid(logits), computed stably; `weight` and `pos_weight` are buffers."""

    def __init__(self, weight: Any = None, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean", pos_weight: Any = None) -> None:
        super().__init__()
        self.register_buffer("weight", _buffer(weight))
        self.register_buffer("pos_weight", _buffer(pos_weight))
        self.reduction = _checked_reduction(size_average, reduce, reduction)

    def forward(self, input: Any, target: Any) -> Any:
        return F.binary_cross_entropy_with_logits(input, target, weight=self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class KLDivLoss(Module):
    """Kullback-Leibler divergence of targets from log-probabilities (reduction may be 'batchmean')."""

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
                 log_target: bool = False) -> None:
        super().__init__()
        self.reduction = _checked_reduction(size_average, reduce, reduction, _REDUCTIONS + ("batchmean",))
        self.log_target = bool(log_target)

    def forward(self, input: Any, target: Any) -> Any:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class _MarginLoss(_Loss):
    """A loss with a `margin`."""

    def __init__(self, margin: float, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = float(margin)


class MarginRankingLoss(_MarginLoss):
    """max(0, -target * (input1 - input2) + margin)."""

    def __init__(self, margin: float = 0.0, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(margin, size_average, reduce, reduction)

    def forward(self, input1: Any, input2: Any, target: Any) -> Any:
        return F.margin_ranking_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_MarginLoss):
    """input where target is 1, max(0, margin - input) where it is -1."""

    def __init__(self, margin: float = 1.0, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(margin, size_average, reduce, reduction)

    def forward(self, input: Any, target: Any) -> Any:
        return F.hinge_embedding_loss(input, target, margin=self.margin, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    """log(1 + exp(-target * input)): the logistic loss of +-1 targets."""

    def forward(self, input: Any, target: Any) -> Any:
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class CosineEmbeddingLoss(_MarginLoss):
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it is -1."""

    def __init__(self, margin: float = 0.0, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(margin, size_average, reduce, reduction)

    def forward(self, input1: Any, input2: Any, target: Any) -> Any:
        return F.cosine_embedding_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class TripletMarginLoss(_MarginLoss):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)) with the p-norm pairwise distance d."""

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                 size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean") -> None:
        if margin <= 0:
            raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead")
        super().__init__(margin, size_average, reduce, reduction)
        self.p, self.eps, self.swap = float(p), float(eps), bool(swap)

    def forward(self, anchor: Any, positive: Any, negative: Any) -> Any:
        return F.triplet_margin_loss(anchor, positive, negative, margin=self.margin, p=self.p, eps=self.eps,
                                     swap=self.swap, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)) for any distance function d of two tensors; the
    default nn.PairwiseDistance() is a child module, as torch."""

    def __init__(self, *, distance_function: Callable[[Any, Any], Any] | None = None, margin: float = 1.0,
                 swap: bool = False, reduction: str = "mean") -> None:
        super().__init__(None, None, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater than 0, got {margin} "
                             f"instead")
        self.distance_function = distance_function if distance_function is not None else PairwiseDistance()
        self.margin, self.swap = margin, swap

    def forward(self, anchor: Any, positive: Any, negative: Any) -> Any:
        return F.triplet_margin_with_distance_loss(anchor, positive, negative,
                                                   distance_function=self.distance_function, margin=self.margin,
                                                   swap=self.swap, reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    """Poisson negative log-likelihood of targets given log-rates (or rates, with log_input=False)."""

    def __init__(self, log_input: bool = True, full: bool = False, size_average: bool | None = None,
                 eps: float = 1e-8, reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = bool(log_input), bool(full), float(eps)

    def forward(self, log_input: Any, target: Any) -> Any:
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full, eps=self.eps,
                                  reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """Gaussian negative log-likelihood of targets given means and variances (clamped to at least eps)."""

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean") -> None:
        super().__init__(None, None, reduction)
        self.full, self.eps = bool(full), float(eps)

    def forward(self, input: Any, target: Any, var: Any) -> Any:
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_Loss):
    """Per sample, the mean over classes of the binary cross entropy of sigmoid(input); `weight` per class (a
    buffer)."""

    def __init__(self, weight: Any = None, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _buffer(weight))

    def forward(self, input: Any, target: Any) -> Any:
        return F.multilabel_soft_margin_loss(input, target, weight=self.weight, reduction=self.reduction)


class MultiMarginLoss(_Loss):
    """Multi-class hinge loss of scores and class indices (p 1 or 2); `weight` per class (a buffer)."""

    def __init__(self, p: int = 1, margin: float = 1.0, weight: Any = None, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError("only p == 1 and p == 2 supported")
        weight = _buffer(weight)
        if weight is not None and weight.ndim != 1:
            raise ValueError(f"MultiMarginLoss: expected weight to be None or 1D tensor, got {weight.ndim}D instead")
        self.register_buffer("weight", weight)
        self.p, self.margin = int(p), float(margin)

    def forward(self, input: Any, target: Any) -> Any:
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin, weight=self.weight,
                                   reduction=self.reduction)


__all__ = ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss",
           "BCEWithLogitsLoss", "KLDivLoss", "MarginRankingLoss", "HingeEmbeddingLoss", "SoftMarginLoss",
           "CosineEmbeddingLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss", "PoissonNLLLoss",
           "GaussianNLLLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss"]
