"""Loss modules (CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss,
KLDivLoss), as torch.nn's: arguments, defaults, and weights kept as buffers."""
from __future__ import annotations

from typing import Any

from ... import functions as _f
from .. import functional as F
from ..module import Module

_REDUCTIONS = ("none", "mean", "sum")


def _checked_reduction(size_average: bool | None, reduce: bool | None, reduction: str,
                       allowed: tuple[str, ...] = _REDUCTIONS) -> str:
    reduction = F._reduction(size_average, reduce, reduction)
    if reduction not in allowed:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _buffer(value: Any) -> Any:
    return None if value is None else _f.as_tensor(value).detach()


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


class MSELoss(Module):
    """Mean (or summed, or per-element) squared difference between input and target."""

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = _checked_reduction(size_average, reduce, reduction)

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


class L1Loss(Module):
    """Mean (or summed, or per-element) absolute difference."""

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = _checked_reduction(size_average, reduce, reduction)

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


__all__ = ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss",
           "BCEWithLogitsLoss", "KLDivLoss"]
