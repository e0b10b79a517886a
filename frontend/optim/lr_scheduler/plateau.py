"""ReduceLROnPlateau: cut the learning rate when a metric stops improving (torch.optim.lr_scheduler, same rule)."""
from __future__ import annotations

import math
import warnings
from typing import Any, Literal, SupportsFloat

from ..options import OptionError, reject_unknown
from .base import EPOCH_DEPRECATION_WARNING, LRScheduler, group_values, scheduled

MODES = ("min", "max")
THRESHOLD_MODES = ("rel", "abs")


class ReduceLROnPlateau(LRScheduler):
    """Multiply the learning rate by factor after more than `patience` epochs without improvement of the metric."""

    def __init__(self, optimizer: Any, mode: Literal["min", "max"] = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: Literal["rel", "abs"] = "rel", cooldown: int = 0,
                 min_lr: list[float] | float = 0, eps: float = 1e-8, **unknown: Any) -> None:
        reject_unknown("ReduceLROnPlateau", unknown, ReduceLROnPlateau.__init__)
        if factor >= 1.0:
            raise OptionError(f"ReduceLROnPlateau: factor should be < 1.0, got {factor}")
        self.factor = factor
        self.optimizer = scheduled("ReduceLROnPlateau", optimizer)
        groups = self.optimizer.param_groups
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(groups):
                raise OptionError(f"ReduceLROnPlateau: expected {len(groups)} min_lrs, got {len(min_lr)}")
            self.default_min_lr, self.min_lrs = None, list(min_lr)
        else:
            self.default_min_lr, self.min_lrs = min_lr, [min_lr] * len(groups)
        self.patience, self.cooldown, self.eps = patience, cooldown, eps
        self.last_epoch = 0
        self._last_lr = group_values(self.optimizer, "lr")
        self._init_is_better(mode=mode, threshold=threshold, threshold_mode=threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics: SupportsFloat, epoch: int | None = None) -> None:  # type: ignore[override]
        """Record the epoch's metric and reduce the learning rate if it has not improved for long enough."""
        try:
            current = float(metrics)
        except (TypeError, ValueError):
            raise OptionError(f"ReduceLROnPlateau.step: metrics must be a number, got {type(metrics).__name__}") \
                from None
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs in the cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = group_values(self.optimizer, "lr")

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise OptionError(f"ReduceLROnPlateau: the optimizer has {len(groups)} parameter groups but "
                                  f"min_lr has {len(self.min_lrs)} values; set min_lrs to match")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for i, group in enumerate(groups):
            old_lr = float(group["lr"])
            new_lr = max(old_lr * self.factor, self.min_lrs[i])
            if old_lr - new_lr > self.eps:
                group["lr"] = new_lr

    @property
    def in_cooldown(self) -> bool:
        """Whether the scheduler is waiting out its cooldown after a reduction."""
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min":
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in MODES:
            raise OptionError(f"ReduceLROnPlateau: mode {mode!r} is unknown; valid modes: 'min', 'max'")
        if threshold_mode not in THRESHOLD_MODES:
            raise OptionError(f"ReduceLROnPlateau: threshold_mode {threshold_mode!r} is unknown; valid: 'rel', 'abs'")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._init_is_better(mode=self.mode, threshold=self.threshold, threshold_mode=self.threshold_mode)
