"""Loss modules CrossEntropyLoss and MSELoss, as torch.nn's (arguments, defaults, the class-weight buffer)."""
from __future__ import annotations

from typing import Any

from ... import functions as _f
from .. import functional as F
from ..module import Module

_REDUCTIONS = ("none", "mean", "sum")


def _checked_reduction(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    reduction = F._reduction(size_average, reduce, reduction)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


class CrossEntropyLoss(Module):
    """Softmax cross entropy between logits (N, C, ...) and class indices or class probabilities.

    A per-class `weight` is kept as the buffer "weight" (in the state dict, never trained), as torch.
    """

    def __init__(self, weight: Any = None, size_average: bool | None = None, ignore_index: int = -100,
                 reduce: bool | None = None, reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
        self.register_buffer("weight", None if weight is None else _f.as_tensor(weight).detach())
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


__all__ = ["CrossEntropyLoss", "MSELoss"]
